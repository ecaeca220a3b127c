"""The tile kernels the interpreter's compiled loop calls equal the golden functions they stand for, and refuse
(leaving the output alone) rather than answer differently."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.sim import golden
from aipu.sim.interpreter.tiles import conv_tile, requant_tile, takes_conv, weight_operands
from aipu.sim.machine.arch import MULTIPLIER_MAX, PARAM_DTYPE, SHIFT_MAX

SENTINEL = -12345


@st.composite
def _conv_case(draw):
    kind = draw(st.sampled_from(["depthwise", "grouped", "many_groups", "dense", "pointwise", "long"]))
    group_c = 1 if kind == "depthwise" else draw(st.integers(200, 700) if kind == "long" else st.integers(1, 20))
    group_count = {"grouped": st.integers(2, 6), "many_groups": st.integers(16, 24)}.get(kind, st.integers(1, 40))
    groups = 1 if kind in ("dense", "pointwise", "long") else draw(group_count)
    per_group = draw(st.integers(1, {"depthwise": 3, "grouped": 4, "many_groups": 3}.get(kind, 40)))
    kh, kw = (1, 1) if kind == "pointwise" else (draw(st.integers(1, 3 if kind == "long" else 5)),
                                                 draw(st.integers(1, 3 if kind == "long" else 5)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = (0, 0, 0, 0) if kind == "pointwise" else tuple(draw(st.integers(0, 2)) for _ in range(4))
    height = draw(st.integers(max(1, dilation[0] * (kh - 1) + 1 - padding[0] - padding[2]), 12))
    width = draw(st.integers(max(1, dilation[1] * (kw - 1) + 1 - padding[1] - padding[3]), 12))
    dtype = draw(st.sampled_from([np.int8, np.uint8]))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return groups * group_c, groups * per_group, kh, kw, groups, stride, dilation, padding, height, width, dtype, seed


@settings(max_examples=150, deadline=None)
@given(_conv_case())
def test_conv_tile_equals_the_golden_sums_or_refuses(case):
    """Against conv_sums on the NCHW operands: the channels-last kernels (depthwise, GEMM rows) are not its."""
    channels, k, kh, kw, groups, stride, dilation, padding, height, width, dtype, seed = case
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (height, width, channels), endpoint=True).astype(dtype)
    w = rng.integers(-128, 127, (k, kh, kw, channels // groups), endpoint=True).astype(np.int8)
    x_zero_point, w_zero_point = int(rng.integers(info.min, info.max + 1)), int(rng.integers(-128, 128))
    geometry = golden.conv_geometry((1, channels, height, width), x.dtype, (k, channels // groups, kh, kw), np.int8,
                                    x_zero_point=x_zero_point, w_zero_point=w_zero_point, stride=stride,
                                    padding=padding, dilation=dilation, groups=groups)
    expected = golden.conv_sums(x.transpose(2, 0, 1)[None], w.transpose(0, 3, 1, 2), geometry, wide=True)[0]
    expected = expected.transpose(1, 2, 0)
    out = np.full(expected.shape, SENTINEL, np.int32)
    arranged, windowed, largest = weight_operands(w, w_zero_point, groups)
    done = conv_tile(x, x_zero_point, w, arranged, windowed, largest, *stride, *padding[:2], *dilation, out)
    if done:
        np.testing.assert_array_equal(out, expected)
    else:
        assert (out == SENTINEL).all()
        x_max = max(info.max - x_zero_point, x_zero_point - info.min)
        # refused only where float32 is short, or for groups wider than the tap kernels take
        assert (channels // groups) * kh * kw * x_max * largest > 2 ** 24 or not takes_conv(channels, k, kh, kw,
                                                                                          groups)
    if groups == 1 or (takes_conv(channels, k, kh, kw, groups) and (channels // groups) * kh * kw * 255 * 255
                       <= 2 ** 24):
        assert done     # a dense conv in chunks when float32 is short (these sums all fit int32)


@pytest.mark.parametrize("kh, kw", [(3, 3), (5, 5), (25, 1), (7, 7), (3, 5)])
@pytest.mark.parametrize("stride, dilation, channels", [((1, 1), (1, 1), 40), ((2, 2), (1, 1), 16), ((1, 2), (2, 1), 3)])
def test_depthwise_tiles_of_every_pass_structure_equal_the_golden_sums(kh, kw, stride, dilation, channels):
    """The depthwise kernel's one-pass 3x3, five-pass 5x5 (any 25 taps) and general paths, padded unevenly."""
    rng = np.random.default_rng(kh * 10 + kw)
    padding = (kh // 2, kw // 2 + 1, kh // 2 + 1, kw // 2)
    x = rng.integers(-128, 128, ((kh - 1) * dilation[0] + 5, (kw - 1) * dilation[1] + 6, channels)).astype(np.int8)
    w = rng.integers(-128, 128, (channels, kh, kw, 1)).astype(np.int8)
    geometry = golden.conv_geometry((1, channels, *x.shape[:2]), x.dtype, (channels, 1, kh, kw), np.int8,
                                    x_zero_point=-7, w_zero_point=2, stride=stride, padding=padding,
                                    dilation=dilation, groups=channels)
    expected = golden.conv_sums(x.transpose(2, 0, 1)[None], w.transpose(0, 3, 1, 2), geometry)[0].transpose(1, 2, 0)
    out = np.full(expected.shape, SENTINEL, np.int32)
    assert conv_tile(x, -7, w, *weight_operands(w, 2, channels), *stride, *padding[:2], *dilation, out)
    np.testing.assert_array_equal(out, expected)


def _records(rng: np.random.Generator, channels: int, *, bad_field: str | None = None) -> np.ndarray:
    records = np.zeros(channels, PARAM_DTYPE)
    records["bias"] = rng.integers(-2 ** 20, 2 ** 20, channels)
    records["multiplier"] = rng.integers(0, MULTIPLIER_MAX + 1, channels)
    records["shift"] = rng.integers(0, SHIFT_MAX + 1, channels)
    records["negative_multiplier"] = rng.integers(0, MULTIPLIER_MAX + 1, channels)
    records["negative_shift"] = rng.integers(0, SHIFT_MAX + 1, channels)
    records["scale"] = rng.uniform(1e-6, 0.1, channels).astype(np.float32)
    if bad_field == "scale":
        records["scale"][-1] = -1.0
    elif bad_field:
        records[bad_field][-1] = SHIFT_MAX + 1
    return records


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 300), st.integers(1, 80), st.sampled_from(["native", "leaky", "float32"]),
       st.sampled_from([np.int8, np.uint8, np.int16]), st.sampled_from(list(golden.ROUNDING_MODES)),
       st.sampled_from([None, "shift", "negative_shift", "scale"]), st.integers(0, 2 ** 32 - 1))
def test_requant_tile_equals_requantize_records_or_refuses(pixels, channels, mode, out_dtype, rounding, bad_field,
                                                           seed):
    rng = np.random.default_rng(seed)
    acc = rng.integers(-2 ** 31, 2 ** 31, (pixels, channels), dtype=np.int64).astype(np.int32)
    records = _records(rng, channels, bad_field=bad_field)
    info = np.iinfo(out_dtype)
    stage = golden.requant_stage(float32_scale=mode == "float32", leaky=mode == "leaky", rounding=rounding,
                                 out_zero_point=int(rng.integers(info.min, info.max + 1)), out_dtype=out_dtype)
    out = np.full((pixels, channels), info.min + 1, out_dtype)
    count = requant_tile(acc, records, stage.float32_scale, stage.leaky, stage.rounding, stage.out_zero_point,
                         stage.qmin, stage.qmax, out)
    try:
        expected, saturated = golden.requantize_records(acc, records, stage)
    except ValueError:
        assert count == -1 and (out == info.min + 1).all()
        return
    assert count == saturated
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("rounding", list(golden.ROUNDING_MODES))
@pytest.mark.parametrize("pixels, channels", [(40, 16), (6, 128), (3, 3)])
def test_requant_tile_places_every_tie_of_small_shifts(rounding, pixels, channels):
    """Shifts of 0-3 on small sums of both signs make ties of every kind, where the rounding modes differ
    (random records almost never tie): each mode's loop against rounding_shift_right."""
    rng = np.random.default_rng(channels)
    acc = rng.integers(-40, 40, (pixels, channels)).astype(np.int32)
    records = np.zeros(channels, PARAM_DTYPE)
    records["multiplier"], records["shift"] = 1, np.arange(channels) % 4
    stage = golden.requant_stage(float32_scale=False, rounding=rounding, out_dtype=np.int8)
    out = np.zeros((pixels, channels), np.int8)
    assert requant_tile(acc, records, False, False, stage.rounding, 0, -128, 127, out) == 0
    expected = golden.rounding_shift_right(acc.astype(np.int64), records["shift"].astype(np.int64), rounding)
    np.testing.assert_array_equal(out, expected)
