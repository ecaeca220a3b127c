"""Dynamically quantized models (compiler/dynamic.py): onnxruntime's quantize_dynamic output read as the float
model it computes, then calibrated like any float model; its ConvInteger/MatMulInteger layers keep their
integer weights (per-tensor weights), so the NPU's accumulators equal onnxruntime's ConvInteger on the same
integer input."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aipu.app.models.train_digits import MODEL_PATH
from aipu.app.ort_compare import single_thread_session
from aipu.compiler.driver import compile_model
from aipu.compiler.graph import load_graph
from aipu.compiler.normalize import normalize
from aipu.compiler.qir import QConv
from aipu.compiler.quant_options import QuantOptions
from aipu.sim import golden
from aipu.sim.interpreter import run
from aipu.sim.machine.errors import InputError
from tests.compiler.test_prequantized import _cpu_has_vnni
from tests.sim.golden.test_conv import tapwise_int64_conv


@pytest.fixture(scope="module")
def dynamic_model(tmp_path_factory):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    path = tmp_path_factory.mktemp("dynamic") / "digits_dynamic.onnx"
    quantize_dynamic(str(MODEL_PATH), str(path), weight_type=QuantType.QInt8)
    return path


def test_the_pattern_becomes_the_float_operators_with_the_models_own_weights(dynamic_model):
    model = onnx.load(dynamic_model)
    integer_ops = [node for node in model.graph.node if node.op_type in ("ConvInteger", "MatMulInteger")]
    graph = normalize(load_graph(dynamic_model))
    assert [node.op for node in graph.nodes if node.op in ("Conv", "Gemm", "MatMul")] == ["Conv"] * 3 + ["Gemm"]
    assert not {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger", "Cast"} & {node.op for node in graph.nodes}
    initializers = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for integer, node in zip(integer_ops, (node for node in graph.nodes if node.op in ("Conv", "Gemm"))):
        w_q, w_zero = initializers[integer.input[1]], initializers[integer.input[3]]
        scale = initializers[integer.input[1].replace("_quantized", "_scale")]
        np.testing.assert_array_equal(graph.constants[node.inputs[1]],
                                      ((w_q.astype(np.float64) - w_zero) * scale).astype(np.float32))


def test_compiles_with_calibration_bit_exact_and_keeps_the_integer_weights(dynamic_model, digits_data, tmp_path):
    """Per-tensor weights: every MAC layer multiplies the model's own integers, so its accumulators are
    onnxruntime's ConvInteger/MatMulInteger on the same integer input; the program equals the quantized model;
    top-1 agrees with onnxruntime's dynamic model on most held-out digits."""
    calibration = tmp_path / "calibration.npz"
    np.savez(calibration, images=digits_data["calibration_images"])
    with pytest.raises(InputError, match="dynamically quantized model"):
        compile_model(dynamic_model)
    compiled = compile_model(dynamic_model, calibration, options=QuantOptions(per_channel_weights=False))
    qmodel, network = compiled.qmodel, compiled.network
    model = onnx.load(dynamic_model)
    initializers = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    weights = [initializers[node.input[1]] for node in model.graph.node
               if node.op_type in ("ConvInteger", "MatMulInteger")]
    mac_layers = [op for op in qmodel.ops if isinstance(op, QConv)]
    assert [op.name for op in mac_layers] == [node.name for node in model.graph.node
                                              if node.op_type in ("ConvInteger", "MatMulInteger")]
    for op, w_q in zip(mac_layers, weights):
        expected = w_q if w_q.ndim == 4 else w_q.T.reshape(*w_q.T.shape, 1, 1)
        np.testing.assert_array_equal(op.w, expected, err_msg=op.name)
    images = digits_data["eval_images"][:60]
    session = single_thread_session(model)
    agree, exact_ort = 0, _cpu_has_vnni()      # onnxruntime's u8 x s8 kernels saturate pair sums on AVX2 alone
    for image in images:
        x = qmodel.quantize_inputs({"image": image[None]})
        values = qmodel.run(x, keep=True)
        for op in mac_layers[:3]:        # the convs: the units' accumulators, an exact reference, onnxruntime
            zero = qmodel.tensors[op.x].zero_point
            accumulators = golden.conv2d(values[op.x], op.w, x_zero_point=zero, padding=op.padding,
                                         stride=op.stride)
            np.testing.assert_array_equal(accumulators, tapwise_int64_conv(values[op.x], op.w, zero, 0, op.stride,
                                                                           op.padding, op.dilation, op.groups))
            if exact_ort:
                np.testing.assert_array_equal(accumulators, _conv_integer(values[op.x], op.w, zero, op))
        result = run(network.program, network.memory(x))
        logits = network.read(result.memory, qmodel.outputs[0])
        np.testing.assert_array_equal(logits, values[qmodel.outputs[0]])
        agree += int(np.argmax(logits) == np.argmax(session.run(None, {"image": image[None]})[0]))
    assert agree >= 0.95 * len(images), agree


def _conv_integer(x: np.ndarray, w: np.ndarray, x_zero: int, op: QConv) -> np.ndarray:
    """onnxruntime's ConvInteger (int32 accumulators) on ``x`` with zero point ``x_zero``."""
    node = helper.make_node("ConvInteger", ["x", "w", "x_zero"], ["y"], pads=list(op.padding),
                            strides=list(op.stride))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(x_zero), "x_zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return single_thread_session(model).run(None, {"x": x})[0]
