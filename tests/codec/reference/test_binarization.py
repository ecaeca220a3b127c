"""The binarisations of 10.4.3.4 (codec/reference/binarization.py): FL, U, TU, EGk, UEGk."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.codec.errors import CodecError
from aipu.codec.reference import binarization as bz
from aipu.codec.reference.elements import ELEMENTS


class BinString:
    """A bin string with the binIdx of every access, standing in for the engine."""

    def __init__(self, bins=()):
        self.bins = list(bins)
        self.indices: list[int] = []
        self.cursor = 0

    def write(self, bin_idx: int, bin_val: int) -> None:
        self.indices.append(bin_idx)
        self.bins.append(bin_val)

    def read(self, bin_idx: int) -> int:
        self.indices.append(bin_idx)
        if self.cursor >= len(self.bins):
            raise CodecError("bin string exhausted")
        self.cursor += 1
        return self.bins[self.cursor - 1]


def bins_of(encode, *args, **kwargs) -> list[int]:
    string = BinString()
    encode(string.write, *args, **kwargs)
    assert string.indices == list(range(len(string.bins))), "binIdx must count every bin from 0"
    return string.bins


def decoded(decode, bins, *args, **kwargs):
    string = BinString(bins)
    value = decode(string.read, *args, **kwargs)
    assert string.cursor == len(bins), "the decoder must consume exactly the bin string"
    assert string.indices == list(range(len(bins)))
    return value


def parse(text: str) -> list[int]:
    return [int(c) for c in text if c in "01"]


@pytest.mark.parametrize("length", range(1, 33))
def test_fl_every_width(length):
    top = (1 << length) - 1
    rng = random.Random(length)
    for value in {0, 1, top, top >> 1, (top >> 1) + 1, rng.randint(0, top)}:
        bins = bins_of(bz.encode_fl, value, length)
        assert bins == [int(c) for c in format(value, f"0{length}b")]          # MSB first (A22)
        assert decoded(bz.decode_fl, bins, length) == value
    with pytest.raises(ValueError):
        bins_of(bz.encode_fl, top + 1, length)
    with pytest.raises(ValueError):
        bins_of(bz.encode_fl, -1, length)


def test_fl_length_limits():
    assert bins_of(bz.encode_fl, 0, 0) == [] and decoded(bz.decode_fl, [], 0) == 0
    with pytest.raises(ValueError):
        bz.decode_fl(BinString().read, 33)


def test_unary_table_339():
    for value, text in enumerate(["0", "10", "110", "1110", "11110", "111110"]):
        assert bins_of(bz.encode_u, value, 10) == parse(text)
        assert decoded(bz.decode_u, parse(text), 10) == value


def test_unary_cap():
    assert decoded(bz.decode_u, [1] * 31 + [0], 31) == 31
    with pytest.raises(CodecError, match="maximum 31"):
        bz.decode_u(BinString([1] * 40).read, 31)
    with pytest.raises(ValueError):
        bins_of(bz.encode_u, 32, 31)


def test_truncated_unary_table_340():
    c_max = 6
    for value in range(c_max + 1):
        expected = [1] * value + ([0] if value < c_max else [])
        assert bins_of(bz.encode_tu, value, c_max) == expected
        assert decoded(bz.decode_tu, expected, c_max) == value


TABLE_341 = {
    0: [("0", 0, 0), ("10x", 1, 2), ("110xx", 3, 6), ("1110xxx", 7, 14)],
    1: [("0x", 0, 1), ("10xx", 2, 5), ("110xxx", 6, 13), ("1110xxxx", 14, 29)],
    2: [("0xx", 0, 3), ("10xxx", 4, 11), ("110xxxx", 12, 27), ("1110xxxxx", 28, 59)],
    3: [("0xxx", 0, 7), ("10xxxx", 8, 23), ("110xxxxx", 24, 55), ("1110xxxxxx", 56, 119)],
}


@pytest.mark.parametrize("k", sorted(TABLE_341))
def test_egk_table_341(k):
    for pattern, low, high in TABLE_341[k]:
        prefix = pattern.rstrip("x")
        suffix_len = len(pattern) - len(prefix)
        for value in range(low, high + 1):
            expected = parse(prefix) + [int(c) for c in format(value - low, f"0{suffix_len}b")] * (suffix_len > 0)
            assert bins_of(bz.encode_egk, value, k) == expected
            assert decoded(bz.decode_egk, expected, k) == value


UEGK_PARAMS = sorted({(spec.c_max, spec.k) for spec in ELEMENTS.values() if spec.binarization == "UEGk"})


def test_uegk_parameters_of_table_338():
    assert UEGK_PARAMS == [(0, 5), (0, 8), (6, 0), (8, 8), (16, 0), (16, 4)]


@pytest.mark.parametrize("c_max,k", UEGK_PARAMS)
def test_uegk_boundaries(c_max, k):
    """Every value around cMax and the EGk class boundaries, with the '<' reading (A19)."""
    edges = {0, 1, c_max - 1, c_max, c_max + 1, c_max + (1 << k) - 1, c_max + (1 << k), bz.MAX_EG_VALUE,
             bz.MAX_EG_VALUE - 1}
    for order in range(33):
        start = c_max + (1 << (order + k)) - (1 << k)
        edges |= {start - 1, start, start + 1}
    for value in sorted(v for v in edges if 0 <= v <= bz.MAX_EG_VALUE):
        bins = bins_of(bz.encode_uegk, value, c_max, k)
        assert decoded(bz.decode_uegk, bins, c_max, k) == value
        ones = next(i for i, b in enumerate(bins + [0]) if b == 0)
        if value < c_max:
            assert bins == [1] * value + [0]
        else:   # one merged run: cMax + L ones, a zero, L + k suffix bins
            assert len(bins) == 2 * (ones - c_max) + 1 + k + c_max


@pytest.mark.parametrize("c_max,k", UEGK_PARAMS)
def test_uegk_every_small_value(c_max, k):
    previous_length = 0
    for value in range(3000):
        bins = bins_of(bz.encode_uegk, value, c_max, k)
        assert decoded(bz.decode_uegk, bins, c_max, k) == value
        assert len(bins) >= previous_length           # lengths never shrink with the value
        previous_length = len(bins)


def test_uegk_values_the_printed_test_cannot_code():
    # With the printed 'leadingOneBits <= cMax', tgtm_delta_index (cMax 0, k 5) codes 0 then 32..;
    # with '<' the values 1..31 are 0 + 5 suffix bins.
    for value in range(1, 32):
        assert bins_of(bz.encode_uegk, value, 0, 5) == [0] + [int(c) for c in format(value, "05b")]


@pytest.mark.parametrize("c_max,k", UEGK_PARAMS)
def test_uegk_corrupt_prefix_raises(c_max, k):
    with pytest.raises(CodecError, match="prefix"):
        bz.decode_uegk(BinString([1] * 200).read, c_max, k)
    # the longest legal prefix with an all-ones suffix: above 2**32 - 1 it must raise
    eg_ones = bz.max_leading_ones(k, bz.MAX_EG_VALUE - c_max)
    bins = [1] * (c_max + eg_ones) + [0] + [1] * (eg_ones + k)
    largest = c_max + (1 << (eg_ones + k + 1)) - (1 << k) - 1
    if largest > bz.MAX_EG_VALUE:
        with pytest.raises(CodecError, match="exceeds"):
            bz.decode_uegk(BinString(bins).read, c_max, k)
    else:
        assert decoded(bz.decode_uegk, bins, c_max, k) == largest == bz.MAX_EG_VALUE
    with pytest.raises(CodecError, match="prefix"):
        bz.decode_uegk(BinString([1] * (c_max + eg_ones + 1)).read, c_max, k)
    with pytest.raises(ValueError):
        bins_of(bz.encode_uegk, bz.MAX_EG_VALUE + 1, c_max, k)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(UEGK_PARAMS), st.integers(0, bz.MAX_EG_VALUE))
def test_uegk_round_trip_hypothesis(params, value):
    c_max, k = params
    assert decoded(bz.decode_uegk, bins_of(bz.encode_uegk, value, c_max, k), c_max, k) == value
