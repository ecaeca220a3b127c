"""Pad (docs/compiler.md §1, §3): a zero Pad read only by convolutions folds into their padding; every other
Pad (constant of any value, reflect, edge, wrap, channel pads, negative pads that crop) is a gather whose fill
comes from a DRAM constant, equal to onnxruntime's Pad of the same input and bit-exact when lowered."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from aipu.app.models.synthetic import GraphBuilder
from aipu.compiler.qir import QLayout
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.errors import InputError
from tests.compiler.test_lowering import TINY, _check_every_tensor
from tests.compiler.test_quantize import _compile, float_node_alone

CASES = {
    "zero_before_maxpool": dict(pads=[0, 0, 1, 1, 0, 0, 1, 1], then="MaxPool"),
    "constant_value": dict(pads=[0, 0, 2, 0, 0, 0, 0, 3], value=0.5),
    "reflect": dict(pads=[0, 0, 2, 1, 0, 0, 1, 2], mode="reflect"),
    "edge_channels_too": dict(pads=[0, 1, 1, 1, 0, 2, 1, 1], mode="edge"),
    "wrap": dict(pads=[0, 0, 1, 2, 0, 0, 2, 1], mode="wrap", opset=19),
    "negative_crops": dict(pads=[0, 0, -1, 2, 0, 0, 1, -2]),
    "axes_input": dict(pads=[1, 2, 3, 0], axes=[2, 3], mode="reflect", opset=18),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_pad_is_onnxruntime_exact_and_lowers_bit_exact(tmp_path, case):
    b = GraphBuilder(6, 3, 6, opset=case.get("opset", 17))
    x = b.node("Relu", [b.conv("image", 3, 4)])
    inputs = [x, b.const(np.array(case["pads"], np.int64)),
              b.const(np.array(case.get("value", 0.0), np.float32)) if "value" in case or "axes" in case else ""]
    if "axes" in case:
        inputs.append(b.const(np.array(case["axes"], np.int64)))
    y = b.node("Pad", inputs, mode=case.get("mode", "constant"))
    if case.get("then") == "MaxPool":
        y = b.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2])
    samples = np.random.default_rng(2).normal(0, 1, (6, 3, 6, 6)).astype(np.float32)
    graph, qmodel = _compile(tmp_path, b.model(y), samples)
    pad = next(op for op in qmodel.ops if isinstance(op, QLayout))
    values = qmodel.run(qmodel.quantize_inputs({"image": samples[:1]}), keep=True)
    want = float_node_alone(graph, qmodel, values, "Pad")
    got = qmodel.tensors[pad.y].dequantize(values[pad.y])
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= qmodel.tensors[x].scale * 0.5     # exact but for the fill's rounding
    for config in (DEFAULT, TINY):
        _check_every_tensor(qmodel, config, samples[:1], seed=3)


def test_a_zero_pad_before_a_conv_still_folds(tmp_path):
    b = GraphBuilder(6, 3, 6)
    y = b.conv(b.node("Pad", ["image", b.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))]), 3, 4)
    graph, qmodel = _compile(tmp_path, b.model(y), np.zeros((2, 3, 6, 6), np.float32))
    assert [node.op for node in graph.nodes] == ["Conv"] and not any(isinstance(op, QLayout) for op in qmodel.ops)


def test_a_pad_value_outside_the_input_range_and_batch_pads_are_refused(tmp_path):
    for value in (-100.0, 1e30):          # 1e30 in steps of the scale overflows int64: no warning, the same error
        b = GraphBuilder(6, 3, 6)
        y = b.node("Pad", [b.node("Relu", ["image"]), b.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
                           b.const(np.array(value, np.float32))])
        with warnings.catch_warnings(), pytest.raises(InputError, match="pad value"):
            warnings.simplefilter("error", RuntimeWarning)
            _compile(tmp_path, b.model(y), np.random.default_rng(0).normal(0, 1, (4, 3, 6, 6)).astype(np.float32))
    b = GraphBuilder(6, 3, 6)
    y = b.node("Pad", ["image", b.const(np.array([1, 0, 0, 0, 0, 0, 0, 0], np.int64))])
    with pytest.raises(InputError, match="batch axis"):
        _compile(tmp_path, b.model(y), np.zeros((2, 3, 6, 6), np.float32))
