"""ConvTranspose: its conv form in the quantized IR (qir.QConv ``upsample``) against ONNX's definition, its
lowering by phases (compiler/lowering/conv.py) against the IR on the interpreter, and the float model."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from aipu.app.models.synthetic import GraphBuilder
from aipu.app.ort_compare import single_thread_session
from aipu.compiler.graph import Node, load_graph
from aipu.compiler.lowering.conv import axis_phases
from aipu.compiler.normalize import normalize
from aipu.compiler.qir import upsampled
from aipu.compiler.normalize import conv_form
from aipu.compiler.quantize import sqnr_db
from aipu.sim import golden
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.errors import InputError
from tests.compiler.onnx_node_cases import onnx_node_cases
from tests.compiler.test_lowering import TINY, _check_every_tensor
from tests.compiler.test_quantize import _compile


def _onnx_conv_transpose(x: np.ndarray, w: np.ndarray, **attrs) -> np.ndarray:
    """onnxruntime's ConvTranspose in float32: exact on these integers (every sum below 2^24)."""
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w.astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return single_thread_session(model).run(None, {"x": x.astype(np.float32)})[0].astype(np.int64)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_conv_form_equals_onnx_conv_transpose(data):
    """upsampled() + golden.conv2d with conv_form()'s weights and padding is ONNX's ConvTranspose on x - zp."""
    draw = data.draw
    groups = draw(st.sampled_from([1, 2]))
    c, k = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kh, kw, sh, sw, dh, dw = (draw(st.integers(1, 3)) for _ in range(6))
    h, w = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    pads = [draw(st.integers(0, 3)) for _ in range(4)]
    extra = [draw(st.integers(0, s - 1)) for s in (sh, sw)]
    out_h = sh * (h - 1) + extra[0] + dh * (kh - 1) + 1 - pads[0] - pads[2]
    out_w = sw * (w - 1) + extra[1] + dw * (kw - 1) + 1 - pads[1] - pads[3]
    if out_h < 1 or out_w < 1:
        return
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    zp = int(rng.integers(-5, 5))
    x = rng.integers(-128, 128, (1, c, h, w)).astype(np.int8)
    weights = rng.integers(-127, 128, (c, k // groups, kh, kw)).astype(np.float64)
    attrs = dict(strides=[sh, sw], pads=pads, output_padding=extra, dilations=[dh, dw], group=groups)
    node = Node("t", "ConvTranspose", ("x", "w"), ("y",), attrs)
    conv_weights, _, geometry = conv_form(node, {"w": weights})
    z, padding = upsampled(x, geometry["upsample"], geometry["padding"], zp)
    got = golden.conv2d(z, conv_weights.astype(np.int8), x_zero_point=zp, padding=padding,
                        dilation=geometry["dilation"], groups=groups)
    want = _onnx_conv_transpose(x.astype(np.float64) - zp, weights, **attrs)
    np.testing.assert_array_equal(got, want)


@given(size=st.integers(1, 6), factor=st.integers(1, 4), kernel=st.integers(1, 5), dilation=st.integers(1, 3),
       pads=st.tuples(st.integers(-4, 4), st.integers(-4, 4)))
def test_phases_cover_every_output_once(size, factor, kernel, dilation, pads):
    """The phases' outputs partition the result; each phase's window and padding give exactly its count."""
    phases = axis_phases(size, factor, *pads, kernel, dilation)
    out = factor * (size - 1) + 1 + sum(pads) - dilation * (kernel - 1)
    covered = sorted(o for p in phases for o in range(p.first, p.first + factor * p.count, factor))
    assert covered == list(range(max(out, 0)))
    for p in phases:
        span = p.dilation * (len(p.taps) - 1) + 1
        if p.length >= 1:
            assert p.length + p.pad_begin + p.pad_end - span + 1 == p.count
            assert max(p.pad_begin, p.pad_end) <= span - 1      # no output reads padding only


CASES = {
    "k4_s2_p1": dict(kernel=4, stride=2),
    "k3_s2_p1_out1": dict(kernel=3, stride=2, output_padding=(1, 1)),
    "k2_s2": dict(kernel=2, stride=2, pads=(0, 0, 0, 0)),
    "k3_s2_dil2": dict(kernel=3, stride=2, dilation=2, pads=(2, 2, 1, 1)),
    "k1_s2_bias_only_phase": dict(kernel=1, stride=2, pads=(0, 0, 0, 0), output_padding=(1, 1)),
    "k3_s3_uneven_pads": dict(kernel=3, stride=3, pads=(0, 1, 2, 0)),
    "k2_s2_cropping_pads": dict(kernel=2, stride=2, pads=(1, 1, 1, 1)),
}


@pytest.mark.parametrize("groups", [1, 4], ids=["dense", "depthwise"])
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_conv_transpose_lowers_by_phases_bit_exact(tmp_path, case, groups):
    b = GraphBuilder(3, 3, 5)
    x = b.node("Relu", [b.conv("image", 3, 4)])
    y = b.node("Relu", [b.conv_transpose(x, 4, 8 if groups == 1 else 4, groups=groups, **case)])
    samples = np.random.default_rng(1).normal(0, 1, (8, 3, 5, 5)).astype(np.float32)
    graph, qmodel = _compile(tmp_path, b.model(y), samples)
    transposed = next(op for op in qmodel.ops if op.upsample != (1, 1))
    assert transposed.requant.qmin == qmodel.tensors[transposed.y].zero_point      # the ReLU fused
    image = samples[:1]            # inside the calibrated ranges: the SQNR measures rounding, not clipping
    for config in (DEFAULT, TINY):
        network, _ = _check_every_tensor(qmodel, config, image, seed=2)
    want = single_thread_session(graph.to_onnx()).run(None, {"image": image})[0]
    assert sqnr_db(want, qmodel.run_float({"image": image})[y]) > 25


def test_batch_norm_after_conv_transpose_folds(tmp_path):
    b = GraphBuilder(4, 2, 4)
    y = b.conv_transpose("image", 2, 6, groups=2)
    stats = [b.rng.uniform(0.5, 1.5, 6), b.rng.normal(0, 0.1, 6), b.rng.normal(0, 0.1, 6), b.rng.uniform(0.5, 1.5, 6)]
    y = b.node("BatchNormalization", [y, *(b.const(v.astype(np.float32)) for v in stats)])
    samples = np.random.default_rng(0).normal(0, 1, (8, 2, 4, 4)).astype(np.float32)
    graph, qmodel = _compile(tmp_path, b.model(y), samples)
    assert [node.op for node in graph.nodes] == ["ConvTranspose"] and len(qmodel.ops) == 1
    image = samples[:1]
    want = single_thread_session(b.model(y)).run(None, {"image": image})[0]
    assert sqnr_db(want, qmodel.run_float({"image": image})[y]) > 25


IMPLICIT_PADS = {
    "same_upper": dict(strides=[2, 2], auto_pad="SAME_UPPER"),
    "same_lower": dict(strides=[2, 2], auto_pad="SAME_LOWER"),
    "same_lower_dilated_stride3": dict(strides=[3, 3], dilations=[2, 1], auto_pad="SAME_LOWER"),
    "valid_output_padding": dict(strides=[2, 3], auto_pad="VALID", output_padding=[1, 2]),
    "output_shape": dict(strides=[2, 2], output_shape=[8, 7]),
    "output_shape_same_upper": dict(strides=[2, 2], output_shape=[8, 7], auto_pad="SAME_UPPER"),
    "output_shape_one_beyond": dict(strides=[2, 2], output_shape=[12, 11]),      # the extra row is output padding
}


def _conv_transpose_model(**attrs):
    b = GraphBuilder(5, 2, 5)
    w = b.const(np.random.default_rng(1).normal(0, 0.3, (2, 3, 3, 2)).astype(np.float32))
    return b.model(b.node("ConvTranspose", ["image", w], **attrs))


@pytest.mark.parametrize("attrs", IMPLICIT_PADS.values(), ids=IMPLICIT_PADS.keys())
def test_output_shape_and_auto_pad_become_the_pads_onnxruntime_uses(tmp_path, attrs):
    """The normalized graph holds explicit pads only, and onnxruntime gives it the original model's output."""
    model = _conv_transpose_model(**attrs)
    samples = np.random.default_rng(2).normal(0, 1, (4, 2, 5, 5)).astype(np.float32)
    graph, qmodel = _compile(tmp_path, model, samples)
    (node,) = graph.nodes
    assert "pads" in node.attrs and not {"auto_pad", "output_shape"} & set(node.attrs)
    want = single_thread_session(model).run(None, {"image": samples[:1]})[0]
    got = single_thread_session(graph.to_onnx()).run(None, {graph.inputs[0]: samples[:1]})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    if attrs is IMPLICIT_PADS["output_shape"]:
        _check_every_tensor(qmodel, TINY, samples[:1], seed=3)


@pytest.mark.parametrize("attrs, reason", [
    (dict(strides=[2, 2], output_shape=[13, 10]), "an output size of 13 would start before the full transposed "
                                                  "convolution \\(of 11\\)"),
    (dict(strides=[1, 1], output_padding=[1, 0]), "an output_padding of 1 .* is not below max\\(stride, "
                                                  "dilation\\) = 1"),
    (dict(strides=[2, 2], auto_pad="SAME_UPPER", output_padding=[1, 1]), "auto_pad with output_padding is not "
                                                                           "supported"),
    (dict(strides=[2, 2], output_shape=[1, 3, 9, 9]), "model = 'invalid': onnx.checker: "),   # not spatial sizes
], ids=["larger_than_full", "output_padding_of_stride", "same_with_output_padding", "output_shape_rank"])
def test_output_shapes_the_pads_cannot_give_are_refused_by_name(tmp_path, attrs, reason):
    with pytest.raises(InputError, match=reason):
        _compile(tmp_path, _conv_transpose_model(**attrs), np.zeros((2, 2, 5, 5), np.float32))

def _onnx_conv_transpose_cases() -> list:
    """onnx's own ConvTranspose node cases of rank 4 (picked up from the installed onnx)."""
    return [pytest.param(case, id=case.name) for case in onnx_node_cases()
            if [node.op_type for node in case.model.graph.node] == ["ConvTranspose"]
            and len(case.model.graph.input[0].type.tensor_type.shape.dim) == 4]


@pytest.mark.parametrize("case", _onnx_conv_transpose_cases())
def test_onnx_node_cases_normalize_to_their_expected_output(tmp_path, case):
    """Each case's node, its weights made constant, normalized to explicit pads: onnxruntime's output of the
    normalized node is the case's expected output (onnx's reference, which follows the operator text)."""
    (x, weights), (expected,) = case.data_sets[0]
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    model.graph.initializer.append(numpy_helper.from_array(np.asarray(weights), model.graph.input[1].name))
    del model.graph.input[1]
    onnx.save(model, tmp_path / "model.onnx")
    graph = normalize(load_graph(tmp_path / "model.onnx"))
    assert not {"auto_pad", "output_shape"} & set(graph.nodes[0].attrs)
    got = single_thread_session(graph.to_onnx()).run(None, {graph.inputs[0]: np.asarray(x)})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
