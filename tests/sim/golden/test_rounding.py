"""Rounding: the four modes against exact rational arithmetic, plus hand-worked ties."""
from fractions import Fraction
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from aipu.sim.golden import ROUNDING_MODES, round_half_away, rounding_divide, rounding_shift_right


def exact_round(value: Fraction, mode: str) -> int:
    floor = math.floor(value)
    frac = value - floor
    if mode == "floor" or frac < Fraction(1, 2):
        return floor
    if frac > Fraction(1, 2):
        return floor + 1
    return {"half_up": floor + 1, "half_to_even": floor + (floor % 2), "half_away_from_zero":
            floor + 1 if value > 0 else floor}[mode]


@pytest.mark.parametrize("mode, expected", [
    # x / 4 for x = -10, -6, -5, -2, 2, 5, 6, 10: exact -2.5, -1.5, -1.25, -0.5, 0.5, 1.25, 1.5, 2.5
    ("floor", [-3, -2, -2, -1, 0, 1, 1, 2]),
    ("half_up", [-2, -1, -1, 0, 1, 1, 2, 3]),
    ("half_to_even", [-2, -2, -1, 0, 0, 1, 2, 2]),
    ("half_away_from_zero", [-3, -2, -1, -1, 1, 1, 2, 3]),
])
def test_shift_by_two_hand_vectors(mode, expected):
    x = np.array([-10, -6, -5, -2, 2, 5, 6, 10], dtype=np.int64)
    assert rounding_shift_right(x, 2, mode).tolist() == expected
    assert rounding_divide(x, 4, mode).tolist() == expected


def test_shift_zero_is_identity_in_every_mode():
    x = np.array([-7, -1, 0, 1, 7], dtype=np.int64)
    for mode in ROUNDING_MODES:
        assert rounding_shift_right(x, 0, mode).tolist() == x.tolist()


@settings(max_examples=300, deadline=None)
@given(st.integers(-2 ** 50, 2 ** 50), st.integers(0, 48), st.sampled_from(ROUNDING_MODES))
def test_shift_matches_fraction(x, n, mode):
    got = rounding_shift_right(np.array([x], dtype=np.int64), n, mode)[0]
    assert got == exact_round(Fraction(x, 2 ** n), mode)


@settings(max_examples=300, deadline=None)
@given(st.integers(-2 ** 40, 2 ** 40), st.integers(1, 10 ** 6), st.sampled_from(ROUNDING_MODES))
def test_divide_matches_fraction(x, d, mode):
    assert rounding_divide(np.array([x], dtype=np.int64), d, mode)[0] == exact_round(Fraction(x, d), mode)


def test_per_element_shift_broadcasts():
    x = np.array([[5, 5, 5]], dtype=np.int64)
    assert rounding_shift_right(x, np.array([0, 1, 2]), "half_up").tolist() == [[5, 3, 1]]


def test_round_half_away_offline():
    # 0.49999999999999994 is the largest double below 0.5: floor(x + 0.5) would wrongly give 1
    values = [2.5, -2.5, 0.5, -0.5, 1.4999, 0.49999999999999994, -127.5, 3.0]
    assert round_half_away(values).tolist() == [3, -3, 1, -1, 1, 0, -128, 3]


@pytest.mark.parametrize("call, error, match", [
    (lambda: rounding_shift_right(np.array([1]), 1, "nearest"), ValueError, "rounding='nearest'"),
    (lambda: rounding_shift_right(np.array([1], dtype=np.int32), 1), TypeError, "int64"),
    (lambda: rounding_shift_right(np.array([1], dtype=np.int64), 63), ValueError, "shift=63"),
    (lambda: rounding_shift_right(np.array([1], dtype=np.int64), -1), ValueError, "shift=-1"),
    (lambda: rounding_divide(np.array([1], dtype=np.int64), 0), ValueError, "divisor=0"),
    (lambda: round_half_away([float("nan")]), ValueError, "finite"),
])
def test_bad_rounding_inputs(call, error, match):
    with pytest.raises(error, match=match):
        call()
