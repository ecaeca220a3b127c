"""Requantizer: native M/2^N, Leaky ReLU, float32 (ONNX) and TFLite modes, multiplier helpers."""
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from aipu.sim.machine.arch import MULTIPLIER_BITS, SHIFT_MAX
from aipu.sim.golden import (conv2d, leaky_relu_multipliers, onnx_requant_scale, quantize_multiplier,
                        quantize_multiplier_tflite, rounding_shift_right,
                        requantize, requantize_float32, requantize_tflite)

ACC = np.array([100, -100, 7], dtype=np.int32)


@pytest.mark.parametrize("rounding, expected", [
    # acc + bias 50 = [150, -50, 57]; * M=3 = [450, -150, 171]; / 2**2 = [112.5, -37.5, 42.75];
    # + zero point -5 after rounding.
    ("half_up", [113 - 5, -37 - 5, 43 - 5]),
    ("floor", [112 - 5, -38 - 5, 42 - 5]),
    ("half_to_even", [112 - 5, -38 - 5, 43 - 5]),
    ("half_away_from_zero", [113 - 5, -38 - 5, 43 - 5]),
])
def test_native_hand_vectors(rounding, expected):
    out = requantize(ACC, bias=50, multiplier=3, shift=2, out_zero_point=-5, rounding=rounding, channel_axis=0)
    assert out.dtype == np.int8 and out.tolist() == expected


def test_per_channel_parameters_and_fused_relu6_clamp():
    # channels on axis 1: c0: (10 + 1) * 2 / 2 = 11; c1: (10 - 30) * 5 / 2**3 = -12.5 -> half_up -12;
    # uint8 output, zero point 10, ReLU6 as clamp [10, 40]: c0 -> 21, c1 -> -2 -> clamped 10.
    acc = np.array([[10, 10], [100, -300]], dtype=np.int32)
    out, saturated = requantize(acc, bias=np.array([1, -30]), multiplier=np.array([2, 5]),
                                shift=np.array([1, 3]), out_zero_point=10, qmin=10, qmax=40,
                                out_dtype=np.uint8, return_saturated=True)
    # row 1: c0 (100 + 1) * 2 / 2 = 101 -> 111 -> 40 (saturated); c1 (-330) * 5 / 8 = -206.25 -> -206 -> 10
    assert out.tolist() == [[21, 10], [40, 10]] and saturated == 3


def test_leaky_relu_second_multiplier():
    # positive side M=3, N=2 (x0.75); negative side M=13, N=7 (0.75 * 0.1328125 ~ 0.0996):
    # 400 -> 400 * 3 / 4 = 300 -> clamps to 127; 40 -> 30; -40 -> -40 * 13 / 128 = -4.0625 -> -4;
    # -1000 -> -101.5625 -> half_up -102; -10 -> -1.015625 -> -1; 0 -> 0.
    acc = np.array([400, 40, -40, -1000, -10, 0], dtype=np.int32)
    out, saturated = requantize(acc, multiplier=3, shift=2, negative_multiplier=13, negative_shift=7,
                                channel_axis=0, return_saturated=True)
    assert out.tolist() == [127, 30, -4, -102, -1, 0] and saturated == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=2, max_size=20),
       st.integers(0, 2 ** MULTIPLIER_BITS - 1), st.integers(0, SHIFT_MAX),
       st.sampled_from(["floor", "half_up", "half_to_even", "half_away_from_zero"]))
def test_native_is_monotonic_and_exact(values, m, n, rounding):
    acc = np.sort(np.array(values, dtype=np.int32))
    out = requantize(acc, multiplier=m, shift=n, rounding=rounding, out_dtype=np.int16, channel_axis=0)
    assert np.all(np.diff(out.astype(np.int64)) >= 0)
    for a, y in zip(acc.tolist(), out.tolist()):  # floor-mode exactness against rationals
        if rounding == "floor":
            exact = (a * m) // 2 ** n
            assert y == max(-32768, min(32767, exact))


def test_quantize_multiplier_hand_worked():
    # 0.1 = 0.8 * 2**-3; N = 16 + 3 = 19: 0.1 * 2**19 = 52428.8 -> 52429
    assert quantize_multiplier(0.1) == (52429, 19)
    # 1.0: N = 15, M = 32768; 65535.4 -> N = 0, M = 65535; 65535.6 would need 65536: rejected
    assert quantize_multiplier(1.0) == (32768, 15)
    assert quantize_multiplier(65535.4) == (65535, 0)
    with pytest.raises(ValueError, match="scale=65535.6"):
        quantize_multiplier(65535.6)
    # 0.99999 * 2**16 = 65535.34 -> fits with N = 16; 0.999999 * 2**16 = 65535.93 -> rounds to 65536,
    # so N drops to 15: 0.999999 * 2**15 = 32767.97 -> 32768
    assert quantize_multiplier(0.99999) == (65535, 16)
    assert quantize_multiplier(0.999999) == (32768, 15)
    # tiny scales: N capped at SHIFT_MAX
    assert quantize_multiplier(2.0 ** -40) == (128, SHIFT_MAX)
    m, n = quantize_multiplier(np.array([0.1, 0.3]), shared_shift=True)
    assert n.tolist() == [17, 17] and m.tolist() == [13107, 39322]  # 0.1*2**17 = 13107.2, 0.3*2**17 = 39321.6


@settings(max_examples=300, deadline=None)
@given(st.floats(2.0 ** -(SHIFT_MAX - MULTIPLIER_BITS + 1), 65000.0))
def test_quantize_multiplier_error_bound(scale):
    m, n = quantize_multiplier(scale)
    assert 0 < m < 2 ** MULTIPLIER_BITS and 0 <= n <= SHIFT_MAX
    error = abs(Fraction(m, 2 ** n) - Fraction(scale)) / Fraction(scale)
    assert error <= Fraction(1, 2 ** MULTIPLIER_BITS)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=1, max_size=30), st.floats(2.0 ** -30, 2.0 ** -8),
       st.sampled_from(["half_up", "half_to_even", "half_away_from_zero"]))
def test_native_within_one_lsb_of_float32_mode(values, scale, rounding):
    # docs/arithmetic.md section 4.4: relative error <= 2**-16 moves |y| < 2**15 by < 0.5 before rounding
    scale32 = np.float32(scale)
    m, n = quantize_multiplier(float(scale32))
    acc = np.array(values, dtype=np.int32)
    native = requantize(acc, multiplier=m, shift=n, rounding=rounding, out_dtype=np.int16, channel_axis=0)
    fp32 = requantize_float32(acc, scale=scale32, out_dtype=np.int16, channel_axis=0)
    assert np.max(np.abs(native.astype(np.int64) - fp32)) <= 1


def tflite_literal(x: int, qm: int, shift: int) -> int:
    """gemmlowp/TFLite double rounding transcribed literally with Python ints."""
    left, right = max(shift, 0), max(-shift, 0)
    a = x * 2 ** left
    ab = a * qm
    nudge = 2 ** 30 if ab >= 0 else 1 - 2 ** 30
    num = ab + nudge
    high = num // 2 ** 31 if num >= 0 else -((-num) // 2 ** 31)   # C++ truncating division
    mask = 2 ** right - 1
    remainder, threshold = high & mask, (mask >> 1) + (1 if high < 0 else 0)
    return (high >> right) + (1 if remainder > threshold else 0)


def test_tflite_hand_vectors():
    # scale 0.1: frexp = 0.8 * 2**-3 -> qm = round(0.8 * 2**31) = round(1717986918.4) = 1717986918, shift -3
    assert quantize_multiplier_tflite(0.1) == (1717986918, -3)
    # 1000: 1000 * qm = 1717986918000, + 2**30 = 1719060659824, / 2**31 = 800.49.. -> 800; 800 / 8 = 100
    # 1004: 1724858865672 + 2**30 = 1725932607496 -> 803.69.. -> 803; 803 / 8 = 100.375 -> 100
    # -1004: (-1724858865672 + 1 - 2**30) / 2**31 = -803.69.. truncates to -803; -100.375 -> -100
    acc = np.array([1000, 1004, -1004], dtype=np.int32)
    assert requantize_tflite(acc, multiplier=1717986918, shift=-3, channel_axis=0).tolist() == [100, 100, -100]
    # Double rounding: scale 0.2875 = 0.575 * 2**-1, qm = round(0.575 * 2**31) = 1234803098.
    # x = 8: 8 * qm = 9878424784, + 2**30 = 10952166608, / 2**31 = 5.09.. -> 5; 5 / 2 = 2.5 -> away: 3,
    # although 8 * 0.2875 = 2.3 rounds to 2 (the native single-rounding mode gives 2).
    assert quantize_multiplier_tflite(0.2875) == (1234803098, -1)
    assert requantize_tflite(np.array([8], np.int32), multiplier=1234803098, shift=-1, channel_axis=0).item() == 3
    m, n = quantize_multiplier(0.2875)
    assert requantize(np.array([8], np.int32), multiplier=m, shift=n, channel_axis=0).item() == 2
    # positive shift: scale 3.0 = 0.75 * 2**2 -> qm = 1610612736, shift 2; x = -7: -28 * 0.75 = -21
    assert requantize_tflite(np.array([-7], np.int32), multiplier=1610612736, shift=2, channel_axis=0).item() == -21


@settings(max_examples=300, deadline=None)
@given(st.integers(-2 ** 31, 2 ** 31 - 1), st.integers(0, 2 ** 31 - 1), st.integers(-31, 0))
def test_tflite_matches_literal_transcription(x, qm, shift):
    got = requantize_tflite(np.array([x], np.int32), multiplier=qm, shift=shift, channel_axis=0,
                            out_dtype=np.int16, qmin=-32768, qmax=32767)
    assert got.item() == max(-32768, min(32767, tflite_literal(x, qm, shift)))


def test_tflite_overflow_is_reported():
    with pytest.raises(OverflowError, match=r"acc \+ bias = 2147483648"):
        requantize_tflite(np.array([2 ** 31 - 1], np.int32), bias=1, multiplier=2 ** 30, shift=0, channel_axis=0)
    with pytest.raises(OverflowError, match="<< shift"):
        requantize_tflite(np.array([2 ** 30], np.int32), multiplier=2 ** 30, shift=1, channel_axis=0)


def test_float32_mode_hand_vectors():
    # scale 0.5 makes ties: 5 * 0.5 = 2.5 -> even 2, 7 * 0.5 = 3.5 -> 4, -5 -> -2; the zero point (1) is
    # added after rounding in the float32 (onnxruntime) mode and before it in the float64
    # (onnx.reference) mode: round(2.5 + 1) = 4 but round(2.5) + 1 = 3.
    acc = np.array([5, 7, -5], dtype=np.int32)
    assert requantize_float32(acc, scale=np.float32(0.5), out_zero_point=1, channel_axis=0).tolist() == [3, 5, -1]
    assert requantize_float32(acc, scale=np.float32(0.5), out_zero_point=1, channel_axis=0,
                              product="float64").tolist() == [4, 4, -2]
    # float32 conversion of the sum is RNE: 2**24 + 1 -> 2**24; * 2**-20 = 16 exactly
    big = np.array([2 ** 24 + 1], np.int32)
    assert requantize_float32(big, scale=np.float32(2.0 ** -20), channel_axis=0).item() == 16
    assert onnx_requant_scale(0.02, np.array([0.5, 0.25]), 0.1).dtype == np.float32


def _qlinearconv_model(dtype, x_zp, w, w_scale, y_zp, bias, *, x_scale, y_scale, group, stride, pads):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(np.asarray(v, dtype=d), name) for name, v, d in [
        ("xs", x_scale, np.float32), ("xz", x_zp, dtype), ("ws", w_scale, np.float32),
        ("wz", np.zeros(w.shape[0]), np.int8), ("ys", y_scale, np.float32), ("yz", y_zp, dtype),
        ("b", bias, np.int32), ("w", w, np.int8)]]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            pads=list(pads), strides=list(stride), group=group)
    elem = TensorProto.INT8 if dtype == np.int8 else TensorProto.UINT8
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, None)],
                              [helper.make_tensor_value_info("y", elem, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("case", [
    # exact ties (scale 1 * 0.5 / 64 = 2**-7) with an odd zero point: the rounding order matters
    dict(dtype=np.int8, x_scale=1.0, w_scale="half", y_scale=64.0, y_zp=3, group=1, stride=(1, 1),
         pads=(1, 1, 1, 1)),
    # generic per-channel scales
    dict(dtype=np.int8, x_scale=0.02, w_scale="random", y_scale=0.37, y_zp=-5, group=1, stride=(1, 1),
         pads=(1, 1, 1, 1)),
    # depthwise, uint8 activations, stride 2, asymmetric padding (onnxruntime's depthwise kernel)
    dict(dtype=np.uint8, x_scale=0.03, w_scale="random", y_scale=0.2, y_zp=131, group=16, stride=(2, 2),
         pads=(1, 0, 2, 1)),
])
def test_float32_mode_matches_onnxruntime_and_reference(case):
    ort = pytest.importorskip("onnxruntime")
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(5)
    dtype, group = case["dtype"], case["group"]
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (2, 16, 11, 11), dtype=dtype)
    w = rng.integers(-20, 21, (16, 16 // group, 3, 3), dtype=np.int8)
    bias = rng.integers(-1000, 1000, 16).astype(np.int32)
    w_scale = (np.full(16, 0.5, np.float32) if case["w_scale"] == "half"
               else rng.uniform(1e-3, 1e-2, 16).astype(np.float32))
    x_zp = int(info.min) + 3
    model = _qlinearconv_model(dtype, x_zp, w, w_scale, case["y_zp"], bias, x_scale=case["x_scale"],
                               y_scale=case["y_scale"], group=group, stride=case["stride"], pads=case["pads"])
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    y_ort = session.run(None, {"x": x})[0]
    y_ref = ReferenceEvaluator(model).run(None, {"x": x})[0]
    # ONNX pads are [top, left, bottom, right], the golden model's order
    acc = conv2d(x, w, x_zero_point=x_zp, stride=case["stride"], padding=case["pads"], groups=group)
    scale = onnx_requant_scale(case["x_scale"], w_scale, case["y_scale"])
    kw = dict(bias=bias, scale=scale, out_zero_point=case["y_zp"], out_dtype=dtype)
    np.testing.assert_array_equal(requantize_float32(acc, **kw), y_ort)
    np.testing.assert_array_equal(requantize_float32(acc, product="float64", **kw), y_ref)
    if case["w_scale"] == "half":  # the tie case really exercises the rounding-order difference
        assert np.count_nonzero(y_ort != y_ref) > 0


A = np.zeros((1, 3, 2, 2), dtype=np.int32)


@pytest.mark.parametrize("call, error, match", [
    (lambda: requantize(A.astype(np.int64), multiplier=1, shift=0), TypeError, "acc must have dtype"),
    (lambda: requantize(A, multiplier=2 ** 16, shift=0), ValueError, "multiplier=65536"),
    (lambda: requantize(A, multiplier=-1, shift=0), ValueError, "multiplier=-1"),
    (lambda: requantize(A, multiplier=1, shift=SHIFT_MAX + 1), ValueError, f"shift={SHIFT_MAX + 1}"),
    (lambda: requantize(A, multiplier=1, shift=np.array([0, 1])), ValueError, "shift has 2 entries, expected 3"),
    (lambda: requantize(A, multiplier=1.5, shift=0), TypeError, "multiplier must be an integer"),
    (lambda: requantize(A, multiplier=1, shift=0, bias=2 ** 31), ValueError, "bias=2147483648"),
    (lambda: requantize(A, multiplier=1, shift=0, qmin=5, qmax=4), ValueError, "qmin=5 is greater than qmax=4"),
    (lambda: requantize(A, multiplier=1, shift=0, qmin=-129), ValueError, "qmin=-129"),
    (lambda: requantize(A, multiplier=1, shift=0, out_zero_point=200), ValueError, "out_zero_point=200"),
    (lambda: requantize(A, multiplier=1, shift=0, out_dtype=np.uint8, out_zero_point=-1), ValueError,
     "out_zero_point=-1"),
    (lambda: requantize(A, multiplier=1, shift=0, out_dtype=np.float32), TypeError, "out_dtype"),
    (lambda: requantize(A, multiplier=1, shift=0, rounding="up"), ValueError, "rounding='up'"),
    (lambda: requantize(A, multiplier=1, shift=0, channel_axis=4), ValueError, "channel_axis=4"),
    (lambda: requantize(A, multiplier=1, shift=0, negative_multiplier=1), ValueError, "together"),
    (lambda: requantize_float32(A, scale=0.5), TypeError, "scale must be float32"),
    (lambda: requantize_float32(A, scale=np.float32(-1)), ValueError, "scale=-1.0"),
    (lambda: requantize_float32(A, scale=np.ones(2, np.float32)), ValueError, "one entry per channel"),
    (lambda: requantize_float32(A, scale=np.array([1, np.nan, -1], np.float32)), ValueError, "scale=nan"),
    (lambda: requantize_float32(A, scale=np.array([1, 2, np.inf], np.float32)), ValueError, "scale=inf"),
    (lambda: requantize(A, multiplier=np.array([1, 2, 2 ** 16]), shift=0), ValueError, "multiplier=65536"),
    (lambda: requantize(A, multiplier=1, shift=np.array([0, -3, 99])), ValueError, "shift=-3 is outside"),
    (lambda: requantize_float32(A, scale=np.float32(1), product="double"), ValueError, "product='double'"),
    (lambda: requantize_tflite(A, multiplier=2 ** 31, shift=0), ValueError, "multiplier=2147483648"),
    (lambda: requantize_tflite(A, multiplier=1, shift=31), ValueError, "shift=31"),
    (lambda: requantize_tflite(A, multiplier=1, shift=0, out_zero_point=128), ValueError, "out_zero_point=128"),
    (lambda: requantize_float32(A, scale=np.float32(1), out_dtype=np.int32), TypeError, "out_dtype"),
    (lambda: requantize(A, multiplier=1, shift=0, negative_multiplier=1, negative_shift=48), ValueError,
     "negative_shift=48"),
    (lambda: quantize_multiplier_tflite(2.0 ** 31), ValueError, "shift > 30"),
    (lambda: quantize_multiplier(np.ones((2, 2))), ValueError, "scalar or 1-D"),
    (lambda: quantize_multiplier(0.0), ValueError, "scale=0.0"),
    (lambda: quantize_multiplier(float("inf")), ValueError, "finite and positive"),
])
def test_bad_requant_inputs(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_a_zero_point_that_does_not_hash_is_checked_without_the_cache():
    """The output checks are remembered per hashable argument set; a 0-d array zero point takes the uncached
    check and gives the same output, and a bad one still names itself."""
    want = requantize(A, multiplier=1, shift=0, out_zero_point=3)
    assert np.array_equal(requantize(A, multiplier=1, shift=0, out_zero_point=np.array(3)), want)
    with pytest.raises(TypeError, match="out_zero_point must be an integer"):
        requantize(A, multiplier=1, shift=0, out_zero_point=np.array(1.5))


def test_the_smallest_and_largest_finite_scales_are_accepted():
    info = np.finfo(np.float32)
    scale = np.array([info.smallest_subnormal, 1, info.max], np.float32)
    assert requantize_float32(A, scale=scale).shape == A.shape


def test_leaky_single_rounding_beats_whitepaper_two_stage():
    # D11 on one value: scale 2**-4, slope 0.3, acc -1000: exact -1000 * 0.0625 * 0.3 = -18.75 -> -19.
    # Ours: 0.01875 = 0.6 * 2**-5 -> M- = round(0.01875 * 2**21) = 39322, N- = 21;
    #   -1000 * 39322 / 2**21 = -18.7502 -> half_up -19.
    # whitepaper §4.14 two-stage with N_l = 7: t = -1000 * 2**-4 = -62.5 -> half_up -62; l_q = round(0.3 * 128) = 38;
    #   -62 * 38 / 128 = -18.41 -> -18 (one LSB off).
    params = leaky_relu_multipliers(2.0 ** -4, 0.3)
    assert (params["negative_multiplier"], params["negative_shift"]) == (39322, 21)
    assert requantize(np.array([-1000], np.int32), channel_axis=0, **params).item() == -19
    first = rounding_shift_right(np.array([-1000 * params["multiplier"]]), params["shift"], "half_up")
    assert first.item() == -62
    assert rounding_shift_right(first * 38, 7, "half_up").item() == -18


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2 ** 24, 2 ** 24), min_size=1, max_size=20), st.floats(2.0 ** -14, 2.0 ** -4),
       st.floats(0.01, 0.5))
def test_leaky_within_half_lsb_plus_multiplier_error(values, scale, slope):
    params = leaky_relu_multipliers(scale, slope)
    acc = np.array(values, dtype=np.int32)
    ours = requantize(acc, out_dtype=np.int16, channel_axis=0, **params).astype(np.float64)
    exact = np.clip(np.where(acc < 0, acc * scale * slope, acc * scale), -32768, 32767)
    assert np.all(np.abs(ours - exact) <= 0.5 + np.abs(exact) * 2.0 ** -15)


def test_leaky_relu_multipliers_hand_worked():
    # scale 0.1 -> (52429, 19); 0.1 * 0.25 = 0.025 = 0.8 * 2**-5 -> N = 21, M = 0.025 * 2**21 = 52428.8 -> 52429
    assert leaky_relu_multipliers(0.1, 0.25) == {"multiplier": 52429, "shift": 19, "negative_multiplier": 52429,
                                                 "negative_shift": 21}
    with pytest.raises(ValueError, match="slope=-0.1"):
        leaky_relu_multipliers(0.1, -0.1)
