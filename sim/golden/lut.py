"""The LUT unit: direct 8-bit tables and interpolated 16-bit tables, plus the offline table builders.

docs/arithmetic.md §6. Tables hold signed LUT_ENTRY_BITS entries.
* lut8: 256 entries indexed by the raw input byte (int8 -1 is index 255), so the address needs no adder
  and int8/uint8 share one path.
* lut16: an int16 input, a table of 2**k + 1 entries covering [input_min, input_min + 2**(k + f)];
  u = x - input_min, index u >> f, linear interpolation on the f low bits rounded half up; inputs
  outside the covered range use the end entries (and are counted).
The module opens with the definitions of both lookups in int64 numpy; :func:`lut8` and :func:`lut16` check
their arguments and run the kernels of aipu.sim.golden.fast.lut, which tests/sim/golden/test_lut_kernels.py
checks against the definitions.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from aipu.sim.machine.arch import (LUT16_INDEX_BITS_MAX, LUT16_INDEX_BITS_MIN, LUT16_INPUT_BITS, LUT8_ENTRIES,
                                LUT_ENTRY_DTYPE, bit_range, storage_dtype)
from aipu.sim.golden.fast import kernels
from aipu.sim.golden._checks import (BYTE_DTYPES, QUANT_DTYPES, check_array, check_clamp, check_int, check_out_dtype,
                                     dtype_range)
from aipu.sim.golden.rounding import round_half_away, rounding_shift_right

_INPUT_DTYPE = storage_dtype(LUT16_INPUT_BITS, signed=True)          # lut16's input, int16
_INPUT_MIN, _INPUT_MAX = bit_range(LUT16_INPUT_BITS, signed=True)


# The definition (docs/arithmetic.md §6.1, §6.2)

def direct_lookup(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """out = T[x mod 256]: the raw byte of int8 or uint8 ``x`` is the address (int8 -1 reads entry 255)."""
    return table[x.view(np.uint8)]


def interpolated_lookup(x: np.ndarray, table: np.ndarray, index_shift: int, input_min: int, qmin: int, qmax: int,
                        dtype) -> tuple[np.ndarray, int]:
    """lut16 of int16 ``x`` in a table of 2**k + 1 entries with f = ``index_shift`` fraction bits, and how many
    inputs lie outside the covered range [input_min, input_min + 2**(k + f)]:
    u = clamp(x - input_min, 0, 2**(k + f)), i = u >> f, r = u & (2**f - 1),
    y = T[i] + rounding_shift_right((T[i+1] - T[i]) * r, f, half_up), out = clamp(y, qmin, qmax)."""
    k = (table.shape[0] - 1).bit_length() - 1
    top = 1 << (k + index_shift)
    position = x.astype(np.int64) - input_min
    outside = int(np.count_nonzero((position < 0) | (position > top)))
    u = np.clip(position, 0, top)
    i, r = u >> index_shift, u & ((1 << index_shift) - 1)
    entries = table.astype(np.int64)
    base = entries[i]
    step = entries[np.minimum(i + 1, 1 << k)] - base        # T[i+1] is not read where r = 0, i.e. i = 2**k
    y = base + rounding_shift_right(step * r, index_shift, "half_up")
    return np.clip(y, qmin, qmax).astype(dtype), outside


# The public functions: checks, then the kernels.

def lut8(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """table[raw byte of x] for int8/uint8 ``x``; output dtype = table dtype (int8, uint8 or int16)."""
    check_array("x", x, BYTE_DTYPES)
    check_array("table", table, QUANT_DTYPES)
    if table.shape != (LUT8_ENTRIES,):
        raise ValueError(f"table must have shape ({LUT8_ENTRIES},), got {table.shape}")
    module = kernels("lut")
    codes = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    out = np.empty(x.shape, table.dtype)
    kernel = module.lookup_pairs if table.itemsize == 1 and codes.size >= module.PAIRS_MIN_SIZE else module.lookup
    kernel(codes, table, out.reshape(-1))
    return out[()]      # a 0-d x gives a scalar, as indexing did


def _table_index_bits(table: np.ndarray) -> int:
    check_array("table", table, (LUT_ENTRY_DTYPE,))
    entries = table.shape[0] - 1 if table.ndim == 1 else 0
    k = entries.bit_length() - 1
    if table.ndim != 1 or entries < 1 or entries != 2 ** k or not LUT16_INDEX_BITS_MIN <= k <= LUT16_INDEX_BITS_MAX:
        raise ValueError(f"table must be 1-D with 2**k + 1 entries, k in [{LUT16_INDEX_BITS_MIN}, "
                         f"{LUT16_INDEX_BITS_MAX}], got shape {table.shape}")
    return k


def lut16(x: np.ndarray, table: np.ndarray, *, index_shift: int, input_min: int = _INPUT_MIN,
          out_dtype=np.int16, qmin=None, qmax=None, return_clipped: bool = False):
    """Interpolated lookup of int16 ``x`` in an int16 table of 2**k + 1 entries.

    u = clamp(x - input_min, 0, 2**(k + f)), i = u >> f, r = u & (2**f - 1),
    y = T[i] + round_half_up((T[i+1] - T[i]) * r / 2**f), then clamped to [qmin, qmax] of ``out_dtype``.
    ``return_clipped`` -> (out, number of inputs outside the table's range).
    """
    check_array("x", x, (_INPUT_DTYPE,))
    k = _table_index_bits(table)
    f = check_int("index_shift", index_shift, 0, LUT16_INPUT_BITS)
    input_min = check_int("input_min", input_min, _INPUT_MIN, _INPUT_MAX)
    dtype = check_out_dtype("out_dtype", out_dtype)
    lo, hi = dtype_range(dtype)
    qmin, qmax = check_clamp(lo if qmin is None else qmin, hi if qmax is None else qmax, dtype)
    module = kernels("lut")
    outputs = np.empty(1 << LUT16_INPUT_BITS, dtype)     # the result for every int16 input
    module.interpolated_table(table, f, input_min, qmin, qmax, outputs)
    out = np.empty(x.shape, dtype)
    clipped = module.lookup_int16(np.ascontiguousarray(x).reshape(-1), outputs, input_min, input_min + 2 ** (k + f),
                           out.reshape(-1), return_clipped)
    out = out[()]       # a 0-d x gives a scalar, as numpy's arithmetic did
    return (out, int(clipped)) if return_clipped else out


def _quantize_outputs(func: Callable, real_inputs: np.ndarray, out_scale: float, out_zero_point: int,
                      out_dtype) -> np.ndarray:
    if not (np.isfinite(out_scale) and out_scale > 0):
        raise ValueError(f"out_scale={out_scale!r} must be finite and positive")
    lo, hi = dtype_range(out_dtype)
    check_int("out_zero_point", out_zero_point, lo, hi)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # reported below instead
        real_outputs = np.asarray(func(real_inputs), dtype=np.float64)
    if real_outputs.shape != real_inputs.shape or not np.all(np.isfinite(real_outputs)):
        raise ValueError("func must map the sample array to finite values of the same shape")
    # the quotient bounded first: beyond int64 the conversion would wrap to its minimum, not saturate high
    q = round_half_away(np.clip(real_outputs / out_scale, -2.0 ** 40, 2.0 ** 40)) + out_zero_point
    return np.clip(q, lo, hi).astype(out_dtype)


def build_lut8(func: Callable, *, in_scale: float, in_zero_point: int, in_dtype, out_scale: float,
               out_zero_point: int, out_dtype) -> np.ndarray:
    """Table for :func:`lut8`: entry[byte] = quantize(func(in_scale * (value(byte) - in_zero_point))).

    func is evaluated in float64 on all 256 inputs; outputs round half away from zero and saturate.
    """
    in_dtype = check_out_dtype("in_dtype", in_dtype, BYTE_DTYPES)
    out_dtype = check_out_dtype("out_dtype", out_dtype)
    check_int("in_zero_point", in_zero_point, *dtype_range(in_dtype))
    if not (np.isfinite(in_scale) and in_scale > 0):
        raise ValueError(f"in_scale={in_scale!r} must be finite and positive")
    values = np.arange(LUT8_ENTRIES, dtype=np.uint8).view(in_dtype).astype(np.float64)
    return _quantize_outputs(func, (values - in_zero_point) * in_scale, out_scale, out_zero_point, out_dtype)


def build_lut16(func: Callable, *, in_scale: float, in_zero_point: int, out_scale: float, out_zero_point: int,
                index_bits: int = 9, index_shift: int | None = None, input_min: int = _INPUT_MIN,
                out_dtype=np.int16) -> np.ndarray:
    """Table for :func:`lut16`: 2**k + 1 samples at x_j = input_min + j * 2**f, j = 0 .. 2**k.

    Default f = LUT16_INPUT_BITS - k covers the whole int16 input range. Entries are quantized to
    ``out_dtype`` and stored as int16 (LUT_ENTRY_BITS).
    """
    k = check_int("index_bits", index_bits, LUT16_INDEX_BITS_MIN, LUT16_INDEX_BITS_MAX)
    f = check_int("index_shift", LUT16_INPUT_BITS - k if index_shift is None else index_shift, 0, LUT16_INPUT_BITS)
    input_min = check_int("input_min", input_min, _INPUT_MIN, _INPUT_MAX)
    check_int("in_zero_point", in_zero_point, _INPUT_MIN, _INPUT_MAX)
    out_dtype = check_out_dtype("out_dtype", out_dtype)
    if not (np.isfinite(in_scale) and in_scale > 0):
        raise ValueError(f"in_scale={in_scale!r} must be finite and positive")
    samples = input_min + np.arange(2 ** k + 1, dtype=np.float64) * 2.0 ** f
    table = _quantize_outputs(func, (samples - in_zero_point) * in_scale, out_scale, out_zero_point, out_dtype)
    return table.astype(LUT_ENTRY_DTYPE)
