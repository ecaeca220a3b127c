"""The benchmarks' helpers (app/bench/): the weight sets they time and the statistics they print."""
from __future__ import annotations

import json

import numpy as np
import pytest

from aipu.app.bench.codec import SHAPES, order0_entropy_bits, trained_like_weights


def test_benchmark_helpers():
    assert order0_entropy_bits(np.array([0, 0, 1, 1])) == 4.0
    weights = trained_like_weights()
    assert {name: w.shape for name, w in weights.items()} == SHAPES
    assert all((np.abs(w).reshape(w.shape[0], -1).max(axis=1) == 0).any() for w in weights.values())


def test_unit_rates_compare_every_unit_and_report_its_figures():
    """The per-unit part of `aipu bench rtl` on Amaranth's simulator (the bench itself runs the Verilog ones);
    SMALL's 1 KiB WEIGHT buffer leaves out the demo model's weights."""
    from aipu.app.bench.rtl import unit_rates
    from aipu.sim.cosim.stimulus import RANDOM
    from tests.rtl.configs import SMALL

    rates = unit_rates(["amaranth"], SMALL, commands=3)
    assert set(rates) == set(RANDOM)
    for name, entry in rates.items():
        run = entry["amaranth"]
        assert run["problems"] == [] and run["cycles"] > 0 and run["cycles_per_s"] > 0, (name, run)
    assert rates["conv"]["amaranth"]["mac_utilisation"]["macs"] > 0
    wdec = rates["wdec"]["amaranth"]["wdec"]
    assert wdec["weights"] > 0 and 0 < wdec["bins_per_cycle"] <= 1.0


def test_units_bench_checks_every_pair_and_reports_it():
    """`aipu bench units` over its whole case table without a time budget (each side still runs a few times):
    every pair agrees as its case claims -- equal, within the tolerance of its definitions, or, for a table, lut8
    on onnxruntime's own table -- and every row carries the figures the JSON promises."""
    pytest.importorskip("onnxruntime")
    from aipu.app.bench import BENCHMARKS
    from aipu.app.bench.units import CASES, GOAL_MAX_RATIO, run
    from aipu.sim import golden

    assert BENCHMARKS["units"] == "aipu.app.bench.units"
    names = [case.name for case in CASES]
    assert len(set(names)) == len(names) and {case.unit for case in CASES} == {"requant", "lut", "pool", "eltwise"}
    assert all(callable(getattr(golden, case.golden.split()[0])) for case in CASES)
    result = run(budget=0)
    assert [row["case"] for row in result["cases"]] == names
    for row in result["cases"]:
        assert row["golden_ms"] > 0 and row["ort_ms"] > 0 and row["golden_over_ort"] > 0, row
        assert row["exact_match"] is True and row["max_abs_diff"] == 0 or row["exact_match"].startswith(
            "not comparable: "), row
        assert row.get("lookup_exact_with_ort_table", False) == (row["golden"] == "lut8"), row
    assert result["goal_max_ratio"] == GOAL_MAX_RATIO == 1.0 and result["geomean_golden_over_ort"] > 0
    assert result["cases_over_goal"] == [row["case"] for row in result["cases"] if row["golden_over_ort"] > 1.0]


@pytest.mark.slow      # about a minute: the ResNet-18-shaped compile and run, a MobileNetV3 compile in a child
def test_compile_bench_compiles_resnet18_and_runs_it_bit_exact():
    """`aipu bench compile`: the ResNet-18-shaped graph compiles and its whole program, run once on the
    interpreter, equals the quantized model on the golden units; the MobileNetV3-shaped CLI compile is measured."""
    from aipu.app.bench import BENCHMARKS
    from aipu.app.bench.compile import run

    assert BENCHMARKS["compile"] == "aipu.app.bench.compile"
    report = run()
    assert report["whole_network"]["bit_exact"] and report["whole_network"]["macs"] > 1.8e9
    assert report["commands_per_unit"]["CONV"] >= 21 and report["commands_per_unit"]["POOL"] >= 2
    assert set(report["stage_seconds"]) >= {"front_end_s", "calibrate_s", "quantize_s", "lower_s"}
    mobilenet = report["mobilenetv3_cli"]        # the CLI compile in a child: its own figures, not the bench's
    assert mobilenet["calibration_samples"] == 64 and mobilenet["wall_s"] > 0 and mobilenet["peak_rss_mib"] > 100


def test_cycle_bench_reports_the_cycle_model_s_figures(tmp_path, digits_data):
    """`aipu bench cycle`'s measurement on the demo network (the bench adds the ResNet-18-shaped program)."""
    from aipu.app.bench import BENCHMARKS
    from aipu.app.bench.cycle import measure
    from aipu.app.models.train_digits import MODEL_PATH
    from aipu.compiler.driver import compile_model
    from aipu.sim.cycle import simulate
    from aipu.sim.machine.memory import Memory

    assert BENCHMARKS["cycle"] == "aipu.app.bench.cycle"
    np.savez(tmp_path / "calibration.npz", images=digits_data["calibration_images"])
    network = compile_model(MODEL_PATH, tmp_path / "calibration.npz").network
    memory = Memory.create(network.program.config, network.dram)
    figures = measure(network.program, memory, repeats=1)
    result = simulate(network.program, memory)
    assert figures["total_cycles"] == result.total_cycles and figures["commands"] == len(network.program)
    assert 0 < figures["mac_utilisation"] <= 1 and figures["simulate_s"] >= 0 and figures["peak_python_mib"] > 0
    assert figures["busy_cycles"] == {unit.name: cycles for unit, cycles in result.busy.items() if cycles}
    assert figures["dram_model"] == "npu" and all(stall > 0 for stall in figures["dram_stall_cycles"].values())


def test_quant_bench_tables_every_weight_format_against_int8(tmp_path, digits_data):
    """`aipu bench quant`'s table on the demo network (the bench adds the real MobileNet-like one)."""
    from aipu.app.bench import BENCHMARKS
    from aipu.app.bench.quant import _table
    from aipu.app.models.train_digits import MODEL_PATH

    assert BENCHMARKS["quant"] == "aipu.app.bench.quant"
    np.savez(tmp_path / "calib.npz", image=digits_data["calibration_images"])
    np.savez(tmp_path / "eval.npz", image=digits_data["eval_images"][:60], labels=digits_data["eval_labels"][:60])
    table = _table(MODEL_PATH, tmp_path / "calib.npz", tmp_path / "eval.npz")
    rows = table["rows"]
    assert set(rows) == {"int8", "int4", "int4-dual", "mixed", "w4a4", "codebook:16", "pow2 weights", "pow2 scheme",
                         "int16 activations", "pow2 activations"}
    assert table["float_top1"] > 0.9
    assert rows["int8"]["weight_bytes_vs_int8"] == 1 and rows["int8"]["cycles_vs_int8"] == 1
    assert 0.5 < rows["int4"]["weight_bytes_vs_int8"] < rows["mixed"]["weight_bytes_vs_int8"] < 0.6
    assert rows["int4"]["cycles"] < rows["int8"]["cycles"]
    assert rows["int4"]["weight_bytes"] < rows["int4-dual"]["weight_bytes"] < 2 * rows["int4"]["weight_bytes"]
    assert rows["w4a4"]["weight_bytes"] == rows["int4"]["weight_bytes"]
    assert all(0 <= row["top1"] <= 1 and row["output_sqnr_db"] > 10 for row in rows.values())


def test_parts_bench_prices_every_split_of_the_demo_network_against_one_part(tmp_path, digits_data):
    """`aipu bench parts` on the demo network (the bench adds the real PP-LCNet): the tiles are the ones its
    compressed program decodes, and every split costs more than one part, more the more parts."""
    from aipu.app.bench import BENCHMARKS
    from aipu.app.bench.parts import PARTS, _costs, _tensors
    from aipu.app.models.train_digits import MODEL_PATH

    assert BENCHMARKS["parts"] == "aipu.app.bench.parts"
    np.savez(tmp_path / "calib.npz", image=digits_data["calibration_images"])
    tensors = _tensors(MODEL_PATH, tmp_path / "calib.npz")
    assert tensors["tiles"] and all(tile.dtype == np.int8 for tile in tensors["tiles"])
    rows = _costs(tensors["layers"])["rows"]
    assert list(rows) == list(PARTS) and rows[1]["vs_one_part"] == 1 and rows[1]["within_overhead"] == "4/4"
    costs = [rows[parts]["bits_per_weight"] for parts in PARTS]
    assert costs == sorted(costs) and costs[0] < costs[1] and 6 < costs[0] < 8


def test_wdec_bench_prices_compressed_weights_on_the_demo_network(capsys):
    """`aipu bench wdec --models demo` with a small sweep: each point's JSON figures hang together, every point
    timed on the NPU top, labelled."""
    from aipu.app.cli import main

    assert main(["bench", "wdec", "--models", "demo", "--vary", "wdec.engines=1,2",
                 "--vary", "wdec.bins_per_cycle=1,4"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["benchmark"] == "wdec" and result["goal_max_cycles_ratio"] == 1.05
    assert result["axes"] == {"wdec.engines": [1, 2], "wdec.bins_per_cycle": [1, 4]}
    points = result["models"]["demo"]["points"]
    assert [point["dram_model"] for point in points] == ["npu"] * 4
    assert result["policies"].keys() == {"hidden", "all"}
    for point in points:
        assert point["error"] is None and point["dram_model"] in result["dram_models"]
        for policy in point["policies"].values():
            ratio = policy["compressed_cycles"] / point["uncompressed_cycles"]
            assert policy["cycles_vs_uncompressed"] == round(ratio, 4) > 0
            assert policy["within_goal"] == (ratio <= 1.05)
            stored, raw = policy["weight_bytes_compressed"], policy["weight_bytes_raw"]
            assert policy["weight_bytes_vs_raw"] == round(stored / raw, 4)
            assert set(policy["wdec_pole_layers"]) <= {"conv1", "conv2", "conv3", "pool", "fc"}
            assert policy["layers"] == 5
        every = point["policies"]["all"]
        assert 0 < every["weight_bytes_compressed"] < every["weight_bytes_raw"]
        assert every["dram_read_bytes_compressed"] < point["dram_read_bytes_uncompressed"]
        assert every["wdec_bins"] >= every["wdec_busy_cycles"] * every["bins_per_wdec_busy_cycle"] * 0.999 > 0
        # the digits CNN's weights save about 1 %, and no decode of them hides behind its short layers
        assert point["policies"]["hidden"]["within_goal"]
    one, *others = (point["policies"]["all"] for point in points)
    assert one["bins_per_wdec_busy_cycle"] <= 1 < max(point["bins_per_wdec_busy_cycle"] for point in others)
    assert all(point["compressed_cycles"] < one["compressed_cycles"] for point in others)


def test_bench_options_belong_to_the_benchmarks_that_take_them():
    from aipu.app.bench import run_benchmark
    from aipu.sim.machine.errors import InputError

    with pytest.raises(InputError, match="--vary.*not an option of `aipu bench cycle`"):
        run_benchmark("cycle", vary=["wdec.engines=1,2"])
    with pytest.raises(InputError, match="--models = 'demo,alexnet': one or more of demo, "):
        run_benchmark("wdec", models="demo,alexnet")


def test_codec_comparison_levels_and_entropy():
    """`aipu bench codec --compare nncodec`'s int8 levels: symmetric, max |w| at +-127, per tensor or per row."""
    from aipu.app.bench.codec_compare import int8_levels, order0_bits

    weights = np.array([[0.5, -1.0, 0.25], [0.01, 0.02, -0.04], [0.0, 0.0, 0.0]], np.float32)
    assert int8_levels(weights, per_channel=False).tolist() == [[64, -127, 32], [1, 3, -5], [0, 0, 0]]
    assert int8_levels(weights, per_channel=True).tolist() == [[64, -127, 32], [32, 64, -127], [0, 0, 0]]
    assert order0_bits(np.array([3, 3, -3, -3], np.int8)) == 4.0


def test_codec_comparison_estimator_bounds():
    """The same bins under ideal estimators: Krichevsky-Trofimov counts per context, and each context's final
    frequencies; the trace is the reference decoder's, without the terminating stuffing bin."""
    from aipu.app.bench.codec_compare import estimator_bounds, layer_bin_trace
    from aipu.codec import api

    bins = np.array([[5, 1], [5, 1], [-1, 0], [7, 0], [5, 0], [7, 0]], np.int32)
    adaptive = -np.log2([0.5, 0.75, 1 / 6, 0.5, 0.75]).sum() + 1
    static = -np.log2([2 / 3, 2 / 3, 1 / 3]).sum() + 1
    assert np.allclose(estimator_bounds(bins), (adaptive, static))
    levels = np.round(np.random.default_rng(1).laplace(0, 4, (8, 6, 3, 3))).astype(np.int8)
    data, (info,) = api.encode_with_info({"w": levels})
    _, payload = api.read_index(data)
    stream = data[payload:payload + info.length]
    reference = []
    api.decode_stream(stream, trace=reference)
    assert layer_bin_trace(stream, info.weights).tolist() == [list(row) for row in reference[:-1]]


@pytest.mark.slow      # creates NNCodec's own environment on first use (pip builds its extension: about a minute)
def test_codec_comparison_runs_both_codecs_losslessly_on_the_demo_weights():
    """Both codecs code the demo model's int8 kernels; NNCodec in its own venv, its decode checked there."""
    from aipu.app.bench import codec_compare

    report = codec_compare.run(models=("demo",))
    for quantisation in codec_compare.QUANTISATIONS:
        entry = report[f"demo/{quantisation}"]
        assert entry["tensors"] == 4 and entry["weight_count"] > 10_000
        for codec in ("aipu", "nncodec"):
            assert 0 < entry[codec]["bits_per_weight"] < 9 and entry[codec]["decode_mweights_per_s"] > 0
        assert entry["size_vs_nncodec"] > 0 and entry["order0_entropy_bits_per_weight"] > 0
        assert 0 < entry["aipu"]["per_cu_search"]["bits_per_weight"] < 9
        assert 0 < entry["aipu_deepcabac"]["bits_per_weight"] < 9 and entry["deepcabac_decode_speed_vs_nncodec"] > 0


@pytest.mark.slow      # about 2 minutes: the Fisher estimate and some 300 coded and evaluated models
def test_the_deepcabac_rd_bench_measures_every_method_on_the_digits_model():
    from aipu.app.bench import deepcabac_rd

    report = deepcabac_rd.run()
    assert set(report["points"]) == set(deepcabac_rd.METHODS) and 0.5 < report["float_top1"] <= 1
    for method, points in report["points"].items():
        assert all(0 < point["bits_per_weight"] < 9 and 0 <= point["top1"] <= 1 for point in points), method
        front = report["fronts"][method]
        assert [p["bits_per_weight"] for p in front] == sorted(p["bits_per_weight"] for p in front)
