"""`aipu compress`: the methods composed in the standard's order into a .tai file that imports back and compiles,
the per-layer table, the output SQNR, and one-line errors (exit 2) for bad arguments."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from aipu.app.model_compression import CompressionPlan, compress, model_outputs, sqnr_db
from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH
from aipu.tai.file import dumps, load, loads
from aipu.tai.to_onnx import to_onnx
from tests.sandbox import run_cli


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    path = tmp_path_factory.mktemp("compress") / "calibration.npz"
    np.savez(path, image=np.load(DATA_PATH)["calibration_images"][:32])
    return path


def _compressed(out, calibration, *methods: str) -> tuple[str, dict[str, str]]:
    """`aipu compress` of the demo model into ``out`` with ``methods``: its stdout and its table rows by layer."""
    code, stdout, err = run_cli(["compress", str(MODEL_PATH), "-o", str(out), *methods, "--low-rank", "0.5",
                                 "--quant", "8", "--calibration", str(calibration)])
    assert code == 0, err
    return stdout, {line.split()[0]: line for line in stdout.splitlines()[1:]}


def test_pruning_then_low_rank_then_quantization_in_one_tai(tmp_path, calibration):
    out = tmp_path / "digits.tai"
    stdout, rows = _compressed(out, calibration, "--prune", "0.25")
    assert rows["conv2"].index("pruned to 24/32 filters") < rows["conv2"].index("low rank") \
        < rows["conv2"].index("8-bit chapter-10 stream")
    before, after = (int(value.replace(",", "")) for value in rows["total"].split()[1:3])
    assert before == 14_288 and after < before / 3
    assert "output SQNR on 32 calibration samples" in stdout
    model = to_onnx(load(out))
    onnx.checker.check_model(model)
    assert sum(node.op_type == "Conv" for node in model.graph.node) == 9        # three BTD convolutions a layer


def test_circulant_layers_then_low_rank_for_the_rest(tmp_path, calibration):
    out = tmp_path / "digits.tai"
    _, rows = _compressed(out, calibration, "--circulant", "4")
    assert "block circulant (circ_size 4" in rows["conv2"] and "block circulant (circ_size 4" in rows["conv3"]
    assert "low rank" in rows["conv1"] and "low rank" in rows["fc"] and "low rank" not in rows["conv3"]
    assert rows["conv3"].split()[1:3] == ["9,216", "2,304"] and "8-bit chapter-10 stream" in rows["conv3"]
    kinds = [node.operator_type for node in load(out).model.graph[0].operator_node]
    assert kinds.count("DecompressStructuralMatric") == 2
    code, stdout, err = run_cli(["compile", str(out), "--calib", str(calibration), "-o", str(tmp_path / "program")])
    assert code == 0, err
    assert "weights: block-circulant conv2 (L 4), conv3 (L 4): DRAM holds their first rows" in stdout


def test_without_quantization_the_tai_holds_the_compressed_model_exactly():
    original = onnx.load(MODEL_PATH)
    model, document, rows = compress(original, CompressionPlan(prune=0.5, layers=("conv2",)))
    samples = {"image": np.load(DATA_PATH)["eval_images"][:16]}
    decoded = model_outputs(to_onnx(loads(dumps(document))), samples)
    assert np.array_equal(decoded[0], model_outputs(model, samples)[0])
    assert [row.done for row in rows if row.done] == [["pruned to 16/32 filters"]]
    assert 0 < sqnr_db(model_outputs(original, samples), decoded) < 60


def test_quantization_alone_keeps_the_outputs_close():
    original = onnx.load(MODEL_PATH)
    _, document, rows = compress(original, CompressionPlan(quant_bits=8))
    samples = {"image": np.load(DATA_PATH)["eval_images"][:16]}
    assert sqnr_db(model_outputs(original, samples), model_outputs(to_onnx(loads(dumps(document))), samples)) > 25
    assert all(row.bytes_after < row.bytes_before / 3 for row in rows)


@pytest.mark.parametrize("arguments, field", [
    (["--prune", "1.5"], "--prune = '1.5'"),
    (["--low-rank", "0"], "--low-rank = '0'"),
    (["--quant", "1"], "--quant = 1"),
    (["--prune", "0.5", "--layers", "relu1"], "--layers = 'relu1'"),
    (["--groups", "0", "--low-rank", "0.5"], "--groups = 0"),
    (["--circulant", "1"], "--circulant = 1"),
    (["--circulant", "3"], "circ_size = 3"),
    ([], "methods = 'none'"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, arguments, field):
    code, _, err = run_cli(["compress", str(MODEL_PATH), "-o", str(tmp_path / "x.tai"), *arguments])
    assert code == 2 and err.count("\n") == 1 and field in err and "Traceback" not in err, err
