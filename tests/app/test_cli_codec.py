"""`aipu codec encode|decode|info`: .npz and .onnx in, .nnr out and back."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aipu import codec
from aipu.app.codec_inputs import load_onnx
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
    tensors, groups, quantization = load_onnx(tmp_path / "m.onnx")
    assert set(tensors) == set(expected)          # "shape" (a Reshape input) is not a weight
    assert groups == [("conv_w", "conv_b"), ("fc_w", "fc_b"), ("mm_w", None)] and quantization == {}


def test_encode_info_decode_onnx(tmp_path, capsys):
    expected = _tiny_onnx(tmp_path / "m.onnx", np.random.default_rng(1))
    assert main(["codec", "encode", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.nnr"), "--bits", "7",
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


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_bits_n_gives_n_bit_signed_levels(tmp_path, bits):
    """--bits N: the float weights' levels span +-(2^(N-1) - 1), the stream's sublayer_bitdepth N - 1."""
    from aipu.codec.api import decode_layer

    np.savez(tmp_path / "w.npz", w=np.linspace(-1, 1, 301, dtype=np.float32).reshape(1, 301))
    assert main(["codec", "encode", str(tmp_path / "w.npz"), "-o", str(tmp_path / "w.nnr"), "--bits", str(bits),
                 "--fast"]) == 0
    levels = decode_layer((tmp_path / "w.nnr").read_bytes(), "w", levels=True)["w"]
    assert levels.min() == -(2 ** (bits - 1) - 1) and levels.max() == 2 ** (bits - 1) - 1


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
    (["codec", "encode", "model.txt", "-o", "x.nnr"], "input = 'model.txt': an .onnx or .npz file"),
    (["codec", "info", "garbage.nnr"], "bad magic"),
    (["codec", "decode", "garbage.nnr", "-o", "x.npz"], "file garbage.nnr"),
    (["codec", "encode", "empty.npz", "-o", "x.nnr"], "empty.npz: tensor 'w': tensor shape (0, 3)"),
    (["codec", "decode", "/dev/zero", "-o", "x.npz"], "/dev/zero: file type = 'a character device'"),
    (["codec", "info", "/dev/urandom"], "/dev/urandom: file type = 'a character device'"),
    (["codec", "encode", "truncated.npz", "-o", "x.nnr"], "truncated.npz: format = 'not a complete zip archive'"),
    (["codec", "encode", "garbage.npz", "-o", "x.nnr"], "garbage.npz: format = 'not a complete zip archive'"),
    (["codec", "encode", "crc.npz", "-o", "x.nnr"], "crc.npz: w = "),
    (["codec", "encode", "header.npz", "-o", "x.nnr"], "header.npz: w = \"('EOF in multi-line statement'"),
    (["codec", "encode", "none.npz", "-o", "x.nnr"], "none.npz: arrays = 'none': at least one tensor"),
    (["codec", "encode", "strings.npz", "-o", "x.nnr"], "strings.npz: w = '<U1': an integer or float tensor"),
    (["codec", "encode", "huge.npz", "-o", "x.nnr"], "huge.npz: w = [100000, 100000, 4]: a shape of at most"),
    (["codec", "encode", "truncated.onnx", "-o", "x.nnr"], "truncated.onnx: file = 'truncated.onnx': not an ONNX"),
    (["codec", "encode", "external.onnx", "-o", "x.nnr"], "initializer 'w' = 'external data': tensors stored"),
    (["codec", "encode", "oddtype.onnx", "-o", "x.nnr"], "initializer 'w' = 'its data': readable as its dtype and dims"),
    (["codec", "encode", "empty.npz", "-o", "x.nnr", "--step", "inf"], "--step = inf: a finite positive number"),
    (["codec", "encode", "empty.npz", "-o", "x.nnr", "--step", "nan"], "--step = nan: a finite positive number"),
    (["codec", "encode", "empty.npz", "-o", "x.nnr", "--clusters", "0"], "--clusters = 0: an integer 1 .. 65536"),
    (["codec", "encode", "empty.npz", "-o", "x.nnr", "--bits", "40"], "--bits = 40: an integer 2 .. 32"),
    (["codec", "encode", "empty.npz", "-o", "x.nnr", "--bits", "1"], "--bits = 1: an integer 2 .. 32"),
])
def test_user_errors_are_one_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    _hostile_files(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def _hostile_files(root):
    """Files a user may hand `aipu codec`, each wrong in one way."""
    (root / "model.txt").write_text("x")
    (root / "garbage.nnr").write_bytes(b"\x00" * 40)
    (root / "garbage.npz").write_bytes(bytes(range(256)) * 4)
    np.savez(root / "empty.npz", w=np.zeros((0, 3)))
    np.savez(root / "none.npz")
    np.savez(root / "strings.npz", w=np.array(["a", "b"]))
    np.savez(root / "good.npz", w=np.arange(64, dtype=np.float32))
    data = (root / "good.npz").read_bytes()
    (root / "truncated.npz").write_bytes(data[:len(data) // 2])
    stored = data.index(b"\x93NUMPY")
    (root / "crc.npz").write_bytes(data[:stored + 200] + bytes([data[stored + 200] ^ 1]) + data[stored + 201:])
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, np.float32))
    with open(root / "huge.npy", "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {**header, "shape": (100000, 100000, 4)})
    import zipfile
    with zipfile.ZipFile(root / "huge.npz", "w") as archive:
        archive.write(root / "huge.npy", "w.npy")
    with zipfile.ZipFile(root / "header.npz", "w") as archive:       # a header numpy's tokenize cannot read
        archive.writestr("w.npy", data[stored:].split(b"PK")[0].replace(b"'descr':", b"'descr'{"))
    _tiny_onnx(root / "tiny.onnx", np.random.default_rng(3))
    model = (root / "tiny.onnx").read_bytes()
    (root / "truncated.onnx").write_bytes(model[:len(model) // 2])
    for name, change in (("external.onnx", _external), ("oddtype.onnx", _odd_type)):
        proto = onnx.load(str(root / "tiny.onnx"))
        weight = helper.make_tensor("w", TensorProto.FLOAT, [8, 3, 3, 3], np.zeros(216, np.float32))
        change(weight)
        proto.graph.initializer.append(weight)
        proto.graph.node[0].input[1] = "w"
        onnx.save(proto, str(root / name))


def _external(tensor):
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="weights.bin")


def _odd_type(tensor):
    tensor.data_type = 999


@pytest.mark.parametrize("search", ["sublayer", "cu"])
def test_encode_search_chooses_where_the_modes_are_tried(tmp_path, search):
    """Both searches decode to the levels; --search sublayer codes every CU of a sublayer in one mode."""
    from aipu.codec.encoder import SEARCH_CHOICES

    rng = np.random.default_rng(3)
    levels = np.round(rng.laplace(0, 3, (96, 80)) * (rng.random((96, 80)) < 0.4)).astype(np.int8)
    levels[:, :40] = 0
    np.savez(tmp_path / "t.npz", q=levels)
    assert main(["codec", "encode", str(tmp_path / "t.npz"), "-o", str(tmp_path / "t.nnr"), "--search", search]) == 0
    assert search in SEARCH_CHOICES
    decoded, infos = codec.decode_with_info((tmp_path / "t.nnr").read_bytes())
    np.testing.assert_array_equal(decoded["q"], levels)
    trees = [tree for tree in ("octree", "unitree", "tagtree", "uni_tagtree") if infos[0].modes.get(tree)]
    if search == "sublayer":
        assert len(trees) == 1 and "select_map_mode_3" not in infos[0].modes
