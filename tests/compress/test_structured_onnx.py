"""Structured matrices applied to ONNX models: the factor layers compute what the dense reconstruction does, the
block-circulant weights are the records' expansion, and wrong layers are refused in one line."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH
from aipu.compress import circulant
from aipu.compress.structured_onnx import (circulant_layers, low_rank_layers, structured_layer_report,
                                           weight_layers, with_circulant, with_low_rank)
from aipu.sim.machine.errors import InputError


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def with_dense(model: onnx.ModelProto, chosen) -> onnx.ModelProto:
    """``model`` with each chosen layer's weight replaced by its dense reconstruction, in place of its factors."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    initializers = {tensor.name: tensor for tensor in result.graph.initializer}
    for entry in chosen:
        node = entry.layer.node
        dense = entry.dense()
        transposed = node.op_type == "Gemm" and not any(a.name == "transB" and a.i for a in node.attribute)
        stored = (dense.T if transposed else dense).astype(np.float32)
        initializers[node.input[1]].CopyFrom(numpy_helper.from_array(stored, node.input[1]))
    return result


def small_model() -> onnx.ModelProto:
    """A padded, strided 1×1 Conv, a 3×3 Conv and a Gemm with its weight (inputs, outputs): the cases the
    digits model lacks."""
    rng = np.random.default_rng(4)
    weights = {"a": rng.normal(size=(8, 4, 1, 1)), "b": rng.normal(size=(8, 8, 3, 3)), "bias": rng.normal(size=8),
               "g": rng.normal(size=(8, 6)), "gbias": rng.normal(size=6)}
    nodes = [helper.make_node("Conv", ["x", "a"], ["y1"], name="a", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["y1"], ["y2"], name="relu"),
             helper.make_node("Conv", ["y2", "b", "bias"], ["y3"], name="b", pads=[1, 1, 1, 1], dilations=[1, 1]),
             helper.make_node("GlobalAveragePool", ["y3"], ["y4"], name="pool"),
             helper.make_node("Flatten", ["y4"], ["y5"], name="flatten"),
             helper.make_node("Gemm", ["y5", "g", "gbias"], ["out"], name="g", beta=0.5)]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 9, 9])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 6])],
                              [numpy_helper.from_array(value.astype(np.float32), name) for name, value in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("groups", [1, 2])
def test_the_factor_layers_compute_the_dense_reconstruction(groups):
    model = onnx.load(MODEL_PATH)
    images = np.load(DATA_PATH)["eval_images"][:32]
    chosen = low_rank_layers(model, 0.5, groups)
    factored = with_low_rank(model, chosen)
    onnx.checker.check_model(factored)
    assert len(factored.graph.node) > len(model.graph.node)
    assert np.allclose(run(factored, images), run(with_dense(model, chosen), images), atol=1e-4)
    rows = structured_layer_report(chosen)
    assert all(row["weights_after"] < row["weights_before"] and 0 < row["relative_error"] < 1 for row in rows)


def test_padded_strided_1x1_convs_and_transposed_gemms_keep_their_geometry():
    model = small_model()
    x = np.random.default_rng(5).normal(size=(2, 4, 9, 9)).astype(np.float32)
    chosen = low_rank_layers(model, 0.6)
    assert {entry.layer.name for entry in chosen} == {"a", "b", "g"}
    assert np.allclose(run(with_low_rank(model, chosen), x), run(with_dense(model, chosen), x), atol=1e-4)


def test_a_layer_whose_factors_are_not_smaller_is_left_as_it_is():
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], name="tiny", transB=1)], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
                              [numpy_helper.from_array(np.eye(2, dtype=np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    assert low_rank_layers(model, 0.5) == []          # a 2 × 2 matrix: rank 1 factors hold 4 weights too
    assert with_low_rank(model, []).graph == model.graph


def test_block_circulant_weights_are_their_records_expansion():
    model = onnx.load(MODEL_PATH)
    signs, chosen = circulant_layers(model, 4, np.random.default_rng(0))
    assert [entry.layer.name for entry in chosen] == ["conv2", "conv3", "fc"][:len(chosen)]
    assert len(signs.base_sign_vector_network) == max(signs.len_list)
    rebuilt = {tensor.name: numpy_helper.to_array(tensor) for tensor in with_circulant(model, chosen).graph.initializer}
    for entry in chosen:
        weight = rebuilt[entry.layer.node.input[1]].astype(np.float64)
        unsigned = circulant.signed_weight(weight, entry.sign_vector)          # ±1 signs undo themselves
        assert np.allclose(circulant.compress_weight_to_w_circ(unsigned, 4), entry.w_circ, atol=1e-6)
        assert np.allclose(circulant.decompress_w_circ_to_weight(entry.w_circ, 4), unsigned, atol=1e-6)
        assert entry.w_circ.size * 4 == entry.layer.matrix.size


def test_wrong_layers_are_refused_in_one_line():
    model = onnx.load(MODEL_PATH)
    with pytest.raises(InputError, match="layer = 'relu1': a one-group Conv") as error:
        weight_layers(model, ["conv2", "relu1"])
    assert "\n" not in str(error.value)
    with pytest.raises(InputError, match="circ_size = 7"):
        circulant_layers(model, 7, np.random.default_rng(0))
