"""The one place where integers are rounded (docs/arithmetic.md §2).

Every unit that drops fraction bits calls :func:`rounding_shift_right` (division by 2**n, the
hardware form) or :func:`rounding_divide` (exact division by an arbitrary positive integer, used
by average pooling); both resolve ties with the same :func:`_round_floor_quotient` so the modes
mean the same thing everywhere. :func:`round_half_away` is the offline float -> int rounding used
by the compiler helpers; it never runs on the NPU.
"""
from __future__ import annotations

import numpy as np

ROUNDING_MODES = ("floor", "half_up", "half_to_even", "half_away_from_zero")


def check_rounding(mode: str) -> str:
    if mode not in ROUNDING_MODES:
        raise ValueError(f"rounding={mode!r} is not one of {ROUNDING_MODES}")
    return mode


def _round_floor_quotient(quotient: np.ndarray, remainder_vs_half: np.ndarray, negative: np.ndarray,
                          mode: str) -> np.ndarray:
    """Round a floor quotient up by one where ``mode`` says so.

    ``quotient`` is floor(x / d); ``remainder_vs_half`` is sign(2r - d) with r = x - d*quotient
    in [0, d): -1 below the half, 0 exactly on the half (a tie), +1 above it.
    ``negative`` marks x < 0 (only half_away_from_zero looks at it).
    """
    if mode == "floor":
        return quotient
    above = remainder_vs_half > 0
    tie = remainder_vs_half == 0
    if mode == "half_up":
        round_up = above | tie
    elif mode == "half_to_even":
        round_up = above | (tie & ((quotient & 1) == 1))
    else:  # half_away_from_zero: a tie goes up for x > 0 and stays at the floor for x < 0
        round_up = above | (tie & ~negative)
    return quotient + round_up.astype(quotient.dtype)


def rounding_shift_right(x, n, mode: str = "half_up") -> np.ndarray:
    """round(x / 2**n) in ``mode``, for int64 ``x`` and 0 <= n <= 62 (scalar or broadcastable array).

    Hardware form: q = x >> n (arithmetic), r = x & (2**n - 1), compare r with 2**(n-1).
    n = 0 returns x unchanged in every mode.
    """
    check_rounding(mode)
    x = np.asarray(x)
    if x.dtype != np.int64:
        raise TypeError(f"rounding_shift_right: x must be int64, got {x.dtype.name}")
    n = np.asarray(n)
    if n.dtype == np.bool_ or not np.issubdtype(n.dtype, np.integer):
        raise TypeError(f"rounding_shift_right: shift must be integer, got dtype {n.dtype.name}")
    n = n.astype(np.int64)
    if n.size and (n.min() < 0 or n.max() > 62):
        raise ValueError(f"shift={int(n[(n < 0) | (n > 62)].flat[0])} is outside [0, 62]")
    quotient = x >> n
    if mode == "floor":
        return quotient
    remainder = x - (quotient << n)
    half = np.where(n > 0, np.left_shift(np.int64(1), np.maximum(n - 1, 0)), 1)
    # n == 0: remainder is 0 and "half" is 1, so sign(r - half) = -1: no rounding.
    remainder_vs_half = np.sign(remainder - half)
    return _round_floor_quotient(quotient, remainder_vs_half, x < 0, mode)


def rounding_divide(x, divisor, mode: str = "half_up") -> np.ndarray:
    """round(x / divisor) in ``mode``, exactly, for int64 ``x`` and positive integer ``divisor``."""
    check_rounding(mode)
    x = np.asarray(x)
    if x.dtype != np.int64:
        raise TypeError(f"rounding_divide: x must be int64, got {x.dtype.name}")
    divisor = np.asarray(divisor, dtype=np.int64)
    if divisor.size and divisor.min() <= 0:
        raise ValueError(f"divisor={int(divisor.min())} must be positive")
    quotient = np.floor_divide(x, divisor)
    remainder = x - quotient * divisor
    return _round_floor_quotient(quotient, np.sign(2 * remainder - divisor), x < 0, mode)


def round_half_away(values) -> np.ndarray:
    """Offline float -> int rounding of the compiler helpers: ties away from zero, exactly.

    Implements "四舍五入" of the shift-quantization patent's formulas (1)-(2). floor(|v| + 0.5) is wrong for
    0.49999999999999994 (the addition rounds up), so the fraction is compared instead;
    |v| - floor(|v|) is exact in binary floating point.
    """
    v = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        raise ValueError("round_half_away: values must be finite")
    magnitude = np.abs(v)
    whole = np.floor(magnitude)
    rounded = whole + (magnitude - whole >= 0.5)
    return (np.sign(v) * rounded).astype(np.int64)
