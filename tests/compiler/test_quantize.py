"""The quantizer (compiler/quantize.py) and the quantized IR (compiler/qir.py) against the float models."""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest

from aipu.app.models.train_digits import MODEL_PATH
from aipu.app.ort_compare import single_thread_session
from aipu.compiler.calibrate import collect
from aipu.compiler.graph import load_graph
from aipu.compiler.normalize import normalize
from aipu.compiler.qir import QConv, QEltwise, QLut, QPool
from aipu.compiler.quantize import QuantOptions, quantize_graph, sqnr_db
from aipu.sim.machine.errors import InputError
from tests.compiler.onnx_models import mobilenet_like, resnet_like


def _compile(tmp_path, model: onnx.ModelProto, samples: np.ndarray, options=QuantOptions(), histograms=False):
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    graph = normalize(load_graph(path))
    stats = collect(graph, {graph.inputs[0]: samples}, histograms=histograms)
    return graph, quantize_graph(graph, stats, options)


def _float_outputs(graph, images: np.ndarray) -> np.ndarray:
    session = single_thread_session(graph.to_onnx())
    return np.concatenate([session.run(None, {graph.inputs[0]: image[None]})[0] for image in images])


def float_node_alone(graph, qmodel, values: dict, op_type: str) -> np.ndarray:
    """onnxruntime's float result of the graph's first ``op_type`` node alone, fed the dequantized int8 value
    its input has in ``values`` (a QModel.run with keep): one operator's quantization error, by itself."""
    model = graph.to_onnx()
    index = next(i for i, node in enumerate(model.graph.node) if node.op_type == op_type)
    x, y = model.graph.node[index].input[0], model.graph.node[index].output[0]
    del model.graph.node[:index]
    del model.graph.node[1:]
    model.graph.output[0].name = y
    model.graph.output[0].type.tensor_type.ClearField("shape")
    model.graph.input[0].name = x
    del model.graph.input[0].type.tensor_type.shape.dim[:]
    for extent in qmodel.tensors[x].shape:
        model.graph.input[0].type.tensor_type.shape.dim.add().dim_value = extent
    return single_thread_session(model).run(None, {x: qmodel.tensors[x].dequantize(values[x]).astype(np.float32)})[0]


def _quantized_outputs(qmodel, images: np.ndarray) -> np.ndarray:
    name = qmodel.inputs[0]
    return np.concatenate([qmodel.run_float({name: image[None]})[qmodel.outputs[0]] for image in images])


@pytest.mark.parametrize("method", ["extrema", "percentile"])
def test_digits_model_int8_top1_within_one_point_of_float(tmp_path, digits_data, method):
    model = onnx.load(MODEL_PATH)
    images, labels = digits_data["eval_images"], digits_data["eval_labels"]
    graph, qmodel = _compile(tmp_path, model, digits_data["calibration_images"], QuantOptions(method=method),
                             histograms=method == "percentile")
    assert [type(op).__name__ for op in qmodel.ops].count("QConv") == 4       # three convs (ReLU fused) + FC
    float_top1 = np.mean(np.argmax(_float_outputs(graph, images), axis=1) == labels)
    int8_top1 = np.mean(np.argmax(_quantized_outputs(qmodel, images), axis=1) == labels)
    assert float_top1 > 0.9 and int8_top1 >= float_top1 - 0.01


@pytest.mark.parametrize("method", ["kld", "percentile", "nstd", "mean"])
def test_no_method_clips_the_networks_outputs(tmp_path, digits_data, method):
    """A clipped intermediate is a trade the method makes; a clipped output is a wrong answer (kld clipped 98 %
    of a classifier's logits): outputs keep the extrema of the calibration set under every method."""
    images = digits_data["calibration_images"]
    graph, qmodel = _compile(tmp_path, onnx.load(MODEL_PATH), images, QuantOptions(method=method),
                             histograms=method in ("kld", "percentile"))
    output = qmodel.tensors[qmodel.outputs[0]]
    low, high = output.dequantize(np.array([np.iinfo(output.dtype).min, np.iinfo(output.dtype).max]))
    logits = _float_outputs(graph, images)
    assert low - output.scale / 2 <= logits.min() and logits.max() <= high + output.scale / 2


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("build", [mobilenet_like, resnet_like])
def test_mobilenet_and_resnet_like_graphs_quantize_close_to_float(tmp_path, build, symmetric):
    rng = np.random.default_rng(3)
    calibration, evaluation = rng.normal(0, 1, (24, 3, 16, 16)), rng.normal(0, 1, (8, 3, 16, 16))
    graph, qmodel = _compile(tmp_path, build(), calibration.astype(np.float32),
                             QuantOptions(symmetric_activations=symmetric))
    kinds = {type(op) for op in qmodel.ops}
    assert {QConv, QEltwise, QPool} <= kinds
    if build is mobilenet_like:
        assert QLut in kinds                                             # HardSwish, HardSigmoid, Sigmoid
        assert any(op.groups > 1 for op in qmodel.ops if isinstance(op, QConv))
    else:
        assert QLut not in kinds                                         # every ReLU fused (conv or add)
    if symmetric:
        assert {spec.zero_point for spec in qmodel.tensors.values()} == {0}
    want = _float_outputs(graph, evaluation.astype(np.float32))
    got = _quantized_outputs(qmodel, evaluation.astype(np.float32))
    assert sqnr_db(want, got) > 20


def test_fused_activations_clamp_on_the_output_grid(tmp_path, digits_data):
    graph, qmodel = _compile(tmp_path, onnx.load(MODEL_PATH), digits_data["calibration_images"])
    convs = [op for op in qmodel.ops if isinstance(op, QConv)]
    for conv in convs[:-1]:                  # ReLU fused: the clamp starts at the output zero point
        assert conv.requant.qmin == qmodel.tensors[conv.y].zero_point
    assert convs[-1].requant.qmin == -128     # logits: no activation


def test_layers_the_requantizer_cannot_take_are_named(tmp_path):
    from aipu.app.models.synthetic import GraphBuilder

    b = GraphBuilder(0, 2, 4)
    slopes = b.const(np.array([0.1, -0.2, 0.3], np.float32).reshape(3, 1, 1))
    y = b.node("PRelu", [b.conv("image", 2, 3, bn=False), slopes])
    with pytest.raises(InputError, match=r"node 'prelu\d+' \(PRelu\): slope = -0.2"):
        _compile(tmp_path, b.model(y), np.ones((2, 2, 4, 4), np.float32))


def test_a_prelu_of_one_slope_is_a_table(tmp_path):
    """A PRelu whose one slope follows no conv (so nothing fuses it): an 8-bit table of its function."""
    from aipu.app.models.synthetic import GraphBuilder

    b = GraphBuilder(0, 2, 4)
    y = b.node("PRelu", ["image", b.const(np.full((1, 1, 1), 0.25, np.float32))])
    samples = np.random.default_rng(0).normal(size=(4, 2, 4, 4)).astype(np.float32)
    graph, qmodel = _compile(tmp_path, b.model(y), samples)
    assert [type(op) for op in qmodel.ops] == [QLut]
    assert sqnr_db(_float_outputs(graph, samples), _quantized_outputs(qmodel, samples)) > 30


def test_a_bias_far_beyond_int32_raises_the_weight_scale_without_a_warning(tmp_path):
    """A BatchNormalization whose mean is near float32's largest: its bias in int32 units at the weight's own
    scale overflows int64 too. The weight scales are raised until the bias fits and the requantizer keeps its
    precision at the huge output scale (a note says so), with no numpy warning of an invalid cast, and the
    channel computes x - 3e38 within a step."""
    from aipu.app.models.synthetic import GraphBuilder

    b = GraphBuilder(0, 2, 4)
    parameters = [b.const(np.array(value, np.float32)) for value in ([1, 1], [0, 0], [3e38, 0], [1, 1])]
    images = np.random.default_rng(0).normal(0, 1, (2, 2, 4, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        graph, qmodel = _compile(tmp_path, b.model(b.node("BatchNormalization", ["image", *parameters])), images)
        got = _quantized_outputs(qmodel, images)
    assert len(qmodel.notes) == 1 and "output channels 0, 1 (2 of 2) was raised" in qmodel.notes[0]
    step = qmodel.tensors[qmodel.outputs[0]].scale
    assert np.abs(got[:, 0] + 3e38).max() <= step


def test_a_fused_clip_bound_far_beyond_the_range_clamps_at_the_type(tmp_path):
    """Clip(-1e30, 1e30) after a conv: its bounds in output steps overflow int64, so they are bounded before
    rounding (no numpy warning) and the clamp is the output type's."""
    from aipu.app.models.synthetic import GraphBuilder

    b = GraphBuilder(0, 2, 4)
    bounds = [b.const(np.array(value, np.float32)) for value in (-1e30, 1e30)]
    y = b.node("Clip", [b.conv("image", 2, 3, bn=False), *bounds])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _, qmodel = _compile(tmp_path, b.model(y), np.ones((2, 2, 4, 4), np.float32))
    (conv,) = qmodel.ops
    assert (conv.requant.qmin, conv.requant.qmax) == (-128, 127)


def test_a_ceil_mode_window_starting_in_the_padding_is_named(tmp_path):
    """ceil_mode's last window lies wholly in the end padding: the pooling unit pads less than a window."""
    from aipu.app.models.synthetic import GraphBuilder

    b = GraphBuilder(0, 1, 2)
    y = b.node("MaxPool", ["image"], kernel_shape=[3, 3], pads=[1, 1, 2, 2], strides=[3, 3], ceil_mode=1)
    with pytest.raises(InputError, match=r"\(MaxPool\): ceil_mode = 1: 0 where the last window starts in the end "
                                         r"padding \(it needs end padding \(3, 3\) for windows of \[3, 3\]"):
        _compile(tmp_path, b.model(y), np.ones((2, 1, 2, 2), np.float32))


def test_layer_report_measures_every_operator_against_float(tmp_path):
    from aipu.compiler.driver import layer_report

    rng = np.random.default_rng(8)
    samples = rng.normal(0, 1, (6, 3, 16, 16)).astype(np.float32)
    graph, qmodel = _compile(tmp_path, mobilenet_like(), samples, QuantOptions(method="percentile", percentile=99.0),
                             histograms=True)
    rows = layer_report(graph, qmodel, {graph.inputs[0]: samples})
    assert [row["name"] for row in rows] == [op.name for op in qmodel.ops]
    assert all(row["sqnr_db"] > 10 for row in rows)
    assert any(row["clipped_fraction"] > 0 for row in rows)            # a 99th percentile clips something
    tables = [row for row in rows if row["kind"] == "lut"]
    assert tables and all(-128 <= row["table_input_range"][0] <= row["table_input_range"][1] <= 255 for row in tables)


@pytest.mark.parametrize("per_channel", [True, False])
def test_a_dead_channel_keeps_its_bias_and_is_named(tmp_path, per_channel):
    """An output channel whose weights are ~1e-34 (dead after training) with a bias of 0.369: its per-channel
    scale was ~1e-36 and the bias overflowed int32. The scale is raised, the channel's output is its bias, the
    others are unchanged, and the model's notes name the channel (per-tensor weights need no change)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    weights = rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
    weights[2] = 1e-34
    bias = np.array([0.1, -0.2, 0.369, 0.05], np.float32)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], "dead",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b")])
    images = rng.normal(0, 1, (8, 3, 8, 8)).astype(np.float32)
    graph, qmodel = _compile(tmp_path, helper.make_model(graph), images,
                             QuantOptions(per_channel_weights=per_channel))
    if per_channel:
        assert len(qmodel.notes) == 1 and "weight scale of output channel 2 (1 of 4) was raised" in qmodel.notes[0]
    else:                                 # one scale for the layer: the live channels' is large enough
        assert not qmodel.notes
    want, got = _float_outputs(graph, images), _quantized_outputs(qmodel, images)
    step = qmodel.tensors[qmodel.outputs[0]].scale
    assert np.abs(got[:, 2] - 0.369).max() <= step
    assert sqnr_db(want, got) > 30
