"""Linear (bilinear) Resize (compiler/resize.py): a depthwise transposed conv over the edge-repeated input,
within half an output step of onnxruntime's float Resize of the same dequantized input (one rounding), and
bit-exact when lowered."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.app.models.synthetic import GraphBuilder
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.errors import InputError
from tests.compiler.test_lowering import TINY, _check_every_tensor
from tests.compiler.test_quantize import _compile, float_node_alone


def _resize_model(mode: str, scales=None, sizes=None):
    b = GraphBuilder(5, 3, 6)
    x = b.node("Relu", [b.conv("image", 3, 4)])
    inputs = [x, "", b.const(np.array(scales, np.float32))] if scales else [x, "", "", b.const(np.array(sizes))]
    return b, x, b.node("Resize", inputs, mode="linear", coordinate_transformation_mode=mode)


@pytest.mark.parametrize("mode", ["half_pixel", "pytorch_half_pixel", "asymmetric"])
@pytest.mark.parametrize("resize", [dict(scales=[1, 1, 2, 2]), dict(scales=[1, 1, 3, 2]), dict(scales=[1, 1, 1, 4]),
                                    dict(sizes=[1, 4, 12, 12])], ids=["x2", "x3_x2", "x1_x4", "sizes_x2"])
def test_bilinear_resize_is_within_half_a_step_of_onnxruntime(tmp_path, mode, resize):
    b, x, y = _resize_model(mode, **resize)
    samples = np.random.default_rng(9).normal(0, 1, (6, 3, 6, 6)).astype(np.float32)
    graph, qmodel = _compile(tmp_path, b.model(y), samples)
    values = qmodel.run(qmodel.quantize_inputs({"image": samples[:1]}), keep=True)
    want = float_node_alone(graph, qmodel, values, "Resize")
    got = qmodel.tensors[y].dequantize(values[y])
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= qmodel.tensors[y].scale * (0.5 + 1e-3)
    for config in (DEFAULT, TINY):
        _check_every_tensor(qmodel, config, samples[:1], seed=4)


@pytest.mark.parametrize("mode, scales, reason", [
    ("align_corners", [1, 1, 2, 2], "not one fixed kernel"),
    ("half_pixel", [1, 1, 1.5, 1.5], "integer factors"),
    ("half_pixel", [1, 1, 16, 16], "not int8 fractions"),
])
def test_linear_resizes_without_a_fixed_integer_kernel_are_refused(tmp_path, mode, scales, reason):
    b, _, y = _resize_model(mode, scales=scales)
    with pytest.raises(InputError, match=reason):
        _compile(tmp_path, b.model(y), np.zeros((2, 3, 6, 6), np.float32))
