"""`aipu report` (docs/cycle-model.md, "Reports"): the demo network and a ResNet-18-shaped program give a JSON
document valid against the schema whose figures add up, CSV beside it, and an HTML page that a real browser
(Debian's chromium, headless) renders with all its plots; a hostile manifest "steps" is a clean error."""
from __future__ import annotations

import csv
import dataclasses
import json
import os
import shutil

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aipu.app.cli import main
from aipu.app.models.train_digits import MODEL_PATH
from aipu.app.report.analysis import SCHEMA_PATH, codebook_weights, read_layer_rows, read_steps
from aipu.compiler.program_dir import DRAM_FILE, MANIFEST_FILE, read_program_dir, reseal, seal
from aipu.sim.cycle import simulate
from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import IndexBits, Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program

CHROMIUM = "/usr/bin/chromium"
CATEGORIES = ("busy_cycles", "dram_stall_cycles", "sequencer_cycles", "idle_cycles")


def _compile(root, model, calibration, *options) -> str:
    out = root / "out"
    assert main(["compile", str(model), "--calib", str(calibration), "-o", str(out), "--quiet", *options]) == 0
    return str(out)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory, digits_data) -> str:
    root = tmp_path_factory.mktemp("demo")
    np.savez(root / "calib.npz", images=digits_data["calibration_images"])
    np.save(root / "x.npy", digits_data["eval_images"][:4])
    return _compile(root, MODEL_PATH, root / "calib.npz", "--compress", "all")


@pytest.fixture(scope="module")
def resnet_dir(tmp_path_factory) -> str:
    import onnx

    from aipu.app.models.synthetic import resnet18_shaped

    root = tmp_path_factory.mktemp("resnet")
    onnx.save(resnet18_shaped(), root / "resnet18.onnx")
    images = np.random.default_rng(0).normal(0, 1, (2, 3, 224, 224)).astype(np.float32)
    np.savez(root / "calib.npz", image=images)
    return _compile(root, root / "resnet18.onnx", root / "calib.npz")


def _report(directory: str, html, *options) -> dict:
    assert main(["report", directory, "-o", str(html), *options]) == 0
    document = json.loads(html.with_suffix(".json").read_text())
    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text()))
    return document


def _check_adds_up(document: dict, directory: str, dram: str) -> None:
    """Every figure that can be recomputed is: totals against the cycle model, each unit's cycles within a
    layer against the layer's span, layers against the manifest's steps, CSV rows against layers."""
    program_dir = read_program_dir(directory)
    config = program_dir.program.config
    timing = simulate(program_dir.program, Memory.create(config, program_dir.dram), dram=dram)
    summary, layers = document["summary"], document["layers"]
    assert summary["total_cycles"] == timing.total_cycles and summary["macs"] == timing.macs
    assert sum(layer["macs"] for layer in layers) == timing.macs
    assert [layer["layers"] for layer in layers] == [step["layers"] for step in program_dir.manifest["steps"]]
    for layer in layers:
        assert layer["span_cycles"] == layer["end_cycle"] - layer["start_cycle"] > 0
        array_cycles = layer["span_cycles"] * summary["mac_array_size"]
        assert layer["mac_utilisation"] == pytest.approx(layer["macs"] / array_cycles)
        for row in layer["units"]:
            assert row["idle_cycles"] >= 0
            assert sum(row[name] for name in CATEGORIES) + sum(row["stall_cycles"].values()) == layer["span_cycles"]
    for row in summary["units"]:
        assert row["busy_cycles"] == timing.busy[Unit[row["unit"]]]
    for unit in (Unit.WDEC, Unit.CONV):
        assert sum(layer[f"{unit.name.lower()}_busy_cycles"] for layer in layers) == timing.busy[unit]
    assert summary["wdec_pole_layers"] == sum(layer["wdec_conv_pole"] == "wdec" for layer in layers)
    _check_overlap(summary, layers)
    dram_read = summary["dram_read_bytes"]
    assert dram_read == sum(layer["dram_read_bytes"] for layer in layers) > 0
    assert document["metadata"]["config_hash"] == config.config_hash() and document["metadata"]["dram_model"] == dram


def _check_overlap(summary: dict, layers: list[dict]) -> None:
    """Neighbours agree on the cycles they share; the spans' sum less what they cover together is the saving."""
    assert layers[0]["overlap_previous_cycles"] == 0 == layers[-1]["overlap_next_cycles"]
    for before, after in zip(layers, layers[1:]):
        shared = min(before["end_cycle"], after["end_cycle"]) - max(before["start_cycle"], after["start_cycle"])
        assert before["overlap_next_cycles"] == after["overlap_previous_cycles"] == max(0, shared)
    covered = len(set().union(*(range(layer["start_cycle"], layer["end_cycle"]) for layer in layers)))
    assert summary["layer_covered_cycles"] == covered
    assert summary["layer_span_sum_cycles"] == sum(layer["span_cycles"] for layer in layers)
    assert summary["layer_overlap_cycles"] == summary["layer_span_sum_cycles"] - covered


def test_demo_report_adds_up_and_counts_the_input_run(demo_dir, tmp_path):
    html = tmp_path / "demo.html"
    document = _report(demo_dir, html, "--input", os.path.join(os.path.dirname(demo_dir), "x.npy"), "--seed", "3")
    _check_adds_up(document, demo_dir, "npu")
    assert document["metadata"]["input_run"] and document["metadata"]["seed"] == 3
    convs = [layer for layer in document["layers"] if layer["macs"]]
    assert convs and all(layer["saturated_values"] is not None for layer in convs)
    assert all(layer["weight_formats"] == ["int8"] for layer in convs)
    decoded = [layer for layer in convs if layer["weight_stream_bytes"]]       # the compiler keeps small ones raw
    assert decoded and all(layer["bins_decoded"] > layer["weight_decoded_bytes"] > 0 for layer in decoded)
    assert all(layer["weight_compression_ratio"] == layer["weight_decoded_bytes"] / layer["weight_stream_bytes"]
               for layer in decoded)
    assert document["summary"]["long_pole_unit"] == "WDEC"              # one bin a cycle: the decoder is the pole
    assert all(layer["wdec_conv_pole"] == "wdec" and layer["wdec_busy_cycles"] > layer["conv_busy_cycles"] > 0
               for layer in decoded)
    assert all(layer["wdec_busy_cycles"] == 0 and layer["wdec_conv_pole"] == "conv"
               for layer in convs if not layer["weight_stream_bytes"])
    with open(html.with_suffix(".layers.csv"), newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert [row["name"] for row in rows] == [layer["name"] for layer in document["layers"]]
    assert [int(row["overlap_next_cycles"]) for row in rows] == [layer["overlap_next_cycles"]
                                                                 for layer in document["layers"]]
    with open(html.with_suffix(".units.csv"), newline="") as stream:
        assert len(list(csv.DictReader(stream))) == sum(len(layer["units"]) for layer in document["layers"])


def test_codebook_loads_count_their_packed_and_expanded_bytes():
    """A layer's LOADs of codebook indices: their DRAM bytes and the WEIGHT bytes they become; plain LOADs count
    in neither."""
    program = Program()
    for bits in (IndexBits.PLAIN, IndexBits.TWO, IndexBits.FOUR):
        program.append(Command.make(Opcode.LOAD, buffer=Buffer.WEIGHT, y_size=3, x_size=2, run=8, index_bits=bits))
    assert codebook_weights(program, range(3)) == {"codebook_index_bytes": 3 * 2 * (2 + 4),
                                                   "codebook_weight_bytes": 2 * 3 * 2 * 8}
    assert codebook_weights(program, range(1)) == {"codebook_index_bytes": 0, "codebook_weight_bytes": 0}


def test_ports_report_is_the_rtl_s_timing(demo_dir, tmp_path):
    """``--dram ports`` times the program as the RTL does (one DRAM port per DMA unit): no DRAM stalls."""
    document = _report(demo_dir, tmp_path / "ports.html", "--dram", "ports")
    _check_adds_up(document, demo_dir, "ports")
    assert all(row["dram_stall_cycles"] == 0 for row in document["summary"]["units"])


def test_resnet18_shaped_report_finds_the_array_bound_layers(resnet_dir, tmp_path):
    """The 3x3 convolutions of the ResNet-18 body keep the 16x16 array over 90 % busy and CONV is their long pole;
    the first layer (3 input channels), unrolled onto the rows as 147 channels, over 80 % (at most 147/160)."""
    document = _report(resnet_dir, tmp_path / "resnet.html")
    _check_adds_up(document, resnet_dir, "npu")
    layers = document["layers"]
    assert len(layers) >= 30 and document["summary"]["long_pole_unit"] == "CONV"
    body = [layer for layer in layers if layer["macs"] >= 100_000_000]
    assert len(body) >= 12
    assert sum(layer["long_pole_unit"] == "CONV" and layer["mac_utilisation"] > 0.9 for layer in body) >= 10
    assert all(layer["wdec_conv_pole"] == "conv" for layer in layers if layer["macs"])      # no compressed weights
    assert document["summary"]["wdec_pole_layers"] == 0
    assert 0.8 <= layers[0]["mac_utilisation"] <= layers[0]["mapping_efficiency"] <= 147 / 160
    overlapping = [layer for layer in layers[1:] if layer["overlap_previous_cycles"] > 0]
    assert len(overlapping) >= len(layers) // 2 and document["summary"]["layer_overlap_cycles"] > 0


def test_a_long_program_plots_its_longest_layers(resnet_dir, tmp_path, monkeypatch):
    """The page stays bounded whatever the program: past PLOT_LAYERS_MAX layers the bar plots show the
    longest, in program order, and say so; the table still lists every layer."""
    from aipu.app.report import html

    monkeypatch.setattr(html, "PLOT_LAYERS_MAX", 5)
    document = _report(resnet_dir, tmp_path / "long.html")
    page = (tmp_path / "long.html").read_text()
    assert page.count(f"The 5 longest of {len(document['layers'])} layers, in order.") == 2
    assert page.count("<tr><td>") >= len(document["layers"])
    order = sorted(range(len(document["layers"])), key=lambda index: -document["layers"][index]["span_cycles"])
    longest = sorted(order[:5])                    # equal spans: the earlier layer first
    assert [layer["name"] for layer in html._plotted(document["layers"])] == \
        [document["layers"][index]["name"] for index in longest]


@pytest.mark.skipif(not shutil.which("chromium") and not os.environ.get("CI"),
                    reason="Debian's chromium is not installed (make test installs it; CI must run this)")
def test_html_report_renders_in_a_browser(demo_dir, tmp_path):
    from playwright.sync_api import sync_playwright

    html = tmp_path / "page.html"
    document = _report(demo_dir, html, "--timeline-layer", "conv2")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("request", lambda request: errors.append(f"fetched {request.url}")
                    if not request.url.startswith(("file:", "data:")) else None)
            page.goto(html.as_uri())
            images = page.eval_on_selector_all("img", "all => all.map(i => [i.alt, i.complete, i.naturalWidth])")
            heading = page.inner_text("h1")
            layer_rows = page.eval_on_selector_all("#layers tbody tr", "rows => rows.length")
            timeline_caption = page.inner_text("body")
        finally:
            browser.close()
    assert errors == []
    assert [alt for alt, _, _ in images] == ["cycles", "utilisation", "roofline", "timeline"]
    assert all(complete and width > 200 for _, complete, width in images)
    assert heading == "aipu performance report" and layer_rows == len(document["layers"])
    assert "Timeline of layer 'conv2'" in timeline_caption


def test_report_refuses_what_it_cannot_draw(demo_dir, tmp_path, capsys):
    assert main(["report", demo_dir, "-o", str(tmp_path / "r.html"), "--timeline-layer", "conv9"]) == 2
    assert "--timeline-layer 'conv9': no such layer" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing"), "-o", str(tmp_path / "r.html")]) == 2
    assert not (tmp_path / "r.html").exists()


def _with_steps(directory, steps):
    return dataclasses.replace(directory, manifest={**directory.manifest, "steps": steps})


def test_a_hostile_steps_entry_is_one_line_naming_the_manifest(demo_dir, tmp_path, capsys):
    copy = tmp_path / "program"
    shutil.copytree(demo_dir, copy)
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    manifest["steps"][1]["commands"]["LOAD"] = [0, 3]           # overlaps the first step's LOAD commands
    (copy / MANIFEST_FILE).write_text(json.dumps(seal(manifest)))
    assert main(["report", str(copy), "-o", str(tmp_path / "r.html")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "manifest.json" in error and "steps[1].commands.LOAD" in error
    with pytest.raises(InputError, match=r"steps = '0 steps': a list of 1 \.\. 65536 steps"):
        read_steps(_with_steps(read_program_dir(demo_dir), []))
    del manifest["steps"]                                        # an older manifest: the program is one layer
    (copy / MANIFEST_FILE).write_text(json.dumps(seal(manifest)))
    assert [layer["name"] for layer in _report(str(copy), tmp_path / "r.html")["layers"]] == ["program"]


def test_a_weight_stream_that_does_not_decode_is_named_by_command(demo_dir, tmp_path, capsys):
    """The RTL stops on such a stream, so it has no timing: the report, and a run, say which WDEC command
    reads it and where."""
    copy = tmp_path / "program"
    shutil.copytree(demo_dir, copy)
    directory = read_program_dir(copy)
    first = directory.program.queues[Unit.WDEC][0]
    image = directory.dram.copy()
    image[first.dram_addr:first.dram_addr + first.length] = 0xFF
    (copy / DRAM_FILE).write_bytes(image.tobytes())
    reseal(copy)
    np.save(tmp_path / "x.npy", np.zeros((1, *directory.inputs[0].tensor.shape[1:]), np.float32))
    for argv in (["report", str(copy), "-o", str(tmp_path / "r.html")],
                 ["run", str(copy), "--input", str(tmp_path / "x.npy")]):
        assert main(argv) == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"aipu {argv[0]}: error: {copy}: WDEC[0]") and "\n" not in error
        assert f"the weight stream at dram_addr = {first.dram_addr:#x} ({first.length} bytes) does not decode" \
            in error


_UNIT_NAMES = st.sampled_from([unit.name for unit in Unit] + ["conv", "", "FINISH"])
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 40) | st.floats() | st.text(max_size=4),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                     max_leaves=8)
_SPAN = st.lists(st.integers(-2, 16), min_size=2, max_size=2) | _JSON
_STEP = st.fixed_dictionaries({"layers": st.lists(st.text(max_size=5), min_size=0, max_size=3) | _JSON,
                               "commands": st.dictionaries(_UNIT_NAMES, _SPAN, max_size=5) | _JSON}) | _JSON


@settings(derandomize=True, max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(_STEP, max_size=6) | _JSON)
def test_read_steps_takes_any_json_and_accepts_only_disjoint_in_order_ranges(demo_dir, steps):
    directory = read_program_dir(demo_dir)
    try:
        accepted = read_steps(_with_steps(directory, steps))
    except InputError as error:
        assert MANIFEST_FILE in str(error) and "\n" not in str(error)
        return
    assert accepted                      # no step would leave the report no layer (max() of nothing)
    end: dict[str, int] = {}
    for step in accepted:
        assert step["layers"] and all(isinstance(name, str) and name for name in step["layers"])
        for unit, (first, stop) in step["commands"].items():
            assert end.get(unit, 0) <= first < stop <= len(directory.program.queues[Unit[unit]])
            end[unit] = stop


_ROW = st.fixed_dictionaries({"name": st.text(max_size=4) | _JSON, "kind": st.text(max_size=4) | _JSON,
                              "weights": st.text(max_size=66) | _JSON,
                              "clipped_fraction": st.floats() | _JSON,
                              "table_input_range": st.lists(st.integers(-5, 5), min_size=2, max_size=2) | _JSON})


@settings(derandomize=True, max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(_ROW | _JSON, max_size=4) | _JSON)
def test_layer_rows_take_any_json_and_accept_only_what_the_report_can_show(demo_dir, rows):
    directory = read_program_dir(demo_dir)
    try:
        accepted = read_layer_rows(dataclasses.replace(directory, manifest={**directory.manifest, "layers": rows}))
    except InputError as error:
        assert MANIFEST_FILE in str(error) and "\n" not in str(error)
        return
    for name, row in accepted.items():
        assert isinstance(name, str) and name
        assert row.get("kind") is None or isinstance(row.get("kind"), str)
        assert row.get("weights") is None or (isinstance(row.get("weights"), str) and len(row["weights"]) <= 64)
        clipped = row.get("clipped_fraction")
        assert clipped is None or 0 <= clipped <= 1
        codes = row.get("table_input_range")
        assert codes is None or (all(type(code) is int for code in codes) and codes[0] <= codes[1])
