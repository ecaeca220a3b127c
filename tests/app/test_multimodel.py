"""The digits task variants of §9.3 (app/models/multi_digits.py) and `aipu multimodel compile`: shared filters
stay equal through Method 1 training, residual models are base + centres, and the CLI writes one DRAM image
whose every program `aipu run` takes, refusing another topology with one line."""
import json

import numpy as np
import onnx
import pytest

from aipu.app.models.multi_digits import (LAYERS, TASKS, Schedule, residual_training, shared_training,
                                          task_labels)
from aipu.app.models.prune_digits import load_params
from aipu.app.models.train_digits import MODEL_PATH, to_onnx
from tests.sandbox import assert_one_line_error, run_cli

SLICES = {"conv1": 8, "conv2": 16, "conv3": 16}
QUICK = Schedule(epochs=1, batch=32)


@pytest.fixture(scope="module")
def trained(digits_data):
    images = digits_data["eval_images"][:64].astype(np.float64)
    labels = digits_data["eval_labels"][:64]
    return images, labels, shared_training(images, labels, SLICES, schedule=QUICK)


def test_task_labels():
    digits = np.arange(10)
    assert task_labels("shifted", digits).tolist() == [1, 2, 3, 4, 0, 5, 6, 7, 8, 9]
    assert task_labels("mirrored", digits).tolist() == list(range(9, -1, -1))
    with pytest.raises(ValueError):
        task_labels("other", digits)


def test_method_1_keeps_the_shared_filters_equal(trained):
    _, _, models = trained
    base = load_params()
    for layer, cut in SLICES.items():
        for suffix in (".weight", ".bias"):
            first = models[0][layer + suffix]
            assert all(np.array_equal(m[layer + suffix][:cut], first[:cut]) for m in models[1:])
            assert not np.array_equal(first[:cut], base[layer + suffix][:cut])      # trained, not frozen
        assert not np.array_equal(models[1][layer + ".weight"][cut:], models[2][layer + ".weight"][cut:])


def test_residual_models_are_the_base_plus_their_centres(trained):
    images, labels, models = trained
    base = load_params()
    record, params = residual_training(base, models[1], images, task_labels(TASKS[1], labels), 2, QUICK)
    for layer, centres, indices in zip(LAYERS, record.w_share, record.w_specific):
        assert centres.size <= 4
        expected = (base[layer + ".weight"].astype(np.float32) + centres[indices]).astype(np.float64)
        assert np.array_equal(params[layer + ".weight"], expected)
        assert np.array_equal(params[layer + ".bias"], models[1][layer + ".bias"])


def test_the_cli_compiles_the_set_onto_one_image(trained, tmp_path, digits_data):
    _, _, models = trained
    paths = []
    for task, params in zip(TASKS, models):
        paths.append(str(tmp_path / f"{task}.onnx"))
        onnx.save(to_onnx(params), paths[-1])
    calibration = tmp_path / "calibration.npz"
    np.savez(calibration, image=digits_data["calibration_images"][:8])
    out = tmp_path / "set"
    slices = [item for layer, cut in SLICES.items() for item in ("--slice", f"{layer}={cut}")]
    code, text, err = run_cli(["multimodel", "compile", *paths, "--calib", str(calibration), *slices,
                               "-o", str(out)])
    assert code == 0, err
    assert "bit-exact" in text
    figures = json.loads((out / "multimodel.json").read_text())
    assert figures["merged_dram_bytes"] < figures["separate_dram_bytes"]
    assert (out / "dram.bin").stat().st_ino == (out / "shifted" / "dram.bin").stat().st_ino
    np.savez(tmp_path / "one.npz", image=digits_data["eval_images"][:1])
    code, text, err = run_cli(["run", str(out / "mirrored"), "--input", str(tmp_path / "one.npz")])
    assert code == 0, err
    other = onnx.load(MODEL_PATH)
    other.graph.node[0].attribute[0].ints[:] = [1, 1]
    onnx.save(other, tmp_path / "other.onnx")
    code, _, err = run_cli(["multimodel", "compile", paths[0], str(tmp_path / "other.onnx"), "--calib",
                            str(calibration), "-o", str(tmp_path / "x")])
    assert_one_line_error(code, err, "multimodel", str(tmp_path / "other.onnx"))
    code, _, err = run_cli(["multimodel", "compile", *paths, "--calib", str(calibration), "--slice", "conv1",
                            "-o", str(tmp_path / "x")])
    assert code == 2 and "--slice" in err and err.count("\n") == 1


def test_bench_rows_of_a_shared_set(trained, tmp_path, digits_data):
    """`aipu bench multimodel`'s measurement of one method: the merged image is smaller, each program takes
    as many cycles on it as alone, and the interpreter equals golden."""
    from aipu.app.bench.compression import COLUMNS, multi_model_row
    from aipu.app.bench.multimodel import _npu
    _, _, models = trained
    calibration = tmp_path / "calibration.npz"
    np.savez(calibration, image=digits_data["calibration_images"][:8])
    data = {"calibration": calibration, "images": digits_data["eval_images"][:16],
            "labels": digits_data["eval_labels"][:16]}
    figures = _npu(models, tmp_path, "t", SLICES, data)
    assert figures["merged_dram_bytes"] < figures["separate_dram_bytes"]
    assert figures["npu_weight_bytes"] < sum(row["switch_bytes"] for row in figures["models"]) + 3 * figures[
        "shared_dram_bytes"]
    for row in figures["models"]:
        assert row["cycles_on_merged_image"] == row["cycles"] and row["interpreter_equals_golden"]
        assert 0 < row["switch_bytes"] < figures["merged_dram_bytes"] and row["macs"] > 0
    assert figures["int8_weight_bytes"] == figures["separate_weight_dram_bytes"] > figures["merged_weight_dram_bytes"]
    row = multi_model_row(figures)                                  # as `aipu bench compression` tables it
    assert set(COLUMNS) <= set(row) and row["interpreter_equals_golden"] and row["models"] == 3
    assert row["weight_dram_bytes"] == figures["merged_weight_dram_bytes"] and 0 <= row["top1"] <= 1
