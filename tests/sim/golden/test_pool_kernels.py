"""The pooling kernels (sim/golden/fast/pool.py) against the definitions in sim/golden/pool.py (docs/arithmetic.md
§7: sliding windows over the padded input): every storage type, kernel size, stride (the kernels' stride 1, 2 and
general loops), dilation, padding, zero point, divisor rule and rounding mode, and the accumulator check."""
from __future__ import annotations

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.sim.golden import avg_pool2d, global_avg_pool, max_pool2d
from aipu.sim.golden.fast.pool import ROUNDING_CODES, _rounded_quotient
from aipu.sim.golden.pool import avg_pool, global_average, max_pool
from aipu.sim.golden.rounding import ROUNDING_MODES, rounding_divide

DTYPES = (np.int8, np.uint8, np.int16)


@st.composite
def problems(draw, dilated: bool):
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    dtype = draw(st.sampled_from(DTYPES))
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilated else (1, 1)
    spans = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    padding = tuple(draw(st.integers(0, spans[i % 2] - 1)) for i in range(4))
    height = draw(st.integers(max(1, spans[0] - padding[0] - padding[2]), 12))
    width = draw(st.integers(max(1, spans[1] - padding[1] - padding[3]), 12))
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (draw(st.integers(1, 2)), draw(st.integers(1, 3)), height, width),
                     endpoint=True).astype(dtype)
    if draw(st.booleans()):             # a strided view: the kernels take a contiguous copy
        x = np.repeat(x, 2, axis=3)[..., ::2]
    return dict(x=x, kernel=kernel, stride=stride, padding=padding, dilation=dilation,
                zp=int(rng.integers(info.min, info.max, endpoint=True)))


@settings(max_examples=200, deadline=None)
@given(problems(dilated=True))
def test_max_pool_kernel_equals_the_definition(p):
    got = max_pool2d(p["x"], p["kernel"], stride=p["stride"], padding=p["padding"], dilation=p["dilation"])
    want = max_pool(p["x"], p["kernel"], p["stride"], p["padding"], p["dilation"])
    assert got.dtype == want.dtype and np.array_equal(got, want)


@settings(max_examples=200, deadline=None)
@given(problems(dilated=False), st.booleans(), st.sampled_from(ROUNDING_MODES))
def test_avg_pool_kernel_equals_the_definition(p, include_pad, rounding):
    got = avg_pool2d(p["x"], p["kernel"], stride=p["stride"], padding=p["padding"], count_include_pad=include_pad,
                     x_zero_point=p["zp"], rounding=rounding)
    want = avg_pool(p["x"], p["kernel"], p["stride"], p["padding"], include_pad, p["zp"], rounding)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@settings(max_examples=100, deadline=None)
@given(problems(dilated=False), st.sampled_from(ROUNDING_MODES))
def test_global_avg_pool_kernel_equals_the_definition(p, rounding):
    x = p["x"]
    got = global_avg_pool(x, x_zero_point=p["zp"], rounding=rounding)
    want = global_average(x, p["zp"], rounding)
    assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)


def test_sums_beyond_the_accumulator_raise_naming_the_worst():
    """182 x 182 int16 taps of -32768 - 32767 sum to -2170781340 < -2**31, in either average (kernel and
    definition alike); 181 x 181 fit."""
    x = np.full((1, 1, 182, 182), -32768, np.int16)
    for pool in (lambda x: avg_pool2d(x, x.shape[2], x_zero_point=32767),
                 lambda x: global_avg_pool(x, x_zero_point=32767),
                 lambda x: avg_pool(x, x.shape[2:], x.shape[2:], (0, 0, 0, 0), False, 32767, "half_up"),
                 lambda x: global_average(x, 32767, "half_up")):
        with pytest.raises(OverflowError, match="window sum -2170781340 does not fit in int32"):
            pool(x)
        x[0, 0, 0, 0] = 32767      # a tap of 0: the mean of -65535 * 32760 / 32761 is -65533.0
        assert pool(x[..., :181, :181]).item() == -65533 + 32767
        x[0, 0, 0, 0] = -32768


def test_an_image_without_pixels_has_no_divisor():
    """All windows in the padding: max pooling sees only padded taps, an average has nothing to divide by
    unless it counts the padding."""
    x = np.zeros((1, 2, 0, 3), np.int8)
    geometry = dict(stride=1, padding=(1, 1, 1, 1))
    assert max_pool2d(x, 2, **geometry).tolist() == [[[[-128] * 4]] * 2]
    assert avg_pool2d(x, 2, count_include_pad=True, x_zero_point=4, **geometry).tolist() == [[[[4] * 4]] * 2]
    with pytest.raises(ValueError, match="divisor=0"):
        avg_pool2d(x, 2, **geometry)
    with pytest.raises(ValueError, match="divisor=0"):
        global_avg_pool(x)


@numba.njit
def _quotients(totals, divisor, rounding, out):
    for i in range(totals.size):
        out[i] = _rounded_quotient(totals[i], divisor, 1.0 / divisor, rounding)


@pytest.mark.parametrize("rounding", ROUNDING_MODES)
def test_the_quotient_by_a_reciprocal_is_the_exact_rounded_quotient(rounding):
    """The average kernels divide by multiplying with 1 / divisor and correcting by the remainder: every total
    near 0, near each multiple of the divisor (where the product falls just below an integer) and at the
    extremes of a mean of 16-bit values, for divisors 1 to 200, against the exact rational division."""
    for divisor in range(1, 201):
        multiples = np.arange(-2 ** 16, 2 ** 16, 97, dtype=np.int64) * divisor
        totals = np.concatenate([np.arange(-3 * divisor, 3 * divisor + 1), (multiples[:, None] + [-1, 0, 1]).ravel(),
                                 [-(2 ** 16) * divisor, (2 ** 16 - 1) * divisor]]).astype(np.int64)
        out = np.empty_like(totals)
        _quotients(totals, np.int64(divisor), ROUNDING_CODES[rounding], out)
        assert np.array_equal(out, rounding_divide(totals, np.int64(divisor), rounding)), divisor
