"""Spelt-out hard-swish and hard-sigmoid chains become the one operator, computing what onnxruntime computes
for the chain; a chain whose intermediate has another reader stays as it is."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aipu.app.ort_compare import single_thread_session
from aipu.compiler.graph import load_graph
from aipu.compiler.normalize import normalize


def _scalar(name: str, value: float):
    return numpy_helper.from_array(np.array(value, np.float32), name)


def _model(tmp_path, nodes, outputs=("y",), opset=17):
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]), *nodes], "spelt",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 4, 6, 6]) for name in outputs],
        [numpy_helper.from_array(np.random.default_rng(1).normal(0, 1, (4, 2, 3, 3)).astype(np.float32), "w"),
         _scalar("three", 3.0), _scalar("zero", 0.0), _scalar("six", 6.0), _scalar("sixth", 1 / 6)])
    path = tmp_path / "spelt.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


HARD_SWISH = [helper.make_node("Add", ["c", "three"], ["a"], name="add"),
              helper.make_node("Clip", ["a", "zero", "six"], ["r"], name="clip"),
              helper.make_node("Mul", ["c", "r"], ["m"], name="mul"),
              helper.make_node("Div", ["m", "six"], ["y"], name="div")]
HARD_SIGMOID = [helper.make_node("Add", ["three", "c"], ["a"], name="add"),
                helper.make_node("Clip", ["a", "zero", "six"], ["r"], name="clip"),
                helper.make_node("Mul", ["r", "sixth"], ["y"], name="scale")]


def _same_as_onnxruntime(path, graph) -> None:
    x = np.random.default_rng(2).normal(0, 2, (1, 2, 6, 6)).astype(np.float32)
    want = single_thread_session(onnx.load(path)).run(None, {"x": x})[0]
    got = single_thread_session(graph.to_onnx()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_hard_swish_and_hard_sigmoid_chains_become_one_operator(tmp_path):
    for nodes, op in ((HARD_SWISH, "HardSwish"), (HARD_SIGMOID, "HardSigmoid")):
        path = _model(tmp_path, nodes)
        graph = normalize(load_graph(path))
        assert [(node.op, node.inputs[0], node.outputs) for node in graph.nodes][1:] == [(op, "c", ("y",))]
        _same_as_onnxruntime(path, graph)


def test_before_opset_14_hard_swish_is_x_times_hard_sigmoid(tmp_path):
    path = _model(tmp_path, HARD_SWISH, opset=11)
    graph = normalize(load_graph(path))
    assert [(node.op, node.inputs) for node in graph.nodes][1:] == [("HardSigmoid", ("c",)), ("Mul", ("c", "r"))]
    _same_as_onnxruntime(path, graph)


def test_a_chain_with_a_second_reader_stays(tmp_path):
    path = _model(tmp_path, HARD_SWISH, outputs=("y", "a"))      # x + 3 is also an output
    graph = normalize(load_graph(path))
    assert [node.op for node in graph.nodes] == ["Conv", "Add", "Clip", "Mul", "Div"]


def test_a_per_channel_scale_and_offset_after_a_conv_fold_into_it(tmp_path):
    """PP-LCNet's learnable scale and offset after each conv: a Mul by a [1, C, 1, 1] constant, an Add of a
    [C, 1, 1] one and a Div by a scalar fold into the conv; a [W] constant (broadcast along the width) stays."""
    rng = np.random.default_rng(3)
    scale = numpy_helper.from_array(rng.normal(1, 0.2, (1, 4, 1, 1)).astype(np.float32), "scale")
    offset = numpy_helper.from_array(rng.normal(0, 0.2, (4, 1, 1)).astype(np.float32), "offset")
    width = numpy_helper.from_array(rng.normal(0, 0.2, 6).astype(np.float32), "width")
    nodes = [helper.make_node("Mul", ["c", "scale"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "offset"], ["a"], name="add"),
             helper.make_node("Div", ["a", "six"], ["d"], name="div"),
             helper.make_node("Add", ["d", "width"], ["y"], name="by_width")]
    path = _model(tmp_path, nodes)
    model = onnx.load(path)
    model.graph.initializer.extend([scale, offset, width])
    onnx.save(model, path)
    graph = normalize(load_graph(path))
    assert [(node.op, node.outputs) for node in graph.nodes] == [("Conv", ("d",)), ("Add", ("y",))]
    _same_as_onnxruntime(path, graph)


def test_a_matmul_and_its_bias_row_become_one_gemm(tmp_path):
    """The classifier head exporters write as MatMul then Add: one Gemm, whose bias the quantizer puts in
    int32 instead of rounding the sum to 8 bits twice."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("GlobalAveragePool", ["c"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "fc"], ["m"], name="fc"),
             helper.make_node("Add", ["m", "fc_bias"], ["y"], name="fc_add")]
    path = _model(tmp_path, nodes)
    model = onnx.load(path)
    model.graph.output[0].type.tensor_type.shape.Clear()
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 1
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 3
    model.graph.initializer.extend([numpy_helper.from_array(rng.normal(0, 1, (4, 3)).astype(np.float32), "fc"),
                                    numpy_helper.from_array(rng.normal(0, 1, 3).astype(np.float32), "fc_bias")])
    onnx.save(model, path)
    graph = normalize(load_graph(path))
    assert [node.op for node in graph.nodes][-1:] == ["Gemm"] and graph.nodes[-1].outputs == ("y",)
    _same_as_onnxruntime(path, graph)
