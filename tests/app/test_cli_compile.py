"""`aipu compile` and `aipu run` end to end on the embedded model, and their answers to hostile input."""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from aipu.app.cli import main
from aipu.app.models.train_digits import MODEL_PATH
from aipu.compiler.driver import compile_model
from aipu.compiler.program_dir import FLOAT_MODEL_FILE, MANIFEST_FILE, SEALED_FILES, reseal, seal


@pytest.fixture(scope="module")
def compiled_dir(tmp_path_factory, digits_data):
    root = tmp_path_factory.mktemp("compiled")
    np.savez(root / "calib.npz", images=digits_data["calibration_images"])
    assert main(["compile", str(MODEL_PATH), "--calib", str(root / "calib.npz"), "-o", str(root / "out"),
                 "--quiet"]) == 0
    return root


def test_compiled_directory_runs_and_equals_the_quantized_model(compiled_dir, digits_data, capsys):
    images = digits_data["eval_images"][:12]
    np.save(compiled_dir / "x.npy", images)
    assert main(["run", str(compiled_dir / "out"), "--input", str(compiled_dir / "x.npy"), "--output",
                 str(compiled_dir / "y.npz"), "--compare-onnx", "--cycles"]) == 0
    printed = capsys.readouterr().out
    assert "12 input(s)" in printed and "vs onnxruntime on float.onnx logits" in printed
    assert "cycle model (one DRAM shared by the DMA units): " in printed
    assert "MAC utilisation" in printed and "CONV: " in printed and "aipu report" in printed
    compiled = compile_model(MODEL_PATH, compiled_dir / "calib.npz")         # the same compile, in-process
    name = compiled.qmodel.inputs[0]
    want = np.concatenate([compiled.qmodel.run_float({name: image[None]})["logits"] for image in images])
    with np.load(compiled_dir / "y.npz") as outputs:
        np.testing.assert_array_equal(outputs["logits"], want)
    manifest = json.loads((compiled_dir / "out" / MANIFEST_FILE).read_text())
    assert [row["kind"] for row in manifest["layers"]] == ["conv", "conv", "conv", "pool", "layout", "conv"]
    assert all(row["sqnr_db"] > 25 for row in manifest["layers"])
    assert all(row["clipped_fraction"] == 0 for row in manifest["layers"])   # extrema over these very samples


def test_layers_far_from_float_are_flagged_and_warned(compiled_dir, tmp_path, capsys):
    """The digits model under nstd: its 3-sigma ranges clip every feature map; the table marks each layer
    under 20 dB, and one warning line on stderr names the worst."""
    assert main(["compile", str(MODEL_PATH), "--calib", str(compiled_dir / "calib.npz"), "-o", str(tmp_path / "o"),
                 "--method", "nstd", "--quiet"]) == 0
    captured = capsys.readouterr()
    flagged = [line.split()[0] for line in captured.out.splitlines() if "!" in line]
    assert flagged == ["conv1", "conv2", "conv3", "pool", "flatten", "fc"]
    warning = captured.err.splitlines()[-1]
    assert warning.startswith("aipu compile: warning: 6 layers under 20 dB SQNR against float: conv3 (")
    assert main(["compile", str(MODEL_PATH), "--calib", str(compiled_dir / "calib.npz"), "-o", str(tmp_path / "o"),
                 "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err and "!" not in captured.out


def test_output_channels_that_lose_every_level_are_warned(tmp_path, capsys):
    """A detector's output joins box coordinates (hundreds) and scores (0 to 1): one int8 scale leaves the
    scores no level while the tensor's SQNR looks fine. The compile names those channels and --int16 keeps them."""
    from aipu.app.models.synthetic import GraphBuilder

    b = GraphBuilder(3, 3, 8)
    features = b.node("Relu", [b.conv("image", 3, 6)])
    boxes = b.node("Mul", [b.conv(features, 6, 4, kernel=1, bn=False), b.const(np.float32(300.0))])
    scores = b.node("Sigmoid", [b.conv(features, 6, 3, kernel=1, bn=False)])
    output = b.node("Concat", [boxes, scores], axis=1)
    onnx.save(b.model(output), tmp_path / "head.onnx")
    np.savez(tmp_path / "calib.npz", image=np.random.default_rng(0).normal(0, 1, (8, 3, 8, 8)).astype(np.float32))
    command = ["compile", str(tmp_path / "head.onnx"), "--calib", str(tmp_path / "calib.npz"),
               "-o", str(tmp_path / "o"), "--quiet"]
    assert main(command) == 0
    assert (f"aipu compile: warning: output '{output}': 3 of 7 channels under 20 dB SQNR against float (worst "
            in capsys.readouterr().err)
    row = json.loads((tmp_path / "o" / MANIFEST_FILE).read_text())["layers"][-1]
    assert row["low_channels"]["first"] == [4, 5, 6] and row["sqnr_db"] > 20
    assert main([*command, "--int16", output]) == 0
    assert "channels under" not in capsys.readouterr().err


def test_a_target_sqnr_widens_what_clips_then_what_is_coarse(compiled_dir, tmp_path, capsys):
    """nstd clips the three conv outputs: --target-sqnr 30 gives them their full range and every layer then
    reaches it; a target of 40 the 8-bit convs cannot reach makes the later tensors int16 and names the
    layers that still miss it."""
    calib = str(compiled_dir / "calib.npz")
    assert main(["compile", str(MODEL_PATH), "--calib", calib, "-o", str(tmp_path / "o"), "--method", "nstd",
                 "--target-sqnr", "30", "--quiet"]) == 0
    assert ("note: --target-sqnr 30: full range for 3 tensors (conv1.relu, conv2.relu, conv3.relu), int16 for 0 "
            "tensors; every layer reaches it") in capsys.readouterr().err
    manifest = json.loads((tmp_path / "o" / MANIFEST_FILE).read_text())
    assert min(row["sqnr_db"] for row in manifest["layers"]) >= 30 and len(manifest["notes"]) == 1
    assert main(["compile", str(MODEL_PATH), "--calib", calib, "-o", str(tmp_path / "o"), "--target-sqnr", "40",
                 "--quiet"]) == 0
    assert "int16 for 3 tensors (pool, features, logits); still under it: pool, flatten, fc" in capsys.readouterr().err
    assert main(["compile", str(MODEL_PATH), "--calib", calib, "-o", str(tmp_path / "o"), "--target-sqnr", "0"]) == 2
    assert "--target-sqnr = 0.0: a number of dB above 0, at most 100" in capsys.readouterr().err


def test_compile_reports_top1_of_float_and_int8_on_labelled_samples(tmp_path, capsys, digits_data):
    images, labels = digits_data["eval_images"][:60], digits_data["eval_labels"][:60]
    np.savez(tmp_path / "calib.npz", images=digits_data["calibration_images"])
    np.savez(tmp_path / "eval.npz", images=images, labels=labels)
    assert main(["compile", str(MODEL_PATH), "--calib", str(tmp_path / "calib.npz"), "--eval",
                 str(tmp_path / "eval.npz"), "-o", str(tmp_path / "out"), "--quiet"]) == 0
    assert "top-1 on 60 labelled samples (logits): float " in capsys.readouterr().out
    evaluation = json.loads((tmp_path / "out" / MANIFEST_FILE).read_text())["evaluation"]
    compiled = compile_model(MODEL_PATH, tmp_path / "calib.npz")
    name = compiled.qmodel.inputs[0]
    int8 = np.array([np.argmax(compiled.qmodel.run_float({name: image[None]})["logits"]) for image in images])
    assert evaluation["samples"] == 60 and evaluation["npu_top1"] == np.mean(int8 == labels)
    assert evaluation["float_top1"] >= 0.9 and abs(evaluation["float_top1"] - evaluation["npu_top1"]) <= 0.05
    for bad, message in ((dict(images=images, labels=labels + 10), "labels = "),
                         (dict(images=images), "labels = 'missing'"),
                         (dict(images=images, labels=labels.astype(np.float32)), "integer class indices"),
                         (dict(images=images, labels=labels[:5]), "the same number for every input")):
        np.savez(tmp_path / "bad.npz", **bad)
        error = _error(["compile", str(MODEL_PATH), "--calib", str(tmp_path / "calib.npz"), "--eval",
                        str(tmp_path / "bad.npz"), "-o", str(tmp_path / "bad"), "--quiet"], capsys)
        assert "bad.npz" in error and message in error


def _error(argv, capsys) -> str:
    assert main(argv) == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "Traceback" not in message
    return message


def test_compile_refuses_bad_input_in_one_line(tmp_path, capsys, digits_data):
    np.savez(tmp_path / "calib.npz", images=digits_data["calibration_images"][:4])
    out = str(tmp_path / "out")
    model = onnx.load(MODEL_PATH)
    model.graph.node[1].op_type = "Erf"
    onnx.save(model, tmp_path / "erf.onnx")
    assert main(["compile", str(tmp_path / "erf.onnx"), "--calib", str(tmp_path / "calib.npz"), "-o", out]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"aipu compile: error: {tmp_path / 'erf.onnx'}: 1 unsupported node of 1 operator type:",
        "  Erf, 1 node: 'conv1.relu' (inputs 1x16x8x8): operator not supported"]
    np.savez(tmp_path / "wrong.npz", images=np.ones((4, 3, 8, 8), np.float32))
    assert "shape [samples, 1, 8, 8]" in _error(["compile", str(MODEL_PATH), "--calib", str(tmp_path / "wrong.npz"),
                                                 "-o", out], capsys)
    assert "--method 'best'" in _error(["compile", str(MODEL_PATH), "--calib", str(tmp_path / "calib.npz"), "-o",
                                        out, "--method", "best"], capsys)
    assert "missing.onnx" in _error(["compile", str(tmp_path / "missing.onnx"), "--calib",
                                     str(tmp_path / "calib.npz"), "-o", out], capsys)
    tiny = tmp_path / "tiny.toml"
    tiny.write_text("[buffers.weight]\nbytes = 8\nport_bytes = 2\n")     # a half: 4 bytes, less than one 3x3 kernel
    message = _error(["compile", str(MODEL_PATH), "--calib", str(tmp_path / "calib.npz"), "-o", out, "--config",
                      str(tiny), "--quiet"], capsys)
    assert message.startswith(f"aipu compile: error: {MODEL_PATH}: layer 'conv1'"), message
    assert not (tmp_path / "out").exists()                       # nothing written


def test_run_refuses_bad_directories_and_inputs(compiled_dir, tmp_path, capsys):
    good = compiled_dir / "out"
    np.save(tmp_path / "bad.npy", np.ones((2, 1, 9, 8), np.float32))
    assert "shape [samples, 1, 8, 8]" in _error(["run", str(good), "--input", str(tmp_path / "bad.npy")], capsys)
    assert "a directory written by `aipu compile`" in _error(["run", str(tmp_path / "nowhere"), "--input",
                                                              str(tmp_path / "bad.npy")], capsys)
    broken = tmp_path / "broken"
    shutil.copytree(good, broken)
    (broken / "dram.bin").write_bytes(b"\0" * 10)
    assert "dram.bin: size = 10" in _error(["run", str(broken), "--input", str(tmp_path / "bad.npy")], capsys)


def _sealed_copy(compiled_dir, tmp_path):
    np.save(tmp_path / "one.npy", np.zeros((1, 1, 8, 8), np.float32))
    copy = tmp_path / "copy"
    shutil.copytree(compiled_dir / "out", copy)
    return copy, ["run", str(copy), "--input", str(tmp_path / "one.npy")]


@pytest.mark.parametrize("name", list(SEALED_FILES))
def test_a_flipped_bit_in_any_file_is_refused_by_name(compiled_dir, tmp_path, capsys, name):
    copy, run = _sealed_copy(compiled_dir, tmp_path)
    data = bytearray((copy / name).read_bytes())
    for position in np.random.default_rng(len(name)).integers(0, 8 * len(data), 3):
        flipped = data.copy()
        flipped[position // 8] ^= 1 << (position % 8)
        (copy / name).write_bytes(flipped)
        message = _error(run, capsys)
        assert f"{name}: sha256 = " in message and "the digest manifest.json seals" in message
    if name == FLOAT_MODEL_FILE:           # a change made on purpose, sealed again, runs
        reseal(copy)
        assert main(run) == 0


def test_an_edited_manifest_or_a_file_from_another_directory_is_refused(compiled_dir, tmp_path, capsys):
    copy, run = _sealed_copy(compiled_dir, tmp_path)
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    for field, value in (("dram_address", 64), ("dtype", "int8")):
        edited = json.loads(json.dumps(manifest))
        edited["inputs"][0][field] = value
        (copy / MANIFEST_FILE).write_text(json.dumps(edited))
        assert "manifest.json: sha256 = " in _error(run, capsys)
    (copy / MANIFEST_FILE).write_text(json.dumps({**manifest, "layers": [{**manifest["layers"][0],
                                                                          "clipped_fraction": float("nan")}]}))
    assert "manifest.json: json = 'ValueError': a JSON document (NaN is not a JSON number)" in _error(run, capsys)
    (copy / MANIFEST_FILE).write_text(json.dumps(seal({**manifest, "version": 1})))
    assert "version 2 (a directory of another aipu version: compile again)" in _error(run, capsys)
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    other = tmp_path / "other"
    assert main(["compile", str(MODEL_PATH), "--calib", str(compiled_dir / "calib.npz"), "-o", str(other),
                 "--quiet", "--compress", "all"]) == 0
    shutil.copy(other / "program.aipu", copy / "program.aipu")
    assert "program.aipu: " in _error(run, capsys)


def test_a_fifo_in_place_of_a_file_is_refused_without_blocking(compiled_dir, tmp_path, capsys):
    import os

    copy, run = _sealed_copy(compiled_dir, tmp_path)
    (copy / "dram.bin").unlink()
    os.mkfifo(copy / "dram.bin")
    assert "dram.bin: file type = 'a FIFO': a regular file" in _error(run, capsys)


def test_a_compile_that_runs_out_of_memory_is_one_line(compiled_dir, tmp_path, capsys, monkeypatch):
    """numpy's MemoryError (a model within the compiler's limits, a machine with less memory) names the model."""
    def exhausted(*args, **kwargs):
        raise MemoryError("Unable to allocate 224. MiB")

    monkeypatch.setattr("aipu.compiler.driver.compile_model", exhausted)
    message = _error(["compile", str(MODEL_PATH), "--calib", str(compiled_dir / "calib.npz"), "-o",
                      str(tmp_path / "out")], capsys)
    assert message.startswith(f"aipu compile: error: {MODEL_PATH}: memory = 'exhausted': a model whose activations")
