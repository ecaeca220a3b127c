"""Pooling, elementwise and concat units: hand-worked vectors, exact references, bad input."""
from fractions import Fraction
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from aipu.sim.machine.arch import MULTIPLIER_BITS
from aipu.sim.golden import avg_pool2d, concat, eltwise, eltwise_params, global_avg_pool, max_pool2d
from aipu.sim.golden.eltwise import MAX_ALIGN

GRID = np.arange(16, dtype=np.int8).reshape(1, 1, 4, 4)   # rows 0..3, 4..7, 8..11, 12..15


def test_max_pool_hand_worked():
    assert max_pool2d(GRID, 2).tolist() == [[[[5, 7], [13, 15]]]]
    # padding is ignored even when all real values are negative
    neg = -GRID - 1
    assert max_pool2d(neg, 3, stride=3, padding=(1, 1, 1, 1)).tolist() == [[[[-1, -3], [-9, -11]]]]


def test_avg_pool_divisors_hand_worked():
    # 3x3, stride 1, padding 1 on the 0..15 grid, zp 0. Top-left window holds 0, 1, 4, 5 (sum 10):
    # exclude pad: 10 / 4 = 2.5 -> half_up 3; include pad: 10 / 9 = 1.11 -> 1
    # centre (1,1) window: 0+1+2+4+5+6+8+9+10 = 45, /9 = 5 either way.
    excl = avg_pool2d(GRID, 3, stride=1, padding=(1, 1, 1, 1))
    incl = avg_pool2d(GRID, 3, stride=1, padding=(1, 1, 1, 1), count_include_pad=True)
    assert excl[0, 0, 0, 0] == 3 and incl[0, 0, 0, 0] == 1 and excl[0, 0, 1, 1] == incl[0, 0, 1, 1] == 5
    # zero point 10: padded taps are real zeros = stored 10. Top-left: (0-10)+(1-10)+(4-10)+(5-10) = -30
    # include pad: -30 / 9 = -3.33 -> -3 -> +10 = 7; exclude: -30 / 4 = -7.5 -> half_up -7 -> 3,
    # half_to_even -8 -> 2, half_away -8 -> 2, floor -8 -> 2
    assert avg_pool2d(GRID, 3, stride=1, padding=(1, 1, 1, 1), count_include_pad=True, x_zero_point=10)[0, 0, 0, 0] == 7
    for mode, expected in [("half_up", 3), ("half_to_even", 2), ("half_away_from_zero", 2), ("floor", 2)]:
        got = avg_pool2d(GRID, 3, stride=1, padding=(1, 1, 1, 1), x_zero_point=10, rounding=mode)
        assert got[0, 0, 0, 0] == expected, mode


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 3), st.integers(1, 3), st.booleans(),
       st.sampled_from(["floor", "half_up", "half_to_even", "half_away_from_zero"]))
def test_avg_pool_matches_fractions(seed, k, s, include, mode):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (1, 2, 5, 6), dtype=np.uint8)
    zp, pad = int(rng.integers(0, 256)), min(k - 1, 1)
    got = avg_pool2d(x, k, stride=s, padding=(pad,) * 4, count_include_pad=include, x_zero_point=zp, rounding=mode)
    for c in range(2):
        for oy in range(got.shape[2]):
            for ox in range(got.shape[3]):
                taps = [(oy * s + i - pad, ox * s + j - pad) for i in range(k) for j in range(k)]
                inside = [(y, xx) for y, xx in taps if 0 <= y < 5 and 0 <= xx < 6]
                total = sum(int(x[0, c, y, xx]) - zp for y, xx in inside)
                mean = Fraction(total, len(taps) if include else len(inside))
                floor = math.floor(mean)
                frac = mean - floor
                up = frac > Fraction(1, 2) or (frac == Fraction(1, 2) and {
                    "floor": False, "half_up": True, "half_to_even": floor % 2 == 1,
                    "half_away_from_zero": mean > 0}[mode])
                expected = (floor if mode == "floor" else floor + up) + zp
                assert got[0, c, oy, ox] == expected


def test_global_avg_pool_hand_worked():
    # sum 0..15 = 120, /16 = 7.5 -> half_up 8, half_to_even 8, floor 7; int16 input works too
    assert global_avg_pool(GRID).tolist() == [[[[8]]]]
    assert global_avg_pool(GRID, rounding="floor").item() == 7
    assert global_avg_pool(GRID.astype(np.int16) * 1000, rounding="half_to_even").item() == 7500


def test_eltwise_add_sub_hand_worked():
    # a - za = [10, -20] - 0, b - zb = [5, 5] - (-3) = [8, 8]; M = (3, 5), N = (2, 4): N = 4,
    # t_a = d_a * 3 * 2**2 = [120, -240], t_b = d_b * 5 = [40, 40]
    # add: [160, -200] / 16 = [10, -12.5] -> half_up [10, -12]; sub: [80, -280] / 16 = [5, -17.5] -> [5, -17]
    a, b = np.array([10, -20], np.int8), np.array([5, 5], np.int8)
    kw = dict(multiplier=(3, 5), shift=(2, 4), b_zero_point=-3)
    assert eltwise(a, b, "add", **kw).tolist() == [10, -12]
    assert eltwise(a, b, "sub", **kw).tolist() == [5, -17]
    assert eltwise(a, b, "max", **kw).tolist() == [8, 3]      # max(120, 40)/16 = 7.5 -> 8; 40/16 = 2.5 -> 3
    assert eltwise(a, b, "min", **kw).tolist() == [3, -15]    # 40/16 -> 3; -240/16 = -15


def test_eltwise_mul_and_broadcast():
    # (a - 1) * (b - 0) * 7 / 2**3 with a = [[3], [-5]], b = [2, -3]: d = [[2], [-6]] x [2, -3]
    # = [[4, -6], [-12, 18]] * 7 = [[28, -42], [-84, 126]] / 8 = [[3.5, -5.25], [-10.5, 15.75]]
    # -> half_up [[4, -5], [-10, 16]], then + zp 2, uint8 clamp [0, 255] -> [[6, 0], [0, 18]]
    a = np.array([[3], [-5]], np.int8)
    b = np.array([2, -3], np.int8)
    out, saturated = eltwise(a, b, "mul", multiplier=7, shift=3, a_zero_point=1, out_zero_point=2,
                             out_dtype=np.uint8, return_saturated=True)
    assert out.tolist() == [[6, 0], [0, 18]] and saturated == 2


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.floats(1e-3, 1.0), st.floats(1e-3, 1.0), st.floats(1e-3, 1.0),
       st.sampled_from(["add", "sub", "mul"]))
def test_eltwise_rounds_once_with_params_that_track_the_scales(seed, sa, sb, sy, op):
    """The output is the exact value of the integer parameters rounded once, and each parameter is within the
    quantize_multiplier bound of its real scale (unless realigned). The error against float is then at most
    0.5 + sum |term_i| * 2**-MULTIPLIER_BITS: more than one LSB where two large terms nearly cancel."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, 64, dtype=np.int8).astype(np.int64)
    b = rng.integers(-128, 128, 64, dtype=np.int8).astype(np.int64)
    params = eltwise_params(op, sa, sb, sy)
    got = eltwise(a.astype(np.int8), b.astype(np.int8), op, out_dtype=np.int16, **params).astype(np.int64)
    if op == "mul":
        terms = [(a * b, params["multiplier"], params["shift"], sa * sb / sy)]
    else:
        sign = 1 if op == "add" else -1
        terms = [(a, params["multiplier"][0], params["shift"][0], sa / sy),
                 (sign * b, params["multiplier"][1], params["shift"][1], sb / sy)]
    exact = sum(values * (multiplier / 2.0 ** shift) for values, multiplier, shift, _ in terms)
    assert np.all(np.abs(got - np.clip(exact, -32768, 32767)) <= 0.5 + 1e-9)
    shifts = [shift for _, _, shift, _ in terms]
    for _, multiplier, shift, real in terms:
        if shift < min(shifts) + MAX_ALIGN:   # a realigned input trades precision for alignment (docstring)
            assert abs(multiplier / 2.0 ** shift / real - 1) <= 2.0 ** -MULTIPLIER_BITS


def test_concat_rescale_and_copy():
    # input 0 copied (M=1, N=0, zp equal); input 1: (x - 4) * 3 / 2 + 0 -> [-6 -> -9, 2 -> 3]
    x0 = np.array([[1, 2]], np.int8)
    x1 = np.array([[-2, 6]], np.int8)
    out = concat([x0, x1], axis=1, zero_points=[0, 4], multipliers=[1, 3], shifts=[0, 1])
    assert out.tolist() == [[1, 2, -9, 3]]


X = np.zeros((1, 1, 4, 4), np.int8)


@pytest.mark.parametrize("call, error, match", [
    (lambda: max_pool2d(X.astype(np.int32), 2), TypeError, "x must have dtype"),
    (lambda: max_pool2d(X[0], 2), ValueError, "4-D"),
    (lambda: max_pool2d(X, 2, padding=(2, 0, 0, 0)), ValueError, "smaller than the kernel"),
    (lambda: max_pool2d(X, 5), ValueError, "does not fit"),
    (lambda: avg_pool2d(X, 2, stride=(0, 1)), ValueError, r"stride\[0\]=0"),
    (lambda: avg_pool2d(X, 2, x_zero_point=300), ValueError, "x_zero_point=300"),
    (lambda: avg_pool2d(X, 2, rounding="up"), ValueError, "rounding='up'"),
    (lambda: global_avg_pool(X[0]), ValueError, "4-D"),
    (lambda: eltwise(X, X, "div", multiplier=(1, 1), shift=(0, 0)), ValueError, "op='div'"),
    (lambda: eltwise(X, X, "add", multiplier=1, shift=0), ValueError, "must be a pair"),
    (lambda: eltwise(X, X, "add", multiplier=(1, 2 ** 16), shift=(0, 0)), ValueError, r"multiplier\[1\]=65536"),
    (lambda: eltwise(X, X, "add", multiplier=(1, 1), shift=(0, 30)), ValueError, "differ by 30"),
    (lambda: eltwise(X, X, "mul", multiplier=1, shift=48), ValueError, "shift=48"),
    (lambda: eltwise(X, X[0, 0, :3], "mul", multiplier=1, shift=0), ValueError, "broadcast"),
    (lambda: eltwise(X, X.astype(np.int16), "mul", multiplier=1, shift=0), TypeError, "b must have dtype"),
    (lambda: concat([X], zero_points=[0, 0], multipliers=[1], shifts=[0]), ValueError, "zero_points has 2"),
    (lambda: concat([X, X[0]], zero_points=[0, 0], multipliers=[1, 1], shifts=[0, 0]), ValueError, "concatenate"),
    (lambda: concat([], zero_points=[], multipliers=[], shifts=[]), ValueError, "at least one"),
    (lambda: concat([X], zero_points=[0], multipliers=[2 ** 16], shifts=[0]), ValueError, "multiplier=65536"),
    (lambda: eltwise_params("div", 0.1, 0.1, 0.1), ValueError, "op='div'"),
    (lambda: eltwise_params("add", 0.1, -0.1, 0.1), ValueError, "b_scale=-0.1"),
])
def test_bad_pool_eltwise_inputs(call, error, match):
    with pytest.raises(error, match=match):
        call()
