"""The ONNX front end (compiler/graph.py, compiler/normalize.py): reading, shaping, folding, rewriting, refusing."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from aipu.app.models.train_digits import MODEL_PATH
from aipu.app.ort_compare import single_thread_session
from aipu.compiler.graph import load_graph, parse_input_shapes
from aipu.compiler.normalize import UnsupportedNodes, normalize
from aipu.sim.machine.errors import InputError


def _save(tmp_path, graph: onnx.GraphProto, opset: int = 17, name: str = "model.onnx"):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / name
    onnx.save(model, path)
    return path


def _const(name: str, value: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _exporter_style_graph(batch="N", height=8) -> onnx.GraphProto:
    """What exporters write: a Constant node, BN after a conv, Identity and Dropout, SAME_UPPER padding, and
    a Flatten spelt Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Constant", [], ["eps_scale"], value=_const("v", np.float32(1.0))),
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", auto_pad="SAME_UPPER", strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "g", "beta", "mean", "var"], ["bn1"], name="bn1", epsilon=1e-3),
        helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
        helper.make_node("Identity", ["r1"], ["i1"], name="identity"),
        helper.make_node("Dropout", ["i1"], ["d1"], name="dropout"),
        helper.make_node("Mul", ["d1", "eps_scale"], ["m1"], name="scale"),
        helper.make_node("Shape", ["m1"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["m1", "target"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["y"], name="fc", transB=1),
    ]
    initializers = [
        _const("w1", rng.normal(size=(4, 3, 3, 3)).astype(np.float32)),
        _const("b1", rng.normal(size=4).astype(np.float32)),
        _const("g", rng.uniform(0.5, 2, 4).astype(np.float32)), _const("beta", rng.normal(size=4).astype(np.float32)),
        _const("mean", rng.normal(size=4).astype(np.float32)), _const("var", rng.uniform(0.5, 2, 4).astype(np.float32)),
        _const("zero", np.int64(0)), _const("axes0", np.array([0], np.int64)),
        _const("minus_one", np.array([-1], np.int64)),
        _const("fc_w", rng.normal(size=(5, 4 * 4 * 5)).astype(np.float32)),
        _const("fc_b", rng.normal(size=5).astype(np.float32)),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, height, 9])
    return helper.make_graph(nodes, "exported", [x],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 5])], initializers)


def test_embedded_model_round_trips_through_the_front_end():
    graph = normalize(load_graph(MODEL_PATH))
    assert graph.shapes[graph.inputs[0]][0] == 1      # the model's symbolic batch
    images = np.random.default_rng(1).random((1, *graph.shapes[graph.inputs[0]][1:]), dtype=np.float32)
    feeds = {graph.inputs[0]: images}
    want = single_thread_session(onnx.load(MODEL_PATH)).run(None, feeds)[0]
    got = single_thread_session(graph.to_onnx()).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_exporter_idioms_fold_away_and_the_function_is_unchanged(tmp_path):
    path = _save(tmp_path, _exporter_style_graph())
    graph = normalize(load_graph(path, parse_input_shapes(["x=2x3x8x9"])))
    assert [node.op for node in graph.nodes] == ["Conv", "Relu", "Mul", "Reshape", "Gemm"]
    conv = graph.nodes[0]
    assert conv.attrs["pads"] == [0, 1, 1, 1] and "auto_pad" not in conv.attrs   # SAME_UPPER, 8x9 at stride 2
    assert graph.shapes["flat"] == (2, 80) and graph.constants["target"].tolist() == [2, -1]
    x = np.random.default_rng(2).normal(size=(2, 3, 8, 9)).astype(np.float32)
    original = onnx.load(path)
    want = single_thread_session(original).run(None, {"x": x})[0]
    got = single_thread_session(graph.to_onnx()).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    every = graph.to_onnx(every_tensor_an_output=True)
    assert {output.name for output in every.graph.output} == {"bn1", "r1", "m1", "flat", "y"}   # BN folded


def test_a_graph_output_behind_an_identity_keeps_its_name(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Identity", ["r"], ["y"], name="id")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])])
    normalized = normalize(load_graph(_save(tmp_path, graph)))
    assert [(node.op, node.outputs) for node in normalized.nodes] == [("Relu", ("y",))]


def test_symbolic_dimensions_need_an_input_shape(tmp_path):
    assert load_graph(_save(tmp_path, _exporter_style_graph())).shapes["x"] == (1, 3, 8, 9)   # batch: 1
    path = _save(tmp_path, _exporter_style_graph(height="H"))
    with pytest.raises(InputError, match=r"model.onnx: input 'x' dimension 2 = 'H': a fixed size: give the shape "
                                         r"with --input-shape x=1x\.\.\."):
        load_graph(path)
    assert load_graph(path, parse_input_shapes(["x=1x3x8x9"])).shapes["flat"] == (1, 80)
    with pytest.raises(InputError, match="the model fixes this dimension to 9"):
        load_graph(path, parse_input_shapes(["x=1x3x8x8"]))
    with pytest.raises(InputError, match="rank 4, as the model declares"):
        load_graph(path, parse_input_shapes(["x=1x3x8"]))
    with pytest.raises(InputError, match=r"--input-shape = 'image': an input of the model \(x\)"):
        load_graph(path, {"image": (1, 3, 8, 9)})


def test_a_dimension_stored_as_minus_one_is_free(tmp_path):
    """Paddle2ONNX and others write a free dimension as dim_value -1: a batch of -1 is one image, another -1
    asks for --input-shape, which then sets it."""
    assert load_graph(_save(tmp_path, _exporter_style_graph(batch=-1))).shapes["x"] == (1, 3, 8, 9)
    path = _save(tmp_path, _exporter_style_graph(batch=-1, height=-1))
    with pytest.raises(InputError, match=r"input 'x' dimension 2 = -1: a fixed size: give the shape with"):
        load_graph(path)
    assert load_graph(path, parse_input_shapes(["x=2x3x8x9"])).shapes["flat"] == (2, 80)


def test_minus_one_in_value_info_and_outputs_is_left_to_inference(tmp_path):
    """Paddle2ONNX writes the free batch as -1 on every tensor it annotates: taken as a size, it contradicted
    the inferred 1 ("Inferred shape and existing shape differ in dimension 0: (1) vs (-1)")."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Identity", ["r"], ["y"], name="id")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, 8, 8])],
                              value_info=[helper.make_tensor_value_info("r", TensorProto.FLOAT, [-1, 3, 8, 8])])
    loaded = load_graph(_save(tmp_path, graph))
    assert loaded.shapes["r"] == loaded.shapes["y"] == (1, 3, 8, 8)


@pytest.mark.parametrize("spec", ["x", "x=", "x=1x0x3", "x=1xx3", "=1x3", "x=-1x3", "x=99999x99999x99999"])
def test_input_shape_specs_are_checked(spec):
    with pytest.raises(InputError, match="--input-shape"):
        parse_input_shapes([spec])


def test_every_unsupported_node_is_listed_in_one_error(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("TopK", ["r", "k"], ["values", "indices"], name="topk", axis=3),
        helper.make_node("Conv", ["values", "r"], ["c"], name="conv_of_activations"),
        helper.make_node("Pad", ["c", "pads"], ["p"], name="wrap", mode="wrap"),        # wrap: opset 19
        helper.make_node("Gelu", ["p"], ["y"], name="custom", domain="com.example"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])],
                              [_const("k", np.array([2], np.int64)),
                               _const("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1]))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    with pytest.raises(UnsupportedNodes) as caught:
        normalize(load_graph(path))
    assert str(caught.value).splitlines() == [
        f"{path}: 4 unsupported nodes of 4 operator types:",
        "  TopK, 1 node: 'topk' (inputs 1x2x4x4, 1): operator not supported",
        "  Conv, 1 node: 'conv_of_activations' (inputs 1x2x4x2, 1x2x4x4): input 1 ('r') must be a constant",
        "  Pad, 1 node: 'wrap' (inputs ?, 8): mode = 'wrap', supported: 'constant', 'reflect', 'edge'",
        "  Gelu in domain com.example, 1 node: 'custom' (inputs 1x1x3x1): operators outside the default ONNX domain are "
        "not supported"]


def test_many_unsupported_nodes_of_one_type_read_in_one_line_each(tmp_path):
    """A refusal stays short however many nodes share an unsupported operator (one was 12.6 KB on one line)."""
    nodes = [helper.make_node("Erf", [f"e{index}"], [f"e{index + 1}"], name=f"erf{index}") for index in range(40)]
    nodes.append(helper.make_node("TopK", ["e40", "k"], ["y", "indices"], name="topk", axis=3))
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["e0"], name="relu"), *nodes], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])],
                              [_const("k", np.array([2], np.int64))])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(UnsupportedNodes) as caught:
        normalize(load_graph(path))
    lines = str(caught.value).splitlines()
    assert lines[0] == f"{path}: 41 unsupported nodes of 2 operator types:" and len(lines) == 3
    assert lines[1] == ("  Erf, 40 nodes: 'erf0' (inputs 1x2x4x4): operator not supported; 'erf1' (inputs 1x2x4x4): "
                        "operator not supported; 'erf2' (inputs 1x2x4x4): operator not supported; and 37 more")


@pytest.mark.parametrize("node, reason", [
    (helper.make_node("Concat", ["x", "x"], ["y"], name="n", axis=0),
     "(Concat; inputs 1x4x2x4, 1x4x2x4): concatenating along the batch axis is not supported"),
    (helper.make_node("PRelu", ["x", "s"], ["y"], name="n"),     # ONNX broadcasts a [4] slope along the width
     "(PRelu; inputs 1x4x2x4, 4): slopes of shape [4]: one value, or one per channel ([C, 1, 1]) only"),
    (helper.make_node("AveragePool", ["x"], ["y"], name="n", kernel_shape=[1, 2], dilations=[1, 2]),
     "(AveragePool; inputs 1x4x2x4): dilations = [1, 2]: only 1 is supported"),
    (helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], name="n"),
     "(Resize; inputs 1x4x2x4, 4): a Resize of the batch axis (1 -> 3) is not supported"),
])
def test_forms_the_compiler_does_not_take_are_named(node, reason, tmp_path):
    """Forms of supported operators the quantizer would get wrong (a per-width PRelu slope read per channel,
    a dilated average pooling's dilations dropped) or the lowering cannot place (a concat across images, a
    Resize to more images)."""
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c", "d"])],
                              [_const("s", np.full(4, 0.5, np.float32)), _const("sizes", np.array([3, 4, 2, 4]))])
    with pytest.raises(UnsupportedNodes) as caught:
        normalize(load_graph(_save(tmp_path, graph, opset=19)))        # AveragePool dilations: opset 19
    operator, rest = reason[1:].split("; ", 1)
    assert str(caught.value).splitlines()[1] == f"  {operator}, 1 node: 'n' ({rest}", str(caught.value)


def test_hostile_files_get_one_line_errors(tmp_path):
    cases = {
        "empty.onnx": b"",
        "text.onnx": b"this is not a protobuf at all \xff\xfe",
        "truncated.onnx": MODEL_PATH.read_bytes()[:1000],
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(InputError) as caught:
            load_graph(path)
        assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)
    with pytest.raises(InputError, match="missing.onnx: open = 'No such file or directory'"):
        load_graph(tmp_path / "missing.onnx")
    os.mkfifo(tmp_path / "fifo.onnx")
    with pytest.raises(InputError, match="fifo.onnx: file type = 'a FIFO': a regular file"):
        load_graph(tmp_path / "fifo.onnx")


def test_old_opsets_and_external_weights_are_refused(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 2])])
    with pytest.raises(InputError, match=r"opset = 9: 11 \.\. "):
        load_graph(_save(tmp_path, graph, opset=9))
    model = onnx.load(MODEL_PATH)
    onnx.save(model, tmp_path / "external.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    with pytest.raises(InputError, match="'external data': weights stored in the model file"):
        load_graph(tmp_path / "external.onnx")


def test_a_graph_whose_shapes_disagree_is_refused(tmp_path):
    nodes = [helper.make_node("Add", ["x", "b"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])],
                              [_const("b", np.zeros((1, 5, 3, 3), np.float32))])
    with pytest.raises(InputError, match="model.onnx: (shape inference|model)"):
        normalize(load_graph(_save(tmp_path, graph)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, 10 ** 9), st.integers(1, 255)), min_size=1, max_size=8))
def test_corrupted_models_load_or_fail_cleanly(tmp_path, flips):
    """A real model with a few bytes changed: a Graph or an InputError, never another exception or a hang."""
    data = bytearray(MODEL_PATH.read_bytes())
    for position, value in flips:
        data[position % len(data)] ^= value
    path = tmp_path / "fuzzed.onnx"
    path.write_bytes(bytes(data))
    try:
        normalize(load_graph(path))
    except InputError as error:
        assert "\n" not in str(error)


def _small_model_bytes(raw: bytes, dims: list[int]) -> bytes:
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=dims, raw_data=raw)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 3, 3])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=300), dims=st.lists(st.integers(0, 2 ** 40), min_size=0, max_size=5))
def test_well_formed_models_with_random_weights_load_or_fail_cleanly(tmp_path, raw, dims):
    """A valid header around weights of random bytes and random dimensions (huge ones included): a Graph or
    an InputError, never another exception or an attempt to allocate the declared size."""
    path = tmp_path / "weights.onnx"
    path.write_bytes(_small_model_bytes(raw, dims))
    try:
        normalize(load_graph(path))
    except InputError as error:
        assert "\n" not in str(error)


def test_a_well_formed_model_with_matching_weights_loads(tmp_path):
    path = tmp_path / "weights.onnx"
    path.write_bytes(_small_model_bytes(np.ones((3, 2, 3, 3), np.float32).tobytes(), [3, 2, 3, 3]))
    assert normalize(load_graph(path)).shapes["y"] == (1, 3, 3, 3)


def test_a_zero_pad_before_a_conv_becomes_its_padding(tmp_path):
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], name="pad"),
             helper.make_node("Conv", ["p", "w"], ["y"], name="conv", pads=[0, 1, 0, 0])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 5, 5])],
                              [_const("pads", np.array([0, 0, 1, 0, 0, 0, 1, 1])),
                               _const("w", rng.normal(size=(3, 2, 3, 3)).astype(np.float32))])
    path = _save(tmp_path, graph)
    normalized = normalize(load_graph(path))
    assert [(node.op, node.attrs.get("pads")) for node in normalized.nodes] == [("Conv", [1, 1, 1, 1])]
    x = rng.normal(size=(1, 2, 5, 5)).astype(np.float32)
    want = single_thread_session(onnx.load(path)).run(None, {"x": x})[0]
    np.testing.assert_allclose(single_thread_session(normalized.to_onnx()).run(None, {"x": x})[0], want, rtol=1e-5,
                               atol=1e-5)
    nodes[1] = helper.make_node("Relu", ["p"], ["y"], name="relu")       # a Pad no convolution absorbs stays
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 7, 6])],
                              [_const("pads", np.array([0, 0, 1, 0, 0, 0, 1, 1]))])
    kept = normalize(load_graph(_save(tmp_path, graph, name="relu.onnx")))
    assert [node.op for node in kept.nodes] == ["Pad", "Relu"]
