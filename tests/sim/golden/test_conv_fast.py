"""conv2d's and matmul's fast paths (sim/golden/fast/conv.py: the float32 GEMMs and the numba tap kernels)
against the definition in sim/golden/conv.py, which is itself checked against test_conv.py's direct loop.

The cases straddle every switch between paths: channels per group around the tap kernels' limit (16), dense
convs of few and of many outputs, reductions on either side of one exact float32 chunk, depthwise planes and
kernels around the unpadded-row kernel's limits, grouped channels-last tiles of few and of many groups (the
channels-last kernel from 16), tiles whose windows lie inside x (read unconverted, window kernel from 16
channels), both operand types and zero points at their extremes, checked and wide sums."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.sim.golden import conv2d, conv_geometry, conv_sums_channels_last, matmul
from aipu.sim.golden.conv import accumulated, convolution, matrix_product
from tests.sim.golden.test_conv import conv_case, reference_conv


@settings(max_examples=60, deadline=None)
@given(conv_case())
def test_definition_equals_the_direct_loop(case):
    np.testing.assert_array_equal(convolution(*case), reference_conv(*case))


def _values(rng, dtype, shape, extremes: float):
    """Values of ``dtype``, a share ``extremes`` of them at the type's ends (the largest products)."""
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, shape, endpoint=True)
    return np.where(rng.random(shape) < extremes, rng.choice([info.min, info.max], shape), values).astype(dtype)


@st.composite
def fast_cases(draw):
    """A conv near the fast paths' switches, as conv2d's arguments, for NCHW and channels-last operands."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    groups = draw(st.sampled_from([1, 1, 2, 4, 15, 16, 17, 32]))
    cg = draw(st.sampled_from([1, 2, 4, 15, 16, 17, 29] if groups < 4 else [1, 2, 4]))
    kg = draw(st.sampled_from([1, 2, 4, 16, 17] if groups < 4 else [1, 2, 4]))
    kh, kw = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = tuple(draw(st.sampled_from([0, 0, 1, 2])) for _ in range(4))
    span_h, span_w = dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1
    largest = 66 if groups * cg <= 4 else 12      # planes beyond the unpadded-row kernel's 64 x 64
    h = draw(st.integers(max(1, span_h - padding[0] - padding[2]), max(span_h, largest)))
    wd = draw(st.integers(max(1, span_w - padding[1] - padding[3]), max(span_w, largest)))
    x_dtype, w_dtype = draw(st.sampled_from([np.int8, np.uint8])), draw(st.sampled_from([np.int8, np.uint8]))
    extremes = draw(st.sampled_from([0.0, 0.5, 1.0]))
    x = _values(rng, x_dtype, (draw(st.integers(1, 2)), cg * groups, h, wd), extremes)
    w = _values(rng, w_dtype, (kg * groups, cg, kh, kw), extremes)
    xi, wi = np.iinfo(x_dtype), np.iinfo(w_dtype)
    zx = int(draw(st.sampled_from([int(xi.min), int(xi.max), 0, int(rng.integers(xi.min, xi.max))])))
    zw = (rng.integers(wi.min, wi.max, kg * groups, endpoint=True) if draw(st.booleans())
          else int(draw(st.sampled_from([int(wi.min), int(wi.max), 0]))))
    return x, w, dict(x_zero_point=zx, w_zero_point=zw, stride=stride, padding=padding, dilation=dilation,
                      groups=groups)


@settings(max_examples=300, deadline=None)
@given(fast_cases(), st.booleans())
def test_fast_paths_equal_the_definition(case, wide):
    x, w, params = case
    want = convolution(x, w, *params.values())
    if not wide and (want.min(initial=0) < -(1 << 31) or want.max(initial=0) >= 1 << 31):
        with pytest.raises(OverflowError, match="conv2d: accumulator value"):
            conv2d(x, w, **params)
        return
    got = conv2d(x, w, **params, wide=wide)
    np.testing.assert_array_equal(got, want)
    if not wide:
        assert got.dtype == np.int32
    geometry = conv_geometry(x.shape, x.dtype, w.shape, w.dtype, **params)
    channels_last = conv_sums_channels_last(np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                                            np.ascontiguousarray(w.transpose(0, 2, 3, 1)), geometry, wide=wide)
    np.testing.assert_array_equal(channels_last, want.transpose(0, 2, 3, 1))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from([1, 7, 257, 258, 259, 1000]), st.sampled_from([np.int8, np.uint8]),
       st.sampled_from([np.int8, np.uint8]), st.booleans(), st.sampled_from([0.0, 1.0]))
def test_matmul_equals_the_definition(seed, depth, a_dtype, b_dtype, per_column, extremes):
    """Reductions on either side of one exact float32 chunk (258 products of 255 * 255), batch axes broadcast."""
    rng = np.random.default_rng(seed)
    a = _values(rng, a_dtype, (2, 1, 3, depth), extremes)
    b = _values(rng, b_dtype, (4, depth, 5), extremes)
    ai, bi = np.iinfo(a_dtype), np.iinfo(b_dtype)
    za = int(rng.choice([ai.min, ai.max]))
    zb = rng.integers(bi.min, bi.max, 5, endpoint=True) if per_column else int(rng.choice([bi.min, bi.max]))
    np.testing.assert_array_equal(matmul(a, b, a_zero_point=za, b_zero_point=zb), matrix_product(a, b, za, zb))


def test_definition_checks_the_accumulator_as_conv2d_does():
    """40000 * 255 * 255 = 2601000000 > 2**31 - 1: the definition's accumulator refuses it with conv2d's words."""
    xu = np.full((1, 40000, 1, 1), 255, dtype=np.uint8)
    with pytest.raises(OverflowError, match="conv2d: accumulator value 2601000000"):
        accumulated("conv2d", convolution(xu, xu, 0, 0, (1, 1), (0, 0, 0, 0), (1, 1), 1))
    with pytest.raises(OverflowError, match="conv2d: accumulator value 2601000000"):
        conv2d(xu, xu)
