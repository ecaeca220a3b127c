"""The shift-quantization patent (power-of-two quantization) on the requantizer: the patent's numbers and the proof."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from aipu.sim.golden import (FEATURE_QUAN, KERNEL_QUAN, pow2_quantize, pow2_requant_params, pow2_scale_exponent,
                        requantize)


def test_patent_example_input_scale():
    # the patent's [0071]: abs_max 255, QUAN 127: log2(127/255) = -1.00567 -> scale_feature[0] = -1
    assert pow2_scale_exponent(255, FEATURE_QUAN) == -1
    assert (FEATURE_QUAN, KERNEL_QUAN) == (127, 63)   # [0069]: 8-bit features, 7-bit kernels


def test_spec_chain_1_6():
    # pixels [200, 37, 254] at exponent -1: 100, 18.5 -> 19 (ties away from zero), 127
    assert pow2_quantize([200, 37, 254], -1, FEATURE_QUAN).tolist() == [100, 19, 127]
    # A2-3: 255 / 2 = 127.5 -> 128 exceeds QUAN; we clamp to 127
    assert pow2_quantize([255], -1, FEATURE_QUAN).tolist() == [127]
    # kernel abs_max 0.30: log2(63 / 0.30) = 7.714 -> 8; [0.12, -0.05, 0.30] * 256 = [30.72, -12.8, 76.8]
    # -> [31, -13, 77]; 77 > QUAN_k = 63 is clamped to 63 (A2-3)
    assert pow2_scale_exponent(0.30, KERNEL_QUAN) == 8
    assert pow2_quantize([0.12, -0.05, 0.30], 8, KERNEL_QUAN).tolist() == [31, -13, 63]
    # bias 0.5 at bias_scale = -1 + 8 = 7: 0.5 * 128 = 64 (int32, no clamp)
    assert pow2_quantize([0.5], 7, None).tolist() == [64]
    # output abs_max 100: log2(127/100) = 0.345 -> 0; s = -1 + 8 - 0 = 7.
    # With the patent's unclamped kernel 77: acc = 100*31 + 19*(-13) + 127*77 + 64 = 12696;
    # 12696 >> 7 = 99 (99.19); -12696 >> 7 = -100 (floor of -99.19).
    assert pow2_scale_exponent(100, FEATURE_QUAN) == 0
    params = pow2_requant_params(-1, 8, 0)
    assert params == {"multiplier": 1, "shift": 7, "rounding": "floor", "out_zero_point": 0,
                      "qmin": -127, "qmax": 127}
    acc = np.array([100 * 31 + 19 * -13 + 127 * 77, -(100 * 31 + 19 * -13 + 127 * 77) - 128], dtype=np.int32)
    assert requantize(acc, bias=64, channel_axis=0, **params).tolist() == [99, -100]
    # With our clamped kernel [31, -13, 63]: 3100 - 247 + 8001 + 64 = 10918, 10918 >> 7 = 85 (85.3)
    clamped = np.array([100 * 31 + 19 * -13 + 127 * 63], dtype=np.int32)
    assert requantize(clamped, bias=64, channel_axis=0, **params).tolist() == [85]


def patent_literal(acc: int, s: int, quan: int, relu: bool) -> int:
    """S620-S640 as written: ReLU, saturate to +-QUAN * 2**s, >> s (left shift for s < 0), low 8 bits."""
    if relu:
        acc = max(acc, 0)
    if s >= 0:
        acc = min(max(acc, -quan * 2 ** s), quan * 2 ** s)
        out = acc >> s
    else:  # bounds quan * 2**s are fractional: compare exactly in rationals by scaling both sides
        out = min(max(acc * 2 ** -s, -quan), quan)
    return ((out + 128) & 0xFF) - 128


@settings(max_examples=300, deadline=None)
@given(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(-2 ** 20, 2 ** 20), st.integers(-15, 40),
       st.sampled_from([127, 63]), st.booleans())
def test_requant_equals_patent_clamp_then_shift(acc, bias, s, quan, relu):
    # The proof in docs/arithmetic.md §5.2: clamp(x, +-Q*2**s) >> s == clamp(x >> s, +-Q), and ReLU commutes
    # with the floor shift; negative s is the multiplier 2**-s.
    e_in, e_k = 3, s - 3 + 2     # any exponents with e_in + e_k - e_out = s (e_out = 2)
    params = pow2_requant_params(e_in, e_k, 2, quan=quan, relu=relu)
    total = acc + bias
    acc32 = np.array([acc], dtype=np.int32)
    got = requantize(acc32, bias=bias, channel_axis=0, **params).item()
    assert got == patent_literal(total, s, quan, relu)


def test_negative_shift_limits_and_bad_input():
    assert pow2_requant_params(-1, 0, 14) == {"multiplier": 2 ** 15, "shift": 0, "rounding": "floor",
                                             "out_zero_point": 0, "qmin": -127, "qmax": 127}
    with pytest.raises(ValueError, match="s=-16"):
        pow2_requant_params(-1, 0, 15)
    with pytest.raises(ValueError, match="abs_max=0"):
        pow2_scale_exponent(0, 127)
    with pytest.raises(ValueError, match="does not fit int32"):
        pow2_quantize([2.0 ** 40], 0, None)
    with pytest.raises(ValueError, match="quan=0"):
        pow2_quantize([1.0], 0, 0)
