"""`aipu codec encode` on pre-quantized ONNX models: QDQ, QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger
(built with onnx.helper, and made by onnxruntime.quantization from the demo's digits model). The integers, scales
and zero points come back exactly from `aipu codec decode`, and the .npz it writes encodes again."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aipu.app.cli import main
from aipu.app.codec_inputs import load_onnx
from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH

RNG = np.random.default_rng(7)
W_INT8 = RNG.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8)
W_UINT8 = RNG.integers(90, 170, (8, 3, 3, 3)).astype(np.uint8)
BIAS = RNG.integers(-3000, 3000, 8).astype(np.int32)
SCALE = np.float32(0.0123)
SCALES = RNG.uniform(0.001, 0.05, 8).astype(np.float32)
X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)


def _save(path, nodes, initializers: dict, inputs=(X,)):
    stored = [numpy_helper.from_array(np.asarray(value), name) for name, value in initializers.items()]
    graph = helper.make_graph(nodes, "q", list(inputs), [Y], stored)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(path))


def _qdq_conv(path, w, scale, zero_point, axis=None, **changes):
    """x -> Conv(x, DequantizeLinear(w), DequantizeLinear(bias)): the QDQ pattern; ``changes`` replace inputs."""
    attributes = {} if axis is None else {"axis": axis}
    inits = {"w": w, "w_scale": scale, "w_zp": zero_point, "b": BIAS, "b_scale": np.float32(SCALE * 0.5),
             "b_zp": np.int32(0), **changes}
    nodes = [helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["w_f"], name="dq_w", **attributes),
             helper.make_node("DequantizeLinear", ["b", "b_scale", "b_zp"], ["b_f"], name="dq_b"),
             helper.make_node("Conv", ["x", "w_f", "b_f"], ["y"], name="conv")]
    _save(path, nodes, {key: value for key, value in inits.items() if value is not None})


def _qlinear_conv(path, x_scale_stored=True):
    """QLinearConv with per-channel uint8 weights and an int32 bias (scale x_scale·w_scale)."""
    inits = {"x_scale": np.float32(0.5), "x_zp": np.uint8(128), "w": W_UINT8, "w_scale": SCALES,
             "w_zp": np.full(8, 128, np.uint8), "y_scale": np.float32(0.1), "y_zp": np.uint8(128), "b": BIAS}
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "x_scale" if x_scale_stored else "x_scale_dynamic", "x_zp", "w",
                                              "w_scale", "w_zp", "y_scale", "y_zp", "b"], ["y"], name="qconv")]
    if not x_scale_stored:
        nodes.insert(0, helper.make_node("Identity", ["x_scale"], ["x_scale_dynamic"]))
    _save(path, nodes, inits)


def _qlinear_matmul(path):
    a = RNG.integers(-100, 100, (4, 6)).astype(np.int8)
    b = RNG.integers(0, 255, (6, 5)).astype(np.uint8)
    inits = {"a": a, "a_scale": np.float32(0.25), "a_zp": np.int8(3), "b": b, "b_scale": SCALES[:5],
             "b_zp": np.arange(120, 125, dtype=np.uint8), "y_scale": np.float32(1), "y_zp": np.uint8(0)}
    nodes = [helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "y_scale", "y_zp"],
                              ["y"], name="qmm")]
    _save(path, nodes, inits, inputs=())


def _conv_integer(path):
    nodes = [helper.make_node("ConvInteger", ["x", "w", "x_zp", "w_zp"], ["y"], name="convint")]
    _save(path, nodes, {"w": W_UINT8, "x_zp": np.uint8(128), "w_zp": np.uint8(127)},
          inputs=(helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 8, 8]),))


def _matmul_integer(path):
    b = RNG.integers(-128, 128, (6, 5)).astype(np.int8)
    nodes = [helper.make_node("MatMulInteger", ["x", "b", "", "b_zp"], ["y"], name="mmint")]
    _save(path, nodes, {"b": b, "b_zp": np.arange(-2, 3, dtype=np.int8)},
          inputs=(helper.make_tensor_value_info("x", TensorProto.INT8, [4, 6]),))


def _mixed(path):
    """A float Conv, then a QLinearConv: both layers are coded."""
    w_float = RNG.normal(0, 0.1, (3, 3, 1, 1)).astype(np.float32)
    inits = {"wf": w_float, "x_scale": np.float32(0.5), "x_zp": np.uint8(128), "w": W_UINT8, "w_scale": SCALES,
             "w_zp": np.full(8, 128, np.uint8), "y_scale": np.float32(0.1), "y_zp": np.uint8(128), "b": BIAS}
    nodes = [helper.make_node("Conv", ["x", "wf"], ["c"], name="float_conv"),
             helper.make_node("QuantizeLinear", ["c", "x_scale", "x_zp"], ["cq"]),
             helper.make_node("QLinearConv", ["cq", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp",
                                              "b"], ["y"], name="qconv")]
    _save(path, nodes, inits)


def _decode(tmp_path, model, *options) -> dict[str, np.ndarray]:
    """The .npz `aipu codec decode` writes for the container `aipu codec encode` makes of ``model``."""
    assert main(["codec", "encode", str(model), "-o", str(tmp_path / "m.nnr"), "--fast", *options]) == 0
    assert main(["codec", "decode", str(tmp_path / "m.nnr"), "-o", str(tmp_path / "m.npz")]) == 0
    with np.load(tmp_path / "m.npz") as out:
        return dict(out)


def _assert_npz_encodes_again(tmp_path, decoded: dict[str, np.ndarray]) -> None:
    """decode -> encode -> decode gives every array back, quantization members included."""
    assert main(["codec", "encode", str(tmp_path / "m.npz"), "-o", str(tmp_path / "again.nnr"), "--fast"]) == 0
    assert main(["codec", "decode", str(tmp_path / "again.nnr"), "-o", str(tmp_path / "again.npz")]) == 0
    with np.load(tmp_path / "again.npz") as again:
        assert sorted(again.files) == sorted(decoded)
        for name, array in decoded.items():
            assert again[name].dtype == array.dtype and again[name].tobytes() == array.tobytes(), name


def _expect(decoded, name, values, scale=None, zero_point=(0,), axis=None):
    assert decoded[name].dtype == values.dtype and np.array_equal(decoded[name], values), name
    np.testing.assert_array_equal(decoded[f"{name}:zero_point"], np.ravel(zero_point))
    assert decoded[f"{name}:zero_point"].dtype == values.dtype
    if scale is None:
        assert f"{name}:scale" not in decoded
    else:
        assert decoded[f"{name}:scale"].tobytes() == np.ravel(scale).astype(np.float32).tobytes()
    assert (f"{name}:axis" not in decoded) if axis is None else decoded[f"{name}:axis"] == axis


@pytest.mark.parametrize("w,scale,zero_point,axis", [
    (W_INT8, SCALE, np.int8(0), None), (W_UINT8, SCALE, np.uint8(128), None),
    (W_INT8, SCALES, np.zeros(8, np.int8), 0), (W_UINT8, SCALES, np.arange(124, 132, dtype=np.uint8), 0),
], ids=["int8 per tensor", "uint8 per tensor", "int8 per channel", "uint8 per channel"])
def test_qdq_weights_and_bias(tmp_path, w, scale, zero_point, axis):
    _qdq_conv(tmp_path / "m.onnx", w, scale, zero_point, axis)
    decoded = _decode(tmp_path, tmp_path / "m.onnx")
    _expect(decoded, "w", w, scale, zero_point, axis)
    _expect(decoded, "b", BIAS, SCALE * 0.5)
    assert load_onnx(tmp_path / "m.onnx").groups == [("w", "b")]
    _assert_npz_encodes_again(tmp_path, decoded)


@pytest.mark.parametrize("x_scale_stored", [True, False])
def test_qlinear_conv_and_its_int32_bias(tmp_path, x_scale_stored):
    """The bias's scale is x_scale·w_scale (per channel here) where x_scale is stored, else none; zero point 0."""
    _qlinear_conv(tmp_path / "m.onnx", x_scale_stored)
    decoded = _decode(tmp_path, tmp_path / "m.onnx")
    _expect(decoded, "w", W_UINT8, SCALES, np.full(8, 128), 0)
    _expect(decoded, "b", BIAS, np.float32(0.5) * SCALES if x_scale_stored else None, (0,),
            0 if x_scale_stored else None)
    _assert_npz_encodes_again(tmp_path, decoded)


def test_qlinear_matmul_takes_both_stored_inputs(tmp_path):
    _qlinear_matmul(tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"))
    stored = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    decoded = _decode(tmp_path, tmp_path / "m.onnx")
    _expect(decoded, "a", stored["a"], 0.25, (3,))
    _expect(decoded, "b", stored["b"], SCALES[:5], np.arange(120, 125), 1)     # one per column of B
    _assert_npz_encodes_again(tmp_path, decoded)


def test_conv_integer_and_matmul_integer_carry_zero_points_without_scale(tmp_path):
    _conv_integer(tmp_path / "c.onnx")
    _expect(_decode(tmp_path, tmp_path / "c.onnx"), "w", W_UINT8, None, (127,))
    _matmul_integer(tmp_path / "m.onnx")
    stored = {init.name: numpy_helper.to_array(init) for init in onnx.load(str(tmp_path / "m.onnx")).graph.initializer}
    _expect(_decode(tmp_path, tmp_path / "m.onnx"), "b", stored["b"], None, np.arange(-2, 3), 1)


def test_a_mixed_model_codes_its_float_and_its_quantized_layer(tmp_path, capsys):
    _mixed(tmp_path / "m.onnx")
    decoded = _decode(tmp_path, tmp_path / "m.onnx", "--bits", "6")
    assert decoded["wf"].dtype == np.float32 and "wf:scale" not in decoded
    _expect(decoded, "w", W_UINT8, SCALES, np.full(8, 128), 0)
    capsys.readouterr()
    assert main(["codec", "info", str(tmp_path / "m.nnr")]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert " axis 0 + axis 0 " in rows["w"] and " - " in rows["wf"]


def _dynamic_scale(path):
    """The weight is stored, its scale computed: no stored quantized weight, an error."""
    _qdq_conv(path, W_INT8, SCALE, np.int8(0), w_scale=None, s=SCALE)
    model = onnx.load(str(path))
    model.graph.node.insert(0, helper.make_node("Identity", ["s"], ["w_scale"]))
    onnx.save(model, str(path))


def _block_size(path):
    _qdq_conv(path, W_INT8, np.full((8, 1, 3, 3), SCALE), np.int8(0), axis=0)
    model = onnx.load(str(path))
    model.graph.node[0].attribute.append(helper.make_attribute("block_size", 3))
    onnx.save(model, str(path))


ONNX_ERRORS = {
    "dynamic scale": (_dynamic_scale, "DequantizeLinear 'dq_w' input 1 'w_scale' = 'computed in the graph': an "
                                      "initializer: the scale of the stored weight 'w'"),
    "scale of the wrong length": (lambda path: _qdq_conv(path, W_INT8, SCALES[:5], np.zeros(8, np.int8), axis=0),
                                  "DequantizeLinear 'dq_w' scale of 'w' = [0.0"),
    "zero point of another dtype": (lambda path: _qdq_conv(path, W_INT8, SCALE, np.uint8(0)),
                                    "input 2 'w_zp' = 'uint8': int8, the dtype of the weight 'w'"),
    "NaN scale": (lambda path: _qdq_conv(path, W_INT8, np.float32("nan"), np.int8(0)), "scale[0] of 'w' = nan: "),
    "negative scale": (lambda path: _qdq_conv(path, W_INT8, np.float32(-0.5), np.int8(0)),
                       "scale[0] of 'w' = -0.5: a finite positive number that float32 holds exactly"),
    "axis outside the weight": (lambda path: _qdq_conv(path, W_INT8, SCALES, np.zeros(8, np.int8), axis=7),
                                "axis of 'w' = 7: an axis of the tensor, 0..3, or null"),
    "2-D scale": (lambda path: _qdq_conv(path, W_INT8, SCALES.reshape(8, 1), np.int8(0), axis=0),
                  "input 1 'w_scale' shape = [8, 1]: a scalar or 1-D scale"),
    "blocked quantization": (_block_size, "DequantizeLinear 'dq_w' block_size = 3: 0: blocked quantization"),
    "integer scale": (lambda path: _qdq_conv(path, W_INT8, np.int32(2), np.int8(0)),
                      "input 1 'w_scale' = 'int32': a float scale of the stored weight 'w'"),
}


def _assert_refused(capsys, path, words: str) -> None:
    """`aipu codec encode path` prints one line naming the file, then ``words``, and exits with status 2."""
    assert main(["codec", "encode", str(path), "-o", str(path.with_suffix(".nnr"))]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aipu codec: error: {path}: ") and err.count("\n") == 1, err
    assert words in err, err


@pytest.mark.parametrize("name", ONNX_ERRORS)
def test_hostile_quantization_is_one_line_naming_the_file(tmp_path, capsys, name):
    build, words = ONNX_ERRORS[name]
    build(tmp_path / "m.onnx")
    _assert_refused(capsys, tmp_path / "m.onnx", words)


def test_a_dequantized_activation_is_no_stored_weight(tmp_path):
    nodes = [helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["w_f"]),
             helper.make_node("Conv", ["x", "w_f", "b"], ["y"])]
    _save(tmp_path / "m.onnx", nodes, {"s": SCALE, "zp": np.uint8(0), "b": np.zeros(8, np.float32)},
          inputs=(X, helper.make_tensor_value_info("xq", TensorProto.UINT8, [8, 3, 3, 3])))
    weights = load_onnx(tmp_path / "m.onnx")
    assert list(weights.tensors) == ["b"] and weights.quantization == {}


NPZ_ERRORS = {
    "scale without its tensor": ({"w": W_INT8, "v:scale": SCALES}, "v:scale = 'a member without its tensor'"),
    "float axis": ({"w": W_INT8, "w:scale": SCALES, "w:axis": np.float32(0)}, "w:axis = 0.0: one integer"),
    "zero point out of range": ({"w": W_INT8, "w:zero_point": np.int64(300)},
                                "w:zero_point[0] = 300: an integer in -128..127"),
    "quantized float": ({"w": W_INT8.astype(np.float32), "w:zero_point": np.int64(0)},
                        "w = 'float32': a tensor of int8, uint8"),
}


@pytest.mark.parametrize("name", NPZ_ERRORS)
def test_hostile_npz_quantization_is_one_line(tmp_path, capsys, name):
    arrays, words = NPZ_ERRORS[name]
    np.savez(tmp_path / "t.npz", **arrays)
    _assert_refused(capsys, tmp_path / "t.npz", words)


# --------------------------------------------------------------------------------------------- onnxruntime's models
def _quantized_digits(directory, kind: str):
    """The demo's digits CNN quantized by onnxruntime: QDQ or QOperator (static, 4 calibration images), dynamic."""
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)

    class Images(CalibrationDataReader):
        def __init__(self):
            with np.load(DATA_PATH) as data:
                self.images = iter(data["calibration_images"][:4, None])

        def get_next(self):
            return next(({"image": image} for image in self.images), None)

    path = directory / f"{kind}.onnx"
    if kind == "dynamic":
        quantize_dynamic(MODEL_PATH, path, weight_type=QuantType.QUInt8)
        return path
    form, per_channel, weight_type = kind.split("-")
    quantize_static(MODEL_PATH, path, Images(), quant_format=getattr(QuantFormat, form),
                    per_channel=per_channel == "channel", weight_type=getattr(QuantType, weight_type),
                    activation_type=QuantType.QUInt8)
    return path


# op type -> inputs of (weight, scale, zero point), and of an int32 bias: the oracle the decoded .npz is held against
QUANTIZED_INPUTS = {"DequantizeLinear": (0, 1, 2), "QLinearConv": (3, 4, 5), "QGemm": (3, 4, 5),
                    "ConvInteger": (1, None, 3), "MatMulInteger": (1, None, 3)}
BIAS_INPUTS = {"QLinearConv": 8, "QGemm": 6}


def _check_against_the_model(decoded: dict[str, np.ndarray], model) -> int:
    """Every stored quantized tensor is decoded with the model's own scale and zero point (per output channel, axis
    0, where there are several); the number of tensors checked."""
    stored = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    checked = 0
    for node in model.graph.node:
        weight, scale, zero_point = QUANTIZED_INPUTS.get(node.op_type, (None, None, None))
        if weight is None or node.input[weight] not in stored:
            continue
        zero_points = stored[node.input[zero_point]]
        axis = 0 if zero_points.size > 1 else None
        _expect(decoded, node.input[weight], stored[node.input[weight]],
                None if scale is None else stored[node.input[scale]], zero_points, axis)
        if node.op_type in BIAS_INPUTS:
            bias_scale = stored[node.input[1]] * stored[node.input[4]]
            _expect(decoded, node.input[BIAS_INPUTS[node.op_type]], stored[node.input[BIAS_INPUTS[node.op_type]]],
                    bias_scale, (0,), axis)
        checked += 1 + (node.op_type in BIAS_INPUTS)
    return checked


@pytest.mark.parametrize("kind", ["QDQ-channel-QInt8", "QDQ-tensor-QUInt8", "QOperator-channel-QInt8",
                                  "QOperator-tensor-QUInt8", "dynamic"])
def test_onnxruntime_quantized_digits(tmp_path, kind):
    """Every stored quantized weight and int32 bias of the model comes back exactly, with its parameters."""
    path = _quantized_digits(tmp_path, kind)
    decoded = _decode(tmp_path, path)
    assert _check_against_the_model(decoded, onnx.load(str(path))) == (4 if kind == "dynamic" else 8)
    _assert_npz_encodes_again(tmp_path, decoded)


@pytest.mark.slow
def test_ddddocr_old_convinteger_weights_round_trip(tmp_path):
    """A real dynamically quantized model (ConvInteger, uint8 weights with zero points): every weight back."""
    from aipu.app.models.real import default_cache, fetch

    path = fetch("ddddocr-ocr-old", default_cache())
    decoded = _decode(tmp_path, path)
    assert _check_against_the_model(decoded, onnx.load(str(path))) > 0
    assert all(f"{name}:scale" not in decoded for name in decoded)       # ConvInteger carries no scale
