"""LOAD's block-circulant expansion (sim/golden/circulant.py) against the standard's decompression as
aipu.compress.circulant writes it (T/AI 115.1-2021 §8.4.2.1, §8.4.2.3)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.compress import circulant
from aipu.sim.golden.circulant import expand_circulant_rows, sign_bits


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**31))
def test_expansion_is_the_standards_decompression_with_signs(size, block_rows, taps, groups, seed):
    rng = np.random.default_rng(seed)
    channels = size * groups
    rows = rng.integers(-127, 128, (block_rows, taps, channels)).astype(np.int8)
    signs = np.where(rng.random(channels) < 0.5, -1, 1)
    packed = np.packbits(signs < 0, bitorder="little")
    tile = expand_circulant_rows(rows, size, sign_bits(packed, channels))
    # the standard's weight is (outputs, inputs, taps): rows as [block row][channel][tap]
    dense = circulant.signed_weight(circulant.decompress_w_circ_to_weight(rows.transpose(0, 2, 1), size), signs)
    np.testing.assert_array_equal(tile, dense.transpose(0, 2, 1))


def test_row_k_is_the_first_rotated_right_by_k():
    rows = np.arange(8, dtype=np.int8).reshape(1, 1, 8)
    tile = expand_circulant_rows(rows, 4, np.zeros(8, bool))
    assert tile[:, 0].tolist() == [[0, 1, 2, 3, 4, 5, 6, 7], [3, 0, 1, 2, 7, 4, 5, 6], [2, 3, 0, 1, 6, 7, 4, 5],
                                   [1, 2, 3, 0, 5, 6, 7, 4]]


def test_negation_is_eight_bit():
    rows = np.array([[[-128, 127]]], np.int8)
    tile = expand_circulant_rows(rows, 1, np.array([True, True]))
    assert tile.tolist() == [[[-128, -127]]]


@pytest.mark.parametrize("size, run", [(3, 6), (4, 6)])
def test_bad_sizes_are_refused(size, run):
    with pytest.raises(ValueError):
        expand_circulant_rows(np.zeros((1, 1, run), np.int8), size, np.zeros(run, bool))
