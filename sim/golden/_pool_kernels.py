"""numba kernels of the pooling unit (kept apart so that importing the golden model stays cheap).

numpy's sliding windows reduce a strided 6-D view, which costs several times onnxruntime's pooling; here each
output row collects its taps one kernel column at a time, a run over the row that vectorises (strides 1 and 2
get loops of their own, so that the stride is a constant). Every index is unsigned, as in _grouped_conv.py,
so that numba needs no negative-index check. tests/sim/golden/test_pool_kernels.py checks every kernel against
the numpy form of docs/arithmetic.md §7.

Layout: x as [planes, H, W] (planes = N * C), out as [planes, OH, OW], both C-contiguous.
"""
from __future__ import annotations

import numba
import numpy as np

from aipu.sim.golden._requant_kernels import ROUNDING_CODES

_U = np.uint64
_FLOOR, _HALF_UP, _HALF_TO_EVEN = ROUNDING_CODES["floor"], ROUNDING_CODES["half_up"], ROUNDING_CODES["half_to_even"]
_INT64_MIN, _INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


@numba.njit(cache=True, nogil=True, inline="always")
def _columns(out_width, width, stride, offset):
    """The outputs [first, stop) whose input column ``o * stride + offset`` lies in [0, width), and the input
    column of ``first``."""
    first = max(0, -(offset // stride)) if offset < 0 else 0
    stop = min(out_width, (width - 1 - offset) // stride + 1) if width - 1 >= offset else 0
    stop = max(stop, first)
    return _U(first), _U(stop), _U(first * stride + offset) if stop > first else _U(0)


@numba.njit(cache=True, nogil=True)
def max_pool(x, kh, kw, sh, sw, pt, pl, dh, dw, lowest, out):
    """out = the largest tap of each window; taps in the padding are skipped (they would hold ``lowest``)."""
    planes, height, width = x.shape
    oh, ow = out.shape[1], out.shape[2]
    step = _U(sw)
    for p in range(planes):
        for oy in range(oh):
            row = out[p, oy]
            row[:] = lowest
            for i in range(kh):
                y = oy * sh + i * dh - pt
                if y < 0 or y >= height:
                    continue
                source = x[p, y]
                for j in range(kw):
                    first, stop, column = _columns(ow, width, sw, j * dw - pl)
                    if sw == 1:
                        for q in range(stop - first):
                            row[first + q] = max(row[first + q], source[column + q])
                    elif sw == 2:
                        for q in range(stop - first):
                            row[first + q] = max(row[first + q], source[column + _U(2) * q])
                    else:
                        for q in range(stop - first):
                            row[first + q] = max(row[first + q], source[column + step * q])


@numba.njit(cache=True, nogil=True, inline="always")
def _rounded_quotient(total, divisor, rounding):
    """rounding_divide(total, divisor, mode) of sim/golden/rounding.py for one int64 and a positive divisor.

    The float64 quotient's floor is the exact floor: |total / divisor| < 2**16 (a mean of 16-bit values), so
    its rounding error is below 2**-37, less than the 1 / divisor between a non-integer quotient and the next
    integer, and an integer quotient is exact."""
    quotient = np.int64(np.floor(np.float64(total) / np.float64(divisor)))
    twice_remainder = 2 * (total - quotient * divisor)
    if rounding == _FLOOR:
        return quotient
    if rounding == _HALF_UP:
        return quotient + (twice_remainder >= divisor)
    tie = twice_remainder == divisor
    if rounding == _HALF_TO_EVEN:
        return quotient + ((twice_remainder > divisor) | (tie & ((quotient & 1) == 1)))
    return quotient + ((twice_remainder > divisor) | (tie & (total >= 0)))      # half away from zero


@numba.njit(cache=True, nogil=True, error_model="numpy")
def avg_pool(x, zero_point, kh, kw, sh, sw, pt, pl, include_pad, rounding, out):
    """out = round(sum of (x - zp) over the taps inside the image / divisor) + zp, the divisor being kh * kw or
    (``include_pad`` false) the number of taps inside. Returns the smallest and largest window sum, which the
    caller checks against the accumulator."""
    planes, height, width = x.shape
    oh, ow = out.shape[1], out.shape[2]
    step = _U(sw)
    sums = np.empty(ow, np.int64)
    inside_columns = np.zeros(ow, np.int64)        # taps of each output column's window inside the image
    for j in range(kw):
        first, stop, _ = _columns(ow, width, sw, j - pl)
        inside_columns[first:stop] += 1
    smallest, largest = _INT64_MAX, _INT64_MIN
    for p in range(planes):
        for oy in range(oh):
            sums[:] = 0
            inside_rows = 0
            for i in range(kh):
                y = oy * sh + i - pt
                if y < 0 or y >= height:
                    continue
                inside_rows += 1
                source = x[p, y]
                for j in range(kw):
                    first, stop, column = _columns(ow, width, sw, j - pl)
                    if sw == 1:
                        for q in range(stop - first):
                            sums[first + q] += np.int64(source[column + q]) - zero_point
                    elif sw == 2:
                        for q in range(stop - first):
                            sums[first + q] += np.int64(source[column + _U(2) * q]) - zero_point
                    else:
                        for q in range(stop - first):
                            sums[first + q] += np.int64(source[column + step * q]) - zero_point
            row = out[p, oy]
            for ox in range(ow):
                total = sums[ox]
                smallest, largest = min(smallest, total), max(largest, total)
                divisor = np.int64(kh * kw) if include_pad else inside_rows * inside_columns[ox]
                row[ox] = _rounded_quotient(total, divisor, rounding) + zero_point
    return smallest, largest


@numba.njit(cache=True, nogil=True, error_model="numpy")
def global_avg_pool(x, zero_point, rounding, out):
    """out[p] = round(sum of (x[p] - zp) / size) + zp for x as [planes, size]; returns the smallest and largest
    sum, which the caller checks against the accumulator. The divisions run in a loop of their own, which
    vectorises."""
    planes, size = x.shape
    totals = np.empty(planes, np.int64)
    for p in range(planes):
        values = x[p]
        total = np.int64(0)
        for i in range(_U(size)):
            total += np.int64(values[i])
        totals[p] = total - zero_point * size
    smallest, largest = _INT64_MAX, _INT64_MIN
    for p in range(planes):
        total = totals[p]
        smallest, largest = min(smallest, total), max(largest, total)
        out[p] = _rounded_quotient(total, np.int64(size), rounding) + zero_point
    return smallest, largest
