"""Compressed networks bit-exact on the RTL (docs/pruning.md, docs/compress.md): the digits CNN with half the
filters of conv1..conv3 removed (`aipu prune`), and with every layer replaced by low-rank factors (`aipu compress
--low-rank`, a .tai that `aipu compile` reads directly: BTD's 1×1, grouped 3×3 and 1×1 convolutions), each compiled
for SMALL and run by `aipu rtl run` on the NPU top under Verilator: every byte equal to the interpreter's, every
command's cycles equal to the cycle model's."""
from __future__ import annotations

import json

import numpy as np
import pytest

from aipu.app.cli import main
from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH
from tests.rtl.configs import SMALL

COMPRESSIONS = {
    "pruned": (["prune", str(MODEL_PATH), "--filters", "0.5"], "pruned.onnx"),
    "low_rank": (["compress", str(MODEL_PATH), "--low-rank", "0.5", "--groups", "2"], "low_rank.tai"),
}


@pytest.mark.slow
@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
def test_a_compressed_digits_cnn_runs_bit_exact_on_the_rtl(tmp_path, capsys, compression):
    data = np.load(DATA_PATH)
    np.savez(tmp_path / "calib.npz", image=data["calibration_images"])
    np.save(tmp_path / "x.npy", data["eval_images"][:2])
    (tmp_path / "small.json").write_text(json.dumps(SMALL.to_dict()))
    arguments, name = COMPRESSIONS[compression]
    assert main([*arguments, "-o", str(tmp_path / name)]) == 0
    assert main(["compile", str(tmp_path / name), "--calib", str(tmp_path / "calib.npz"), "--config",
                 str(tmp_path / "small.json"), "-o", str(tmp_path / "out"), "--quiet"]) == 0
    capsys.readouterr()
    code = main(["rtl", "run", str(tmp_path / "out"), "--input", str(tmp_path / "x.npy"), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["agree"] and report["top"] == "npu", report
    assert [run["input"] for run in report["runs"]] == [0, 1]
    for run in report["runs"]:
        assert run["bytes_agree"] and run["cycles_agree"] and run["done"] and not run["errors"]
        assert run["total_cycles"] == run["model_total_cycles"]
