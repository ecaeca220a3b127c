"""`aipu codec encode|decode|info`: .npz and .onnx in, .nnr out and back."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aipu import codec
from aipu.app.cli_codec import load_onnx
from aipu.codec.quantize import quantize_uniform, reconstruct
from aipu.app.cli import main


def _tiny_onnx(path, rng):
    conv_w = rng.normal(0, 0.2, (8, 3, 3, 3)).astype(np.float32)
    conv_b = rng.normal(0, 0.1, 8).astype(np.float32)
    fc_w = rng.normal(0, 0.1, (10, 8)).astype(np.float32)
    fc_b = rng.normal(0, 0.1, 10).astype(np.float32)
    mm_w = rng.normal(0, 0.1, (10, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((conv_w, "conv_w"), (conv_b, "conv_b"), (fc_w, "fc_w"), (fc_b, "fc_b"), (mm_w, "mm_w"),
              (np.array([1, 8], dtype=np.int64), "shape"))]
    nodes = [helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["p"]),
             helper.make_node("Reshape", ["p", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["g"], transB=1),
             helper.make_node("MatMul", ["g", "mm_w"], ["y"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    onnx.save(helper.make_model(graph), str(path))
    return {"conv_w": conv_w, "conv_b": conv_b, "fc_w": fc_w, "fc_b": fc_b, "mm_w": mm_w}


def test_onnx_loader_takes_conv_gemm_matmul_initializers(tmp_path):
    expected = _tiny_onnx(tmp_path / "m.onnx", np.random.default_rng(0))
    tensors, groups = load_onnx(tmp_path / "m.onnx")
    assert set(tensors) == set(expected)          # "shape" (a Reshape input) is not a weight
    assert groups == [("conv_w", "conv_b"), ("fc_w", "fc_b"), ("mm_w", None)]


def test_encode_info_decode_onnx(tmp_path, capsys):
    expected = _tiny_onnx(tmp_path / "m.onnx", np.random.default_rng(1))
    assert main(["codec", "encode", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.nnr"), "--bitdepth", "6",
                 "--fast"]) == 0
    assert "bits/weight, encoded in" in capsys.readouterr().out
    assert main(["codec", "info", str(tmp_path / "m.nnr")]) == 0
    table = capsys.readouterr().out
    assert "conv_w" in table and "8x3x3x3 + 8" in table and "tree:" in table and "total: 3 layers" in table
    assert "dec s" in table and "enc s" not in table           # the file holds no encode time
    assert main(["codec", "decode", str(tmp_path / "m.nnr"), "-o", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as out:
        q = quantize_uniform(expected["conv_w"], bitdepth=6)
        np.testing.assert_array_equal(out["conv_w"], reconstruct(q.levels, q.step))
        assert out["fc_b"].shape == (10,)


def test_encode_npz_with_step_and_integer_tensors(tmp_path, capsys):
    rng = np.random.default_rng(2)
    ints = rng.integers(-128, 128, (16, 4, 1, 1)).astype(np.int8)
    np.savez(tmp_path / "t.npz", q=ints, w=rng.normal(0, 0.1, (5, 7)).astype(np.float32))
    assert main(["codec", "encode", str(tmp_path / "t.npz"), "-o", str(tmp_path / "t.nnr"), "--step", "0.01"]) == 0
    assert main(["codec", "info", str(tmp_path / "t.nnr"), "--json"]) == 0
    assert '"bits_per_weight"' in capsys.readouterr().out
    assert main(["codec", "decode", str(tmp_path / "t.nnr"), "-o", str(tmp_path / "back.npz")]) == 0
    with np.load(tmp_path / "back.npz") as out:
        np.testing.assert_array_equal(out["q"], ints)


def test_any_tensor_name_survives_decode(tmp_path):
    """np.savez would take a tensor named "file" for its own argument and "allow_pickle" for its flag."""
    tensors = {"file": np.arange(6, dtype=np.int8), "allow_pickle": np.ones((2, 3), dtype=np.int16),
               "a/b c": np.zeros(4, dtype=np.float32)}
    (tmp_path / "t.nnr").write_bytes(codec.encode(tensors))
    assert main(["codec", "decode", str(tmp_path / "t.nnr"), "-o", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as out:
        assert sorted(out.files) == sorted(tensors)
        for name, array in tensors.items():
            np.testing.assert_array_equal(out[name], array)


@pytest.mark.parametrize("argv,message", [
    (["codec", "encode", "missing.npz", "-o", "x.nnr"], "No such file"),
    (["codec", "encode", "model.txt", "-o", "x.nnr"], "expected an .onnx or .npz"),
    (["codec", "info", "garbage.nnr"], "bad magic"),
    (["codec", "decode", "garbage.nnr", "-o", "x.npz"], "file garbage.nnr"),
    (["codec", "encode", "empty.npz", "-o", "x.nnr"], "empty.npz: tensor 'w': tensor shape (0, 3)"),
])
def test_user_errors_are_one_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.txt").write_text("x")
    (tmp_path / "garbage.nnr").write_bytes(b"\x00" * 40)
    np.savez(tmp_path / "empty.npz", w=np.zeros((0, 3)))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
