"""`aipu rtl run`: a directory `aipu compile` wrote, run on the RTL and held against the interpreter (bytes) and
the cycle model (cycles), on the NPU top (the default) and on the System test harness. The program is a one-conv
network compiled for SMALL, so that its Verilator build is the one tests/rtl/test_npu.py uses."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnx
import pytest

from aipu.app.cli import main
from aipu.compiler.program_dir import read_program_dir
from aipu.sim.cosim import npu_verilog
from aipu.sim.cosim.result import RtlError
from aipu.sim.machine.isa import Unit
from tests.rtl.configs import SMALL
from tests.sandbox import assert_one_line_error

RUN_KEYS = {"input", "agree", "done", "bytes_agree", "cycles_agree", "total_cycles", "model_total_cycles",
            "max_cycles", "run_seconds", "cycles_per_second", "first_mismatch", "first_cycle_difference", "errors",
            "token_error", "dram_faults", "waveform"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A 3->6 channel 3x3 conv with ReLU on 8x8 images, compiled for SMALL by `aipu compile`; two inputs."""
    from aipu.app.models.synthetic import GraphBuilder

    root = tmp_path_factory.mktemp("rtl_run")
    builder = GraphBuilder(3, 3, 8)
    onnx.save(builder.model(builder.node("Relu", [builder.conv("image", 3, 6)])), root / "conv.onnx")
    images = np.random.default_rng(0).normal(0, 1, (8, 3, 8, 8)).astype(np.float32)
    np.savez(root / "calib.npz", image=images)
    np.save(root / "x.npy", images[:2])
    (root / "small.json").write_text(json.dumps(SMALL.to_dict()))
    assert main(["compile", str(root / "conv.onnx"), "--calib", str(root / "calib.npz"), "--config",
                 str(root / "small.json"), "-o", str(root / "out"), "--quiet"]) == 0
    return root


def _json(capsys, argv: list[str]) -> tuple[int, dict]:
    code = main(argv + ["--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_program_on_verilator_equals_both_models(compiled, capsys):
    code, report = _json(capsys, ["rtl", "run", str(compiled / "out"), "--input", str(compiled / "x.npy")])
    assert code == 0, report
    assert set(report) == {"schema", "program", "simulator", "top", "threads", "profile_guided", "commands",
                           "units", "agree", "build_seconds", "runs"}
    assert report["schema"] == "aipu-rtl-run/1" and report["simulator"] == "verilator" and report["agree"]
    assert report["threads"] == 1 and report["profile_guided"]
    assert [run["input"] for run in report["runs"]] == [0, 1]
    for run in report["runs"]:
        assert set(run) == RUN_KEYS
        assert run["bytes_agree"] and run["cycles_agree"] and run["done"] and not run["errors"]
        assert run["total_cycles"] == run["model_total_cycles"] > 1000 and run["cycles_per_second"] > 0
    assert main(["rtl", "run", str(compiled / "out")]) == 0          # the image as compiled, in text
    text = capsys.readouterr().out
    assert "image as compiled: every byte and every command's cycles equal" in text
    assert text.endswith("agreement: 1 of 1 run equal to both models\n")


def test_a_plain_build_runs_the_program_alike(compiled, capsys):
    code, report = _json(capsys, ["rtl", "run", str(compiled / "out"), "--plain-build"])
    assert code == 0 and report["agree"] and not report["profile_guided"], report


@pytest.mark.slow
def test_a_program_on_two_verilator_threads_equals_both_models(compiled, capsys):
    code, report = _json(capsys, ["rtl", "run", str(compiled / "out"), "--threads", "2"])
    assert code == 0 and report["agree"] and report["threads"] == 2, report


@pytest.mark.parametrize("top", [pytest.param("npu", marks=pytest.mark.slow), "system"])
def test_a_program_on_amaranth_equals_both_models(compiled, capsys, top):
    code, report = _json(capsys, ["rtl", "run", str(compiled / "out"), "--sim", "amaranth", "--top", top])
    assert code == 0 and report["agree"] and report["build_seconds"] is None, report
    assert report["top"] == top and report["runs"][0]["input"] is None and report["runs"][0]["total_cycles"] > 1000


def _faulty_rtl(monkeypatch, flipped: int, late: tuple[Unit, int]):
    """The RTL's run as it comes back, then damaged as a faulty RTL would leave it: a DRAM byte flipped, one
    command retiring (and so starting) a cycle late, a unit stopped on a field, a token error and a DRAM fault."""
    real = npu_verilog.run_npu_on

    def run_on(*args, **kwargs):
        got = real(*args, **kwargs)
        got.memory.dram[flipped] ^= 0x10
        unit, index = late
        start, retire = got.cycles[unit][index]
        got.cycles[unit][index] = (start + 1, retire + 1)
        return replace(got, errors=[RtlError(Unit.POOL, 0, "kernel")], token_error=True,
                       dram_faults=[Unit.STORE])

    monkeypatch.setattr(npu_verilog, "run_npu_on", run_on)


def test_a_divergence_is_named_and_exits_1(compiled, capsys, monkeypatch):
    output = read_program_dir(compiled / "out").outputs[0]
    flipped = output.dram_address + 5
    _faulty_rtl(monkeypatch, flipped, (Unit.CONV, 2))
    code, report = _json(capsys, ["rtl", "run", str(compiled / "out")])
    assert code == 1 and not report["agree"]
    (run,) = report["runs"]
    mismatch = run["first_mismatch"]
    assert not run["bytes_agree"] and mismatch["unit"] == "STORE" and mismatch["space"] == "DRAM"
    assert mismatch["address"] == flipped and mismatch["golden"] ^ mismatch["rtl"] == 0x10
    assert mismatch["command"].startswith("STORE") and mismatch["differing_bytes"] == 1
    difference = run["first_cycle_difference"]
    assert not run["cycles_agree"] and (difference["unit"], difference["index"]) == ("CONV", 2)
    assert [cycle + 1 for cycle in difference["model"]] == difference["rtl"] and difference["command"].startswith(
        "CONV")
    assert run["errors"] == [{"unit": "POOL", "index": 0, "field": "kernel"}]
    assert run["token_error"] and run["dram_faults"] == ["STORE"]
    assert main(["rtl", "run", str(compiled / "out")]) == 1
    text = capsys.readouterr().out
    assert "image as compiled: DIVERGES" in text and "RTL error: POOL[0] stopped on field kernel" in text
    assert "token error" in text and "DRAM fault: STORE" in text
    assert f"first byte divergence from the interpreter: STORE[{mismatch['index']}] wrote DRAM" in text
    assert "first command off the cycle model: CONV[2]: cycle model " in text
    assert text.endswith("agreement: 0 of 1 run equal to both models\n")


@pytest.mark.slow
def test_waves_keep_the_window_around_a_divergence(compiled, capsys, monkeypatch):
    """--waves: Verilator's tracing build runs the program again and keeps the window around the blamed STORE."""
    from aipu.sim.cosim.waves import WINDOW_FILE

    output = read_program_dir(compiled / "out").outputs[0]
    _faulty_rtl(monkeypatch, output.dram_address, (Unit.CONV, 0))
    code, report = _json(capsys, ["rtl", "run", str(compiled / "out"), "--waves"])
    waveform = report["runs"][0]["waveform"]
    assert code == 1 and waveform.endswith(WINDOW_FILE) and "$dumpvars" in open(waveform).read()


@pytest.mark.parametrize("argv, field", [
    (["--sim", "modelsim"], "--sim 'modelsim': expected one of amaranth, verilator, icarus"),
    (["--top", "soc"], "--top 'soc': expected one of npu, system"),
    (["--threads", "2", "--sim", "icarus"], "--threads 2: only the NPU top on verilator"),
    (["--threads", "2", "--top", "system"], "--threads 2: only the NPU top on verilator"),
    (["--input", "{root}/wrong_shape.npy"], "shape [samples, 3, 8, 8]"),
    (["--input", "{root}/wrong_type.npy"], "a float array"),
])
def test_bad_input_is_one_line_with_status_2(compiled, capsys, argv, field):
    np.save(compiled / "wrong_shape.npy", np.zeros((2, 3, 9, 8), np.float32))
    np.save(compiled / "wrong_type.npy", np.zeros((2, 3, 8, 8), np.int8))
    code = main(["rtl", "run", str(compiled / "out"), *(arg.format(root=compiled) for arg in argv)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and field in err, err
    if argv[0] == "--input":
        assert_one_line_error(code, err, "rtl", argv[1].format(root=compiled))


def test_a_missing_directory_is_one_line_with_status_2(tmp_path, capsys):
    code = main(["rtl", "run", str(tmp_path / "missing")])
    assert_one_line_error(code, capsys.readouterr().err, "rtl", str(tmp_path / "missing"))
