"""Softmax on the LUT unit (docs/arithmetic.md §6.4): row max, exp table, 32-bit sum, one rounded division.

Zhouyi whitepaper §4.66: e^x from a table whose largest entry is 2^20, summed in a 32-bit accumulator,
the numerator times M, an integer division rounded by the remainder, then the output zero point. Here the
table is indexed by ``max - x`` (the row's largest element reads entry 0 = 2^20, so the sum never depends on
where the inputs sit) and the output scale's shift is folded into the divisor, so the one division is the
only rounding: ``q = round_half_up(E · M / (S · 2^N))``.
"""
from __future__ import annotations

import numpy as np

from aipu.sim.golden._checks import check_int, dtype_range
from aipu.sim.golden.rounding import round_half_away
from aipu.sim.machine.arch import (LUT8_ENTRIES, MULTIPLIER_MAX, SOFTMAX_EXP_BITS, SOFTMAX_LENGTH_MAX,
                                   SOFTMAX_SHIFT_MAX)

EXP_MAX = 1 << SOFTMAX_EXP_BITS
_INPUT_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))


# The definition (docs/arithmetic.md §6.4)

def row_softmax(x: np.ndarray, table: np.ndarray, multiplier: int, shift: int, zero_point: int, qmin: int, qmax: int,
                dtype) -> np.ndarray:
    """Per row of x: m = max(row), e_j = E[m - x_j], S = sum of e_j, D = S * 2^N,
    q_j = (e_j * M + D // 2) // D, y_j = clamp(q_j + zp, qmin, qmax) in the output type."""
    values = x.astype(np.int64)
    exps = table.astype(np.int64)[values.max(axis=1, keepdims=True) - values]
    divisor = exps.sum(axis=1, keepdims=True) << shift                # < 2^32 · 2^30
    quotient = (exps * multiplier + divisor // 2) // divisor           # numerator < 2^37
    return np.clip(quotient + zero_point, qmin, qmax).astype(dtype)


# The public functions: the table builder; softmax checks its arguments and runs the definition (the unit has
# no fast path).

def build_softmax_table(in_scale: float) -> np.ndarray:
    """The exp table for inputs of scale ``in_scale``: entry d = round_half_away(2^20 · e^(−in_scale · d)) for
    d = max − x in 0..255, as uint32 (entry 0 is 2^20)."""
    if not np.isfinite(in_scale) or in_scale <= 0:
        raise ValueError(f"in_scale = {in_scale}: must be finite and positive")
    exponent = np.exp(-float(in_scale) * np.arange(LUT8_ENTRIES, dtype=np.float64))
    return round_half_away(EXP_MAX * exponent).astype(np.uint32)


def softmax(x: np.ndarray, table: np.ndarray, *, multiplier: int, shift: int, out_zero_point: int = 0,
            qmin: int | None = None, qmax: int | None = None, out_dtype=np.uint8) -> np.ndarray:
    """Softmax of each row of ``x`` ([rows, length] int8 or uint8; the last axis is the softmax axis).

    ``table``: 256 uint32 entries, each at most 2^20; entry d is read for an element d below its row's
    maximum. Per row, S = Σ E[max − x] (at most ``SOFTMAX_LENGTH_MAX`` · 2^20 < 2^32), D = S · 2^shift, and
    ``out = clamp((E · multiplier + D // 2) // D + out_zero_point, qmin, qmax)`` (qmin/qmax default to the
    output type's range)."""
    x = np.asarray(x)
    if x.dtype not in _INPUT_DTYPES or x.ndim != 2 or 0 in x.shape:
        raise ValueError(f"x: expected a non-empty [rows, length] int8 or uint8 array, got {x.dtype} {x.shape}")
    if x.shape[1] > SOFTMAX_LENGTH_MAX:
        raise ValueError(f"x: rows of {x.shape[1]} elements, at most {SOFTMAX_LENGTH_MAX} (the 32-bit sum)")
    table = np.asarray(table)
    if table.shape != (LUT8_ENTRIES,) or table.dtype.kind not in "iu":
        raise ValueError(f"table: expected {LUT8_ENTRIES} integer entries, got {table.dtype} {table.shape}")
    if table.min() < 0 or table.max() > EXP_MAX or table[0] == 0:
        raise ValueError(f"table: entries must lie in 0..2^{SOFTMAX_EXP_BITS} and entry 0 (the row maximum's) "
                         f"must be positive, got {int(table.min())}..{int(table.max())}, entry 0 = {int(table[0])}")
    check_int("multiplier", multiplier, 0, MULTIPLIER_MAX)
    check_int("shift", shift, 0, SOFTMAX_SHIFT_MAX)
    out_dtype = np.dtype(out_dtype)
    low, high = dtype_range(out_dtype)
    check_int("out_zero_point", out_zero_point, low, high)
    qmin = low if qmin is None else check_int("qmin", qmin, low, high)
    qmax = high if qmax is None else check_int("qmax", qmax, qmin, high)
    return row_softmax(x, table, multiplier, shift, out_zero_point, qmin, qmax, out_dtype)
