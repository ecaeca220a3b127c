"""Binarisations of 10.4.3.4: FL, U, TU, EGk and UEGk, decoding and encoding.

Each function works bin by bin through a callback that receives the bin index ``binIdx`` (counted
from 0 over the whole bin string of one element, prefix and suffix alike), so that the caller maps it
to a context (Table 337's ctxIdxInc) or to bypass. ``read_bin(bin_idx) -> bin`` decodes one bin,
``write_bin(bin_idx, bin)`` encodes one.

Decisions (docs/codec-engine.md):
* FL is MSB first (A22; 10.4.3.4.2 does not say).
* UEGk uses ``leadingOneBits < cMax`` where the text prints ``<=`` (A19; 10.4.3.4.6): with
  ``<=`` and k > 0 the values cMax+1 .. cMax+2**k-1 cannot be coded. For k = 0 both readings give the
  same bins. The exponent is leadingOneBits where the text prints leadingZeroBits (10.4.3.4.5, 10.4.3.4.6).
* Every decoder loop is bounded by the largest legal value: a corrupt stream raises CodecError
  instead of reading a unary prefix forever.
"""
from __future__ import annotations

import operator
from collections.abc import Callable

from ..errors import CodecError

ReadBin = Callable[[int], int]
WriteBin = Callable[[int, int], None]

MAX_FL_LENGTH = 32                 # the widest FL element (sublayer_cmaxw, Table 338)
MAX_EG_VALUE = (1 << 32) - 1       # largest EGk / UEGk value accepted: every coded magnitude is < 2**32


def _check_value(value: int, low: int, high: int, what: str) -> int:
    """``value`` as a Python int (numpy integers accepted) if it lies in low..high."""
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if number is None or not low <= number <= high:
        raise ValueError(f"{what} must be an integer in {low}..{high}, got {value!r}")
    return number


# --- FL (10.4.3.4.2) ----------------------------------------------------------------------------
def decode_fl(read_bin: ReadBin, length: int) -> int:
    """``length`` bins as an unsigned integer, bin 0 = MSB."""
    _check_value(length, 0, MAX_FL_LENGTH, "FL length")
    value = 0
    for bin_idx in range(length):
        value = (value << 1) | read_bin(bin_idx)
    return value


def encode_fl(write_bin: WriteBin, value: int, length: int) -> None:
    _check_value(length, 0, MAX_FL_LENGTH, "FL length")
    value = _check_value(value, 0, (1 << length) - 1, f"FL{length} value")
    for bin_idx in range(length):
        write_bin(bin_idx, (value >> (length - 1 - bin_idx)) & 1)


# --- U (10.4.3.4.3, Table 339) and TU (10.4.3.4.4, Table 340) -----------------------------------
def decode_u(read_bin: ReadBin, max_value: int) -> int:
    """Unary: ``value`` ones then a zero. More than ``max_value`` ones is a corrupt stream."""
    value = 0
    while read_bin(value):
        value += 1
        if value > max_value:
            raise CodecError(f"unary value exceeds its maximum {max_value}")
    return value


def encode_u(write_bin: WriteBin, value: int, max_value: int) -> None:
    value = _check_value(value, 0, max_value, "unary value")
    for bin_idx in range(value):
        write_bin(bin_idx, 1)
    write_bin(value, 0)


def decode_tu(read_bin: ReadBin, c_max: int) -> int:
    """Truncated unary: as U, but cMax is cMax ones without the terminating zero."""
    value = 0
    while value < c_max and read_bin(value):
        value += 1
    return value


def encode_tu(write_bin: WriteBin, value: int, c_max: int) -> None:
    value = _check_value(value, 0, c_max, "truncated-unary value")
    for bin_idx in range(value):
        write_bin(bin_idx, 1)
    if value < c_max:
        write_bin(value, 0)


# --- EGk (10.4.3.4.5, Table 341) -------------------------------------------------------------------
def max_leading_ones(k: int, max_value: int) -> int:
    """Largest EGk prefix (ones before the '0') that a value <= max_value can have."""
    # an EGk value v has prefix L with 2**(L+k) - 2**k <= v < 2**(L+k+1) - 2**k
    return (max_value + (1 << k)).bit_length() - 1 - k


def decode_egk(read_bin: ReadBin, k: int, *, max_value: int = MAX_EG_VALUE, first_bin_idx: int = 0) -> int:
    """k-th order Exp-Golomb: L ones, a zero, then L + k suffix bins (MSB first)."""
    max_ones = max_leading_ones(k, max_value)
    bin_idx = first_bin_idx
    ones = 0
    while read_bin(bin_idx):
        bin_idx += 1
        ones += 1
        if ones > max_ones:
            raise CodecError(f"Exp-Golomb prefix longer than any value <= {max_value} needs")
    bin_idx += 1
    suffix = 0
    for _ in range(ones + k):
        suffix = (suffix << 1) | read_bin(bin_idx)
        bin_idx += 1
    value = (1 << (ones + k)) - (1 << k) + suffix
    if value > max_value:
        raise CodecError(f"Exp-Golomb value {value} exceeds its maximum {max_value}")
    return value


def encode_egk(write_bin: WriteBin, value: int, k: int, *, max_value: int = MAX_EG_VALUE,
               first_bin_idx: int = 0) -> None:
    value = _check_value(value, 0, max_value, f"EG{k} value")
    ones = max_leading_ones(k, value)
    bin_idx = first_bin_idx
    for _ in range(ones):
        write_bin(bin_idx, 1)
        bin_idx += 1
    write_bin(bin_idx, 0)
    bin_idx += 1
    suffix = value - ((1 << (ones + k)) - (1 << k))
    for shift in range(ones + k - 1, -1, -1):
        write_bin(bin_idx, (suffix >> shift) & 1)
        bin_idx += 1


# --- UEGk (10.4.3.4.6) -------------------------------------------------------------------------------
def decode_uegk(read_bin: ReadBin, c_max: int, k: int, *, max_value: int = MAX_EG_VALUE) -> int:
    """Unary prefix up to cMax, then EGk of value - cMax; the ones of both prefixes form one run."""
    if max_value < c_max:
        raise ValueError(f"max_value {max_value} is below cMax {c_max}")
    ones = 0
    while ones < c_max:
        if not read_bin(ones):
            return ones                         # leadingOneBits < cMax
        ones += 1
    return c_max + decode_egk(read_bin, k, max_value=max_value - c_max, first_bin_idx=c_max)


def encode_uegk(write_bin: WriteBin, value: int, c_max: int, k: int, *, max_value: int = MAX_EG_VALUE) -> None:
    value = _check_value(value, 0, max_value, f"UEG{k} (cMax {c_max}) value")
    for bin_idx in range(min(value, c_max)):
        write_bin(bin_idx, 1)
    if value < c_max:
        write_bin(value, 0)
    else:
        encode_egk(write_bin, value - c_max, k, max_value=max_value - c_max, first_bin_idx=c_max)
