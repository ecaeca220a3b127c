"""ONNX models that onnx.checker accepts but that are inconsistent: each breaks one rule a real operator
keeps (group counts, kernel and weight shapes, bias length, names, scales, counts, padding, ranks, attribute
lengths, broadcasting, empty or oversized outputs, division by zero)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, output_shape=("n", "c", "h", "w"), initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "inconsistent", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
                              [numpy_helper.from_array(value, name) for name, value in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _x(shape):
    return [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]


def _conv(weight_shape=(4, 2, 3, 3), input_shape=(1, 2, 8, 8), bias=None, **attributes):
    weights = [("w", np.ones(weight_shape, np.float32))]
    inputs = ["x", "w"]
    if bias is not None:
        weights.append(("b", np.zeros(bias, np.float32)))
        inputs.append("b")
    return _model([helper.make_node("Conv", inputs, ["y"], **attributes)], _x(list(input_shape)), initializers=weights)


def _resize(scale):
    scales = np.array([1, 1, scale, scale], np.float32)
    return _model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")], _x([1, 1, 4, 4]), initializers=[("s", scales)])


def _empty_axes(node):
    node.attribute.append(helper.make_attribute("axes", [], attr_type=onnx.AttributeProto.INTS))
    return node


def _pad(pads):
    return _model([helper.make_node("Pad", ["x", "p"], ["y"])], _x([1, 1, 4, 4]),
                  initializers=[("p", np.array(pads, np.int64))])


def _infinite_weight():
    model = _conv()
    weights = numpy_helper.to_array(model.graph.initializer[0]).copy()
    weights[1, 0, 2, 2] = -np.inf
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(weights, "w"))
    return model


def _batch_norm_dividing_by_zero():
    parameters = [(name, np.ones(4, np.float32)) for name in ("scale", "shift", "mean")]
    return _model([helper.make_node("Conv", ["x", "w"], ["c"]),
                   helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["y"], epsilon=0.0)],
                  _x([1, 2, 8, 8]), initializers=[("w", np.ones((4, 2, 3, 3), np.float32)), *parameters,
                                                  ("var", np.zeros(4, np.float32))])


CASES = {
    "group 0": lambda: _conv(group=0),
    "group negative": lambda: _conv(group=-2),
    "group not dividing the channels": lambda: _conv(weight_shape=(4, 1, 3, 3), input_shape=(1, 3, 8, 8), group=2),
    "kernel_shape against the weights": lambda: _conv(kernel_shape=[5, 5]),
    "weight channels against the input": lambda: _conv(weight_shape=(4, 3, 3, 3)),
    "bias of the wrong length": lambda: _conv(bias=5),
    "duplicate node names": lambda: _model(
        [helper.make_node("Relu", ["x"], ["r"], name="n"), helper.make_node("Relu", ["r"], ["y"], name="n")],
        _x([1, 1, 4, 4])),
    "Resize scale 3000": lambda: _resize(3000.0),
    "Resize scale 0": lambda: _resize(0.0),
    "Reshape to the wrong count": lambda: _model([helper.make_node("Reshape", ["x", "s"], ["y"])], _x([1, 2, 4, 4]),
                                                 ("n", "m"), [("s", np.array([1, 7], np.int64))]),
    "reflect Pad wider than the input": lambda: _model(
        [helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")], _x([1, 1, 4, 4]),
        initializers=[("p", np.array([0, 0, 5, 5, 0, 0, 5, 5], np.int64))]),
    "MaxPool pads larger than the kernel": lambda: _model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[3, 3, 3, 3])], _x([1, 1, 8, 8])),
    "11x11 kernel on a padded 8x8 input": lambda: _conv(weight_shape=(4, 2, 11, 11), pads=[1, 1, 1, 1]),
    "infinite weight": _infinite_weight,
    "BatchNormalization dividing by zero": _batch_norm_dividing_by_zero,
    "rank-0 input": lambda: _model([helper.make_node("Relu", ["x"], ["y"])], _x([]), ()),
    # found by tests/compiler/test_fuzz_models.py
    "Unsqueeze of an empty axes list": lambda: _model([_empty_axes(helper.make_node("Unsqueeze", ["x"], ["y"]))],
                                                      _x([1, 1, 4, 4]), opset=11),
    "Squeeze of an empty axes input": lambda: _model([helper.make_node("Squeeze", ["x", "a"], ["y"])],
                                                     _x([1, 1, 4, 4]), initializers=[("a", np.zeros(0, np.int64))]),
    "Add of an empty constant": lambda: _model([helper.make_node("Add", ["x", "e"], ["y"])], _x([1, 1, 4, 1]),
                                               initializers=[("e", np.zeros(0, np.float32))]),
    "Pad to 2^24 elements": lambda: _pad([0, 0, 0, 0, 0, 0, 1 << 22, 0]),
    "Pad with six pads for four axes": lambda: _pad([0, 0, 1, 0, 0, 1]),
    "Resize scale 1e-40": lambda: _resize(1e-40),
    "Div by zero": lambda: _model([helper.make_node("Div", ["x", "d"], ["y"])], _x([1, 1, 4, 4]),
                                  initializers=[("d", np.array([2, 0, 1, 1], np.float32))]),
    "MaxPool strides for three axes": lambda: _model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[1, 1, 1])], _x([1, 1, 8, 8])),
    "PRelu slope of an empty shape": lambda: _model([helper.make_node("PRelu", ["x", "s"], ["y"])], _x([1, 1, 1, 3]),
                                                    initializers=[("s", np.zeros((0, 1, 1), np.float32))]),
    "Squeeze of axis 4 of four": lambda: _model([helper.make_node("Squeeze", ["x", "a"], ["y"])], _x([1, 1, 4, 4]),
                                                initializers=[("a", np.array([4], np.int64))]),
    "BatchNormalization of three scales for two channels": lambda: _model(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], _x([1, 2, 4, 4]),
        initializers=[(name, np.ones(3, np.float32)) for name in "sbmv"]),
    "Gemm of four rows for six features": lambda: _model([helper.make_node("Gemm", ["x", "b"], ["y"])], _x([1, 6]),
                                                         ("n", "m"), [("b", np.ones((4, 3), np.float32))]),
    "Transpose by perm [0, 2, 2, 1]": lambda: _model([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 2, 1])],
                                                     _x([1, 2, 3, 4])),
}

