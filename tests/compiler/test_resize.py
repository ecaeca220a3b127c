"""Linear (bilinear) Resize (compiler/resize.py): a depthwise transposed conv over the edge-repeated input,
within half an output step of onnxruntime's float Resize of the same dequantized input (one rounding), or
(align_corners, other factors) a 1x1 conv per axis, within one step (two roundings); bit-exact when lowered."""
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


SEPARABLE = {"align_corners_x2": ("align_corners", dict(scales=[1, 1, 2, 2])),
             "align_corners_sizes": ("align_corners", dict(sizes=[1, 4, 9, 16])),
             "half_pixel_x1.5": ("half_pixel", dict(scales=[1, 1, 1.5, 1.5])),
             "asymmetric_x16": ("asymmetric", dict(scales=[1, 1, 16, 16])),    # 32 x 32 is too big for one kernel
             "pytorch_half_pixel_down": ("pytorch_half_pixel", dict(sizes=[1, 4, 3, 4]))}


@pytest.mark.parametrize("mode, resize", SEPARABLE.values(), ids=SEPARABLE.keys())
def test_other_linear_resizes_are_separable_and_within_one_step_of_onnxruntime(tmp_path, mode, resize):
    """Without one fixed kernel: a 1x1 conv per axis between gathers, two roundings (docs/compiler.md §3)."""
    b, x, y = _resize_model(mode, **resize)
    samples = np.random.default_rng(9).normal(0, 1, (6, 3, 6, 6)).astype(np.float32)
    graph, qmodel = _compile(tmp_path, b.model(y), samples)
    assert [op.name for op in qmodel.ops][-5:] == [f"{graph.nodes[-1].name}/{step}" for step in
                                                   ("transpose1", "axis1", "transpose3", "axis2", "transpose5")]
    for image in samples[:3]:
        values = qmodel.run(qmodel.quantize_inputs({"image": image[None]}), keep=True)
        want = float_node_alone(graph, qmodel, values, "Resize")
        got = qmodel.tensors[y].dequantize(values[y])
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= qmodel.tensors[y].scale * (1 + 0.004)    # + M/2^N's share
    _check_every_tensor(qmodel, TINY, samples[:1], seed=4)


@pytest.mark.parametrize("mode, resize, reason", [
    ("align_corners", dict(sizes=[1, 4, 6, 132]), "not one fixed kernel .*; nor are its per-axis interpolation "
                                                  "weights fractions of a denominator up to 127"),    # 131
    ("half_pixel", dict(sizes=[1, 4, 6, 131]), "by integer factors of height and width only .*; nor are its"),
])
def test_linear_resizes_without_an_integer_form_are_refused(tmp_path, mode, resize, reason):
    b, _, y = _resize_model(mode, **resize)
    with pytest.raises(InputError, match=reason):
        _compile(tmp_path, b.model(y), np.zeros((2, 3, 6, 6), np.float32))
