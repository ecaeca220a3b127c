"""Filter pruning of ONNX models (docs/pruning.md, "The ONNX pass"): masks of all ones change nothing, bit
for bit; a pruned model computes what the original computes with the removed channels cut at their readers;
structures the pass cannot keep aligned are refused by node."""
import numpy as np
import onnx
import onnxruntime
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH
from aipu.compress import filter_masks, prunable_convs, prune_filters
from aipu.sim.machine.errors import InputError

RNG = np.random.default_rng(7)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def _model(nodes, weights: dict, out_shape, in_shape=(2, 3, 8, 8)) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in weights.items()]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _w(*shape):
    return RNG.normal(0, 0.5, shape)


def _branchy() -> onnx.ModelProto:
    """conv a (pruned) -> BN -> Relu -> MaxPool -> depthwise conv -> Clip -> Mul by a per-channel constant;
    conv b beside it; Concat [a-branch, b] -> conv c -> GAP -> Flatten -> Gemm."""
    nodes = [helper.make_node("Conv", ["x", "wa", "ba"], ["a"], name="a", pads=[1] * 4, kernel_shape=[3, 3]),
             helper.make_node("BatchNormalization", ["a", "s", "o", "m", "v"], ["an"], name="bn"),
             helper.make_node("Relu", ["an"], ["ar"], name="relu"),
             helper.make_node("MaxPool", ["ar"], ["ap"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["ap", "wd", "bd"], ["ad"], name="dw", group=6, kernel_shape=[3, 3],
                              pads=[1] * 4),
             helper.make_node("Clip", ["ad", "lo", "hi"], ["ac"], name="clip"),
             helper.make_node("Mul", ["ac", "scale"], ["am"], name="mul"),
             helper.make_node("Conv", ["x", "wb"], ["b"], name="b", strides=[2, 2]),
             helper.make_node("Concat", ["am", "b"], ["cat"], name="cat", axis=1),
             helper.make_node("Conv", ["cat", "wc", "bc"], ["c"], name="c", kernel_shape=[1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1)]
    weights = {"wa": _w(6, 3, 3, 3), "ba": _w(6), "s": 1 + _w(6) ** 2, "o": _w(6), "m": _w(6), "v": 1 + _w(6) ** 2,
               "wd": _w(12, 1, 3, 3), "bd": _w(12), "lo": np.array(-1.0), "hi": np.array(1.0),
               "scale": _w(1, 12, 1, 1), "wb": _w(4, 3, 1, 1), "wc": _w(5, 16, 1, 1), "bc": _w(5),
               "wf": _w(7, 5), "bf": _w(7)}
    return _model(nodes, weights, (2, 7))


def _initializer(model, name):
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))


def _with(model, **arrays):
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    for tensor in changed.graph.initializer:
        if tensor.name in arrays:
            tensor.CopyFrom(numpy_helper.from_array(arrays[tensor.name].astype(np.float32), tensor.name))
    return changed


def test_masks_of_all_ones_give_the_same_model_byte_for_byte():
    model = _branchy()
    pruned = prune_filters(model, {"a": np.ones(6), "c": np.ones(5)})
    assert pruned.model.SerializeToString() == model.SerializeToString()


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=6, max_size=6).filter(any))
def test_a_pruned_branchy_model_equals_the_original_with_the_channels_cut_at_their_readers(mask):
    """Filter j of conv a reaches conv c through BN, pooling, the depthwise conv (its two outputs per channel),
    Clip, a per-channel Mul and Concat at offset 0: the reference zeroes c's weights of those channels.
    Float sums over fewer terms may round differently: within 1e-5 relative."""
    model, mask = _branchy(), np.array(mask)
    pruned = prune_filters(model, {"a": mask})
    onnx.checker.check_model(pruned.model)
    wc = _initializer(model, "wc").copy()
    wc[:, :12][:, np.repeat(mask, 2) == 0] = 0
    x = RNG.normal(0, 1, (2, 3, 8, 8)).astype(np.float32)
    expected = _run(_with(model, wc=wc), x)
    assert np.allclose(_run(pruned.model, x), expected, rtol=1e-5, atol=1e-5)
    dw = next(node for node in pruned.model.graph.node if node.name == "dw")
    assert helper.get_attribute_value(dw.attribute[0]) == mask.sum()
    assert _initializer(pruned.model, "wc").shape == (5, 2 * mask.sum() + 4, 1, 1)
    assert pruned.changes[0].filters == (mask.sum(), 6)


def test_the_demo_model_pruned_equals_it_with_the_filters_and_biases_zeroed():
    """conv -> Relu -> conv: a zero filter with a zero bias gives zeros after Relu, so the pruned model is the
    original with those filters zeroed (within float re-association), and the last conv feeds the Gemm."""
    model = onnx.load(MODEL_PATH)
    masks = filter_masks(model, 0.5, criterion="l2")
    pruned = prune_filters(model, masks)
    zeroed = {}
    for name, mask in masks.items():
        for suffix in ("weight", "bias"):
            array = _initializer(model, f"{name}.{suffix}").copy()
            array[mask == 0] = 0
            zeroed[f"{name}.{suffix}"] = array
    images = np.load(DATA_PATH)["eval_images"][:32]
    assert np.allclose(_run(pruned.model, images), _run(_with(model, **zeroed), images), rtol=1e-5, atol=1e-5)
    assert [change.node for change in pruned.changes] == ["conv1", "conv2", "conv3", "fc"]
    assert pruned.weights_after < pruned.weights_before / 3


def test_two_branches_pruned_alike_may_meet_in_an_add():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["p"], name="p"), helper.make_node("Conv", ["x", "w2"], ["q"], name="q"),
             helper.make_node("Add", ["p", "q"], ["s"], name="add"),
             helper.make_node("Conv", ["s", "w3"], ["y"], name="r")]
    model = _model(nodes, {"w1": _w(4, 3, 1, 1), "w2": _w(4, 3, 1, 1), "w3": _w(2, 4, 1, 1)}, (2, 2, 8, 8))
    pruned = prune_filters(model, {"p": [1, 0, 1, 1], "q": [1, 0, 1, 1]})
    w3 = _initializer(model, "w3").copy()
    w3[:, 1] = 0
    x = RNG.normal(0, 1, (2, 3, 8, 8)).astype(np.float32)
    assert np.allclose(_run(pruned.model, x), _run(_with(model, w3=w3), x), rtol=1e-5, atol=1e-5)
    with pytest.raises(InputError, match="node 'add' \\(Add\\).*pruned differently"):
        prune_filters(model, {"p": [1, 0, 1, 1], "q": [1, 1, 0, 1]})
    with pytest.raises(InputError, match="node 'add' \\(Add\\).*prune its producer alike"):
        prune_filters(model, {"p": [1, 0, 1, 1]})
    assert prunable_convs(model) == []


def test_a_shared_initializer_is_copied_for_the_node_that_changes():
    def nodes(q_weight):
        return [helper.make_node("Conv", ["x", "w"], ["p"], name="p"),
                helper.make_node("Conv", ["p", q_weight], ["q"], name="q"),
                helper.make_node("Conv", ["x", "w"], ["o"], name="o"), helper.make_node("Conv", ["o", "v"], ["r"], name="r"),
                helper.make_node("Add", ["q", "r"], ["y"], name="add")]

    w, v = _w(3, 3, 1, 1), _w(3, 3, 1, 1)
    model = _model(nodes("v"), {"w": w, "v": v}, (2, 3, 8, 8))
    pruned = prune_filters(model, {"p": [1, 0, 1]})
    cut = v.copy()
    cut[:, 1] = 0
    reference = _model(nodes("vq"), {"w": w, "v": v, "vq": cut}, (2, 3, 8, 8))
    x = RNG.normal(0, 1, (2, 3, 8, 8)).astype(np.float32)
    assert np.allclose(_run(pruned.model, x), _run(reference, x), rtol=1e-5, atol=1e-5)
    assert _initializer(pruned.model, "w").shape == (3, 3, 1, 1) and _initializer(pruned.model, "v").shape == (3, 3, 1, 1)
    assert len(pruned.model.graph.initializer) == 4


@pytest.mark.parametrize("nodes, weights, masks, message", [
    ([helper.make_node("Conv", ["x", "w"], ["y"], name="p")], {"w": _w(4, 3, 1, 1)}, {"p": [1, 0, 1, 1]},
     "graph output 'y'"),
    ([helper.make_node("Conv", ["x", "w"], ["p"], name="p"), helper.make_node("Reshape", ["p", "shape"], ["y"], name="re")],
     {"w": _w(4, 3, 1, 1), "shape": np.array([2, -1])}, {"p": [1, 0, 1, 1]}, "node 're' \\(Reshape\\)"),
    ([helper.make_node("Conv", ["x", "w"], ["p"], name="p"), helper.make_node("Conv", ["p", "v"], ["y"], name="g", group=2)],
     {"w": _w(4, 3, 1, 1), "v": _w(2, 2, 1, 1)}, {"p": [1, 0, 1, 1]}, "node 'g' \\(Conv\\).*group 2"),
    ([helper.make_node("Conv", ["x", "w"], ["y"], name="p")], {"w": _w(4, 3, 1, 1)}, {"q": [1]}, "layer = 'q'"),
    ([helper.make_node("Conv", ["x", "w"], ["y"], name="p")], {"w": _w(4, 3, 1, 1)}, {"p": [0, 0, 0, 0]},
     "mask of 'p'"),
    ([helper.make_node("Conv", ["x", "w"], ["y"], name="p")], {"w": _w(4, 3, 1, 1)}, {"p": [1, 0, 1]}, "mask of 'p'"),
])
def test_what_the_pass_cannot_keep_aligned_is_refused_by_node(nodes, weights, masks, message):
    out_shape = {"Reshape": (2, 256), "Conv": (2, 4 if nodes[-1].name == "p" else 2, 8, 8)}[nodes[-1].op_type]
    model = _model(nodes, weights, out_shape)
    with pytest.raises(InputError, match=message):
        prune_filters(model, masks)
