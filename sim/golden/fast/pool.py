"""numba kernels of the pooling unit: the fast path of sim/golden/pool.py.

The definition's sliding windows reduce a strided 6-D view, which is slow; here each
max pooling output row collects its taps one kernel column at a time, a run over the row that vectorises, and
average pooling sums each window's columns, then kw column sums (strides 1 and 2 get loops of their own, so
that the stride is a constant). Every index is unsigned, as in grouped_conv.py,
so that numba needs no negative-index check. tests/sim/golden/test_pool_kernels.py checks every kernel against
the definitions in sim/golden/pool.py.

Layout: x as [planes, H, W] (planes = N * C), out as [planes, OH, OW], both C-contiguous.
"""
from __future__ import annotations

import numba
import numpy as np

from aipu.sim.golden.fast.requant import ROUNDING_CODES

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
def _rounded_quotient(total, divisor, inverse, rounding):
    """rounding_divide(total, divisor, mode) of sim/golden/rounding.py for one int64 and a positive divisor, given
    ``inverse`` = 1 / divisor in float64.

    The quotient is a mean of 16-bit values, below 2**16 in magnitude, so the float64 product total * inverse
    (two roundings of relative size 2**-53) is within 2**-35 of it and its floor at most one away from the exact
    floor; one step by the remainder corrects that. A multiply, where a division would take most of the
    average pooling kernel's time."""
    quotient = np.int64(np.floor(np.float64(total) * inverse))
    remainder = total - quotient * divisor
    over, under = np.int64(remainder >= divisor), np.int64(remainder < 0)
    quotient += over - under
    twice_remainder = 2 * (remainder + divisor * (under - over))
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
    caller checks against the accumulator.

    Separable: per output row, the column sums of its input rows go into a row whose padding columns stay 0,
    and each output is the sum of kw of them; the zero point is taken off once per tap inside, and the
    divisions run over the whole plane. A run per kernel tap adding into the row's sums at shifting column
    offsets stalled on store forwarding."""
    planes, height, width = x.shape
    oh, ow = out.shape[1], out.shape[2]
    span = (ow - 1) * sw + kw                    # padded columns the windows read
    columns = _U(max(0, min(width, span - pl)))  # input columns they read
    padded = np.zeros(max(span, pl + width), np.int64)
    inside_columns = np.zeros(ow, np.int64)        # taps of each output column's window inside the image
    for j in range(kw):
        first, stop, _ = _columns(ow, width, sw, j - pl)
        inside_columns[first:stop] += 1
    size = _U(oh * ow)
    inside = np.empty(size, np.int64)       # per output: its window's taps inside the image
    divisors = np.empty(size, np.int64)
    inverses = np.empty(size, np.float64)
    for oy in range(oh):
        rows = min(height, oy * sh - pt + kh) - max(0, oy * sh - pt)
        for ox in range(ow):
            t = oy * ow + ox
            inside[t] = rows * inside_columns[ox]
            divisors[t] = kh * kw if include_pad else inside[t]
            inverses[t] = 1.0 / divisors[t]
    totals = np.empty(size, np.int64)
    smallest, largest = _INT64_MAX, _INT64_MIN
    flat_x, flat_out = x.ravel(), out.ravel()
    left, step = _U(pl), _U(sw)
    for p in range(planes):
        for oy in range(oh):
            top, bottom = max(0, oy * sh - pt), min(height, oy * sh - pt + kh)
            if top < bottom:
                source = _U(p * height + top) * _U(width)
                for w in range(columns):
                    padded[left + w] = np.int64(flat_x[source + w])
            else:       # no row inside (an image of no rows): sums of nothing
                for w in range(columns):
                    padded[left + w] = 0
            for y in range(top + 1, bottom):
                source = _U(p * height + y) * _U(width)
                for w in range(columns):
                    padded[left + w] += np.int64(flat_x[source + w])
            row = _U(oy * ow)
            if sw == 1:
                for q in range(_U(ow)):
                    totals[row + q] = padded[q]
                for j in range(_U(1), _U(kw)):
                    for q in range(_U(ow)):
                        totals[row + q] += padded[q + j]
            elif sw == 2:
                for q in range(_U(ow)):
                    totals[row + q] = padded[_U(2) * q]
                for j in range(_U(1), _U(kw)):
                    for q in range(_U(ow)):
                        totals[row + q] += padded[_U(2) * q + j]
            else:
                for q in range(_U(ow)):
                    totals[row + q] = padded[step * q]
                for j in range(_U(1), _U(kw)):
                    for q in range(_U(ow)):
                        totals[row + q] += padded[step * q + j]
        plane = _U(p) * size
        for t in range(size):
            total = totals[t] - zero_point * inside[t]
            smallest, largest = min(smallest, total), max(largest, total)
            flat_out[plane + t] = _rounded_quotient(total, divisors[t], inverses[t], rounding) + zero_point
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
        out[p] = _rounded_quotient(total, np.int64(size), 1.0 / size, rounding) + zero_point
    return smallest, largest
