"""numba kernels of the LUT unit: the fast path of sim/golden/lut.py.

numpy's fancy indexing and lut16's chain of int64 temporaries cost more than one table read per value, which
is what these loops do. x86 has no fast byte gather, so a lookup stays a scalar load: lut8
halves the loads by looking up two bytes at once in a table of all 65536 byte pairs, and lut16 evaluates its
interpolation once per int16 value into a table and then looks inputs up in it.
tests/sim/golden/test_lut_kernels.py checks both against the definitions in sim/golden/lut.py.
"""
from __future__ import annotations

import numba
import numpy as np

_U = np.uint64
PAIRS_MIN_SIZE = 1 << 17   # below this many bytes, building the 65536 pairs costs more than it saves


@numba.njit(cache=True, nogil=True)
def lookup(x, table, out):
    """out[i] = table[x[i]] for flat uint8 ``x``."""
    for i in range(_U(x.size)):
        out[i] = table[x[i]]


@numba.njit(cache=True, nogil=True)
def lookup_pairs(x, table, out):
    """:func:`lookup` for a one-byte ``table``, two bytes per read: ``pairs[(h << 8) | l] = (table[h] << 8) |
    table[l]`` maps each byte of a 16-bit word through the table in place, whatever the byte order."""
    codes = table.view(np.uint8)
    pairs = np.empty(1 << 16, np.uint16)
    for high in range(256):
        upper = np.uint16(codes[high]) << np.uint16(8)
        row = _U(high) << _U(8)
        for low in range(_U(256)):
            pairs[row + low] = upper | np.uint16(codes[low])
    words = x.size // 2
    x_words, out_words = x[:2 * words].view(np.uint16), out[:2 * words].view(np.uint16)
    for i in range(_U(words)):
        out_words[i] = pairs[x_words[i]]
    if x.size % 2:
        out[x.size - 1] = table[x[x.size - 1]]


@numba.njit(cache=True, nogil=True)
def interpolated_table(table, index_shift, input_min, qmin, qmax, out):
    """``out[v + 32768]`` = lut16 of the int16 value v clamped to [qmin, qmax], for all 65536 values.

    u = clamp(v - input_min, 0, 2**(k + f)) walks the table's segments in order, so each segment is a run of
    2**f inputs with one base and one step: a loop without gathers, which vectorises. Inputs below the
    covered range read entry 0, inputs at or above its end the last entry (docs/arithmetic.md §6.2).
    """
    last = table.shape[0] - 1
    run = 1 << index_shift
    half = np.int64(run >> 1)                      # rounding half up; 0 when f = 0 (no fraction bits)
    shift = np.int64(index_shift)
    start = input_min + 32768                      # where v = input_min lands in ``out``
    out[:start] = min(max(np.int64(table[0]), qmin), qmax)
    for segment in range(last):
        if start >= 65536:
            break
        base = np.int64(table[segment])
        step = np.int64(table[segment + 1]) - base
        values = out[start:min(start + run, 65536)]
        for fraction in range(_U(values.size)):
            values[fraction] = min(max(base + ((step * np.int64(fraction) + half) >> shift), qmin), qmax)
        start += run
    out[min(start, 65536):] = min(max(np.int64(table[last]), qmin), qmax)


@numba.njit(cache=True, nogil=True)
def lookup_int16(x, outputs, low, high, out, count):
    """out[i] = outputs[x[i] + 32768] for flat int16 ``x``; with ``count``, how many x lie outside [low, high]
    (a loop of its own, which vectorises)."""
    for i in range(_U(x.size)):
        out[i] = outputs[_U(np.int64(x[i]) + 32768)]
    outside = 0
    if count:
        for i in range(_U(x.size)):
            outside += (x[i] < low) | (x[i] > high)
    return outside
