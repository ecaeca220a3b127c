"""numba kernels of the requantizer (kept apart so that importing the golden model stays cheap).

One pass per element instead of numpy's chain of tensor-sized temporaries (int64 sum, product, quotient,
remainder, masks, clip, cast): the output stage of a depthwise layer otherwise costs several times its
convolution. The arithmetic is docs/arithmetic.md §4 step for step; tests/sim/golden/test_requant_kernels.py
checks every mode against the straightforward numpy form.

Layout: the accumulator as [outer, channels, inner] (any tensor with its channel axis in the middle), the
per-channel parameters as arrays of ``channels`` entries, ``out`` preallocated in the output type. Each
kernel returns how many values the clamp changed.
"""
from __future__ import annotations

import numba
import numpy as np

from aipu.sim.golden.rounding import ROUNDING_MODES

# The kernels branch on a mode's position in ROUNDING_MODES: 0 floor, 1 half up, 2 half to even, 3 half away.
ROUNDING_CODES = {mode: code for code, mode in enumerate(ROUNDING_MODES)}
ROUND_HALF_EVEN_BIAS = 1.5 * 2.0 ** 52   # (v + this) - this rounds a float64 |v| < 2**51 half to even, exactly


@numba.njit(cache=True, nogil=True, inline="always")
def _shift_right(value, shift, rounding):
    """rounding_shift_right of one int64 (sim/golden/rounding.py): floor quotient, then the tie rule."""
    quotient = value >> shift
    if rounding == 0 or shift == 0:
        return quotient
    remainder = value - (quotient << shift)
    half = np.int64(1) << (shift - 1)
    if remainder > half:
        return quotient + 1
    if remainder < half:
        return quotient
    if rounding == 1:
        return quotient + 1
    if rounding == 2:
        return quotient + (quotient & 1)
    return quotient + (value >= 0)          # half away from zero: a tie of a negative value stays at the floor


@numba.njit(cache=True, nogil=True, inline="always")
def _store(value, zero_point, qmin, qmax, out, o, c, i):
    """+ zero point, clamp, store (no branches: the loops vectorise); 1 if the clamp changed the value."""
    shifted = value + zero_point
    out[o, c, i] = min(max(shifted, qmin), qmax)
    return (shifted < qmin) | (shifted > qmax)


@numba.njit(cache=True, nogil=True)
def native_requant(acc, bias, multiplier, shift, negative_multiplier, negative_shift, leaky, rounding,
                   zero_point, qmin, qmax, out):
    """clamp(round((acc + bias) * M >> N) + zp); sums below 0 take the negative pair when ``leaky``."""
    outer, channels, inner = acc.shape
    saturated = 0
    for o in range(outer):
        for c in range(channels):
            for i in range(inner):
                total = np.int64(acc[o, c, i]) + bias[c]
                if leaky and total < 0:
                    scaled = _shift_right(total * negative_multiplier[c], negative_shift[c], rounding)
                else:
                    scaled = _shift_right(total * multiplier[c], shift[c], rounding)
                saturated += _store(scaled, zero_point, qmin, qmax, out, o, c, i)
    return saturated


@numba.njit(cache=True, nogil=True)
def float32_requant(acc, bias, scale, zero_point, qmin, qmax, out):
    """clamp(round_half_even(fp32(fp32(acc + bias) * scale)) + zp, qmin, qmax), in float64 throughout so that
    every step has a packed instruction on AVX2 (it has none for int64 <-> float): acc + bias is an exact
    float64 (|.| < 2**34), its conversion to float32 the same single RNE rounding as from the integer; the
    product is clamped to one beyond the output range *before* rounding (rounding is monotonic, so the
    clamped result and the saturation count are unchanged), which also keeps it where ``ROUND_HALF_EVEN_BIAS``
    rounds exactly; ``bias`` comes as float64."""
    outer, channels, inner = acc.shape
    low, high = np.float64(qmin - zero_point), np.float64(qmax - zero_point)
    saturated = 0
    for o in range(outer):
        for c in range(channels):
            for i in range(inner):
                product = np.float32(np.float64(acc[o, c, i]) + bias[c]) * scale[c]
                value = min(max(np.float64(product), low - 1.0), high + 1.0)
                rounded = (value + ROUND_HALF_EVEN_BIAS) - ROUND_HALF_EVEN_BIAS
                saturated += (rounded < low) | (rounded > high)
                out[o, c, i] = np.int32(min(max(rounded, low), high)) + zero_point
    return saturated
