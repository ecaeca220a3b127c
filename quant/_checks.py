"""Argument checks shared by the methods: each raises ValueError naming the parameter, its value and what is
allowed."""
from __future__ import annotations

import numbers

import numpy as np

from aipu.sim.machine.arch import bit_range
from aipu.sim.golden.rounding import round_half_away

MAX_BITS = 32       # codes are formed in int64; 32 bits leaves room for the requantizers' products


def check_bits(name: str, bits, lo: int = 1, hi: int = MAX_BITS) -> int:
    if isinstance(bits, (bool, np.bool_)) or not isinstance(bits, numbers.Integral) or not lo <= bits <= hi:
        raise ValueError(f"{name}={bits!r} must be an integer in [{lo}, {hi}]")
    return int(bits)


def check_finite(name: str, values) -> np.ndarray:
    """``values`` as a float64 array of finite numbers."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an array of real numbers, got {type(values).__name__}") from exc
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} holds {arr[~np.isfinite(arr)].flat[0]!r}: every value must be finite")
    return arr


def check_positive(name: str, values) -> np.ndarray:
    """``values`` as a float64 array of finite numbers > 0 (scales, steps, bounds)."""
    arr = check_finite(name, values)
    if np.any(arr <= 0):
        raise ValueError(f"{name}={float(arr[arr <= 0].flat[0])!r} must be finite and > 0")
    return arr


def check_choice(name: str, value, allowed):
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not one of {tuple(allowed)}")
    return value


def check_count(name: str, values, count: int) -> None:
    if len(values) != count:
        raise ValueError(f"{name} has {len(values)} entries, expected {count} (one per unit)")


def check_codes(name: str, codes, lo: int, hi: int) -> np.ndarray:
    """Integer codes within [lo, hi] as int64."""
    arr = np.asarray(codes)
    if not (np.issubdtype(arr.dtype, np.integer) or (arr.dtype.kind == "f" and np.all(arr == np.round(arr)))):
        raise ValueError(f"{name} must hold integers, got dtype {arr.dtype.name}")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < lo or arr.max() > hi):
        raise ValueError(f"{name} holds {int(arr[(arr < lo) | (arr > hi)].flat[0])}, outside [{lo}, {hi}]")
    return arr


def code_range(bits: int, signed: bool) -> tuple[int, int]:
    """[-2**(bits-1), 2**(bits-1) - 1] when signed, else [0, 2**bits - 1]."""
    return bit_range(check_bits("bits", bits), signed)


def round_clip(values: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """clip(round_half_away(values), lo, hi) as int64. Clipping first is the same for integer bounds (rounding
    is monotone and keeps integers) and keeps huge values out of the int64 conversion."""
    return round_half_away(np.clip(values, lo, hi))
