"""Softmax (docs/arithmetic.md §6.4, D22): the golden model against exact integer arithmetic, its limits, and
its error against the real softmax of the dequantized input."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from aipu.sim import golden
from aipu.sim.golden.softmax import EXP_MAX
from aipu.sim.machine.arch import LUT8_ENTRIES, SOFTMAX_LENGTH_MAX


def _exact(x: np.ndarray, table: np.ndarray, multiplier: int, shift: int, zero_point: int, low: int,
           high: int) -> np.ndarray:
    """The contract in Python integers, element by element: q = floor(e·M / (S·2^N) + 1/2)."""
    out = np.empty(x.shape, np.int64)
    for r, row in enumerate(x.astype(int).tolist()):
        exps = [int(table[max(row) - v]) for v in row]
        divisor = sum(exps) << shift
        for j, e in enumerate(exps):
            out[r, j] = min(max((2 * e * multiplier + divisor) // (2 * divisor) + zero_point, low), high)
    return out


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_softmax_is_one_rounded_division_per_element(data):
    dtype = data.draw(st.sampled_from([np.int8, np.uint8]))
    rows, length = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 40))
    x = data.draw(arrays(dtype, (rows, length)))
    table = data.draw(arrays(np.uint32, LUT8_ENTRIES, elements=st.integers(0, EXP_MAX)))
    table[0] = data.draw(st.integers(1, EXP_MAX))
    multiplier, shift = data.draw(st.integers(0, 65535)), data.draw(st.integers(0, 30))
    out_dtype = data.draw(st.sampled_from([np.uint8, np.int8, np.int16]))
    info = np.iinfo(out_dtype)
    zero_point = data.draw(st.integers(int(info.min), int(info.max)))
    got = golden.softmax(x, table, multiplier=multiplier, shift=shift, out_zero_point=zero_point, out_dtype=out_dtype)
    assert got.dtype == out_dtype
    np.testing.assert_array_equal(got, _exact(x, table, multiplier, shift, zero_point, int(info.min),
                                              int(info.max)))


def test_the_longest_row_of_equal_maxima_fills_the_sum_without_wrapping():
    x = np.zeros((1, SOFTMAX_LENGTH_MAX), np.int8)
    table = golden.build_softmax_table(0.05)
    # S = 4095 · 2^20 (< 2^32); with M / 2^N = 4095 every element is exactly 1, 0.75 of it is 1, 0.25 is 0
    for factor, want in ((1.0, 1), (0.75, 1), (0.25, 0)):
        got = golden.softmax(x, table, multiplier=int(4095 * 16 * factor), shift=4)
        assert np.all(got == want)


@pytest.mark.parametrize("scale", [0.02, 0.1, 0.25])
def test_error_against_the_real_softmax_is_half_a_step_plus_the_table(scale):
    """Per element |dequantized − softmax(real input)| ≤ 0.5 step + the table's and M/2^N's share."""
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (64, 100)).astype(np.int8)
    real = scale * x.astype(np.float64)
    want = np.exp(real - real.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    out_scale = 1 / 255
    multiplier, shift = golden.quantize_multiplier(1 / out_scale)
    got = golden.softmax(x, golden.build_softmax_table(scale), multiplier=int(multiplier), shift=int(shift))
    error = np.abs(got * out_scale - want) / out_scale
    assert error.max() <= 0.5 + 1e-3


def test_table_starts_at_two_to_the_twenty_and_falls():
    table = golden.build_softmax_table(0.1)
    assert table.dtype == np.uint32 and table[0] == EXP_MAX and np.all(np.diff(table.astype(np.int64)) <= 0)
    np.testing.assert_allclose(table, EXP_MAX * np.exp(-0.1 * np.arange(256)), atol=0.5)


@pytest.mark.parametrize("change, message", [
    (dict(x=np.zeros((1, SOFTMAX_LENGTH_MAX + 1), np.int8)), "at most 4095"),
    (dict(x=np.zeros((2, 2), np.int16)), "int8 or uint8"),
    (dict(table=np.full(LUT8_ENTRIES, EXP_MAX + 1, np.uint32)), "entries must lie in"),
    (dict(table=np.zeros(LUT8_ENTRIES, np.uint32)), "entry 0"),
    (dict(shift=31), "shift"),
    (dict(multiplier=1 << 16), "multiplier"),
])
def test_inputs_outside_the_contract_are_refused(change, message):
    arguments = {**dict(x=np.zeros((2, 3), np.int8), table=golden.build_softmax_table(0.1), multiplier=1, shift=0),
                 **change}
    with pytest.raises(ValueError, match=message):
        golden.softmax(arguments.pop("x"), arguments.pop("table"), **arguments)
