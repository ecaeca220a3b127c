"""A filter-pruned network bit-exact on the RTL (docs/pruning.md): the digits CNN with half the filters of
conv1..conv3 removed (`aipu prune`), compiled by `aipu compile` for SMALL and run by `aipu rtl run` on the NPU
top under Verilator: every byte equal to the interpreter's, every command's cycles equal to the cycle model's."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from aipu.app.cli import main
from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH
from tests.rtl.configs import SMALL


@pytest.mark.slow
def test_a_filter_pruned_digits_cnn_runs_bit_exact_on_the_rtl(tmp_path, capsys):
    data = np.load(DATA_PATH)
    np.savez(tmp_path / "calib.npz", image=data["calibration_images"])
    np.save(tmp_path / "x.npy", data["eval_images"][:2])
    (tmp_path / "small.json").write_text(json.dumps(SMALL.to_dict()))
    assert main(["prune", str(MODEL_PATH), "--filters", "0.5", "-o", str(tmp_path / "pruned.onnx")]) == 0
    assert {t.name: tuple(t.dims) for t in onnx.load(tmp_path / "pruned.onnx").graph.initializer}[
        "conv3.weight"] == (16, 16, 3, 3)
    assert main(["compile", str(tmp_path / "pruned.onnx"), "--calib", str(tmp_path / "calib.npz"), "--config",
                 str(tmp_path / "small.json"), "-o", str(tmp_path / "out"), "--quiet"]) == 0
    capsys.readouterr()
    code = main(["rtl", "run", str(tmp_path / "out"), "--input", str(tmp_path / "x.npy"), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["agree"] and report["top"] == "npu", report
    assert [run["input"] for run in report["runs"]] == [0, 1]
    for run in report["runs"]:
        assert run["bytes_agree"] and run["cycles_agree"] and run["done"] and not run["errors"]
        assert run["total_cycles"] == run["model_total_cycles"]
