"""Slice and Split (YOLO-style detectors split channels, crop and subsample planes): gathers equal to
onnxruntime's float operator on the dequantized input, and bit-exact on the NPU."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from aipu.app.models.synthetic import GraphBuilder
from aipu.sim.machine.arch import DEFAULT
from tests.compiler.test_lowering import TINY, _check_every_tensor
from tests.compiler.test_quantize import _compile, float_node_alone


def _sliced(b: GraphBuilder, x: str) -> tuple[str, str]:
    """Channels 1..4, every other column from the right, rows 2 to the end; then a 1x1 conv."""
    part = b.node("Slice", [x, b.const(np.array([1, -1, 2])), b.const(np.array([5, -100, 99])),
                            b.const(np.array([1, 3, 2])), b.const(np.array([1, -2, 1]))])
    return part, b.conv(part, 4, 4, kernel=1, bn=False)


def _split(b: GraphBuilder, x: str) -> tuple[str, str]:
    """Channels as 2 + 4, each through its own 1x1 conv, added."""
    first, second = b.name("split"), b.name("split")
    b.nodes.append(helper.make_node("Split", [x, b.const(np.array([2, 4]))], [first, second], name=first, axis=1))
    return first, b.node("Add", [b.conv(first, 2, 4, kernel=1, bn=False), b.conv(second, 4, 4, kernel=1, bn=False)])


@pytest.mark.parametrize("op, build", [("Slice", _sliced), ("Split", _split)])
def test_slices_and_splits_gather_exactly_and_run_bit_exact(tmp_path, op, build):
    b = GraphBuilder(9, 3, 8)
    part, y = build(b, b.node("Relu", [b.conv("image", 3, 6)]))
    rng = np.random.default_rng(10)
    graph, qmodel = _compile(tmp_path, b.model(y), rng.normal(0, 1, (6, 3, 8, 8)).astype(np.float32))
    image = rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    values = qmodel.run(qmodel.quantize_inputs({qmodel.inputs[0]: image}), keep=True)
    want = float_node_alone(graph, qmodel, values, op)
    np.testing.assert_allclose(qmodel.tensors[part].dequantize(values[part]), want, rtol=1e-6)
    for config in (DEFAULT, TINY):
        _check_every_tensor(qmodel, config, image, seed=4)
