"""`aipu demo` on the embedded digits CNN: every promise it prints holds."""
from __future__ import annotations

import json

import pytest

from aipu.app.cli import main
from aipu.app.demo import _print_report, run_demo
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.program import Program


def test_demo_is_bit_exact_accurate_and_lossless(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("aipu.app.warm_up.compile_kernels_once", lambda *groups, load=False: 12.34)   # compiled
    report = run_demo(tmp_path, eval_limit=60)
    assert report["interpreter"]["bit_exact"] and report["interpreter"]["images"] == 60
    assert report["codec"]["lossless"]
    cycles = report["cycles"]
    assert cycles["total_cycles"] > 1000 and 0 < cycles["mac_utilisation"] < 1 and cycles["dram_model"] == "npu"
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert (tmp_path / "report.json").exists() and cycles["report"] == str(tmp_path / "report.html")
    accuracy = report["accuracy"]
    assert accuracy["float"] >= 0.9, accuracy          # the embedded model is trained (95.8% on all 360)
    assert accuracy["npu"] >= accuracy["float"] - 0.05 and accuracy["agreement"] >= 0.95, accuracy   # 60 images
    assert accuracy["onnxruntime_int8"] >= accuracy["float"] - 0.05, accuracy
    program = Program.read(tmp_path / "program" / "program.aipu")
    assert program.disassemble() == (tmp_path / "model.lst").read_text()
    assert program.queues[Unit.POOL] and len(program.queues[Unit.CONV]) >= 4     # pooling and the FC head on the NPU
    assert [layer["kind"] for layer in report["model"]["layers"]] == ["conv", "conv", "conv", "pool", "layout", "conv"]
    _print_report(report)          # the compilation apart from the interpreter's time, and only where it happened
    assert report["kernels"] == {"compile_seconds": 12.3}
    assert "kernels were compiled once, in 12.3 s" in capsys.readouterr().out
    report["kernels"]["compile_seconds"] = None
    _print_report(report)
    assert "compiled once" not in capsys.readouterr().out


@pytest.mark.slow
def test_the_demo_runs_its_program_on_the_rtl(tmp_path, capsys):
    """`aipu demo` with its RTL part: the DEFAULT NPU top on Verilator (a build of minutes, then cached) runs the
    program for the first held-out images, equal to the interpreter and the cycle model."""
    assert main(["demo", "--out", str(tmp_path), "--images", "12", "--rtl-images", "2", "--json"]) == 0
    rtl = json.loads(capsys.readouterr().out)["rtl"]
    assert rtl["agree"] and rtl["simulator"] == "verilator" and rtl["top"] == "npu"
    assert [run["input"] for run in rtl["runs"]] == [0, 1]
    assert all(run["total_cycles"] == run["model_total_cycles"] > 1000 for run in rtl["runs"])
