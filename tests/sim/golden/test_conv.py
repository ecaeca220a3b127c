"""conv2d / matmul: hand-worked vectors, a direct int64 loop reference, overflow policy, bad input."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from aipu.sim.golden import accumulator_range, conv2d, matmul


def reference_conv(x, w, zx, zw, stride, padding, dilation, groups):
    """Direct definition: loops over outputs and taps, int64, padding taps skipped (they are 0)."""
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    xs = x.astype(np.int64) - zx
    ws = w.astype(np.int64) - np.broadcast_to(np.asarray(zw, dtype=np.int64), (k,))[:, None, None, None]
    out = np.zeros((n, k, oh, ow), dtype=np.int64)
    kg = k // groups
    for b in range(n):
        for o in range(k):
            g = o // kg
            for y in range(oh):
                for xo in range(ow):
                    total = 0
                    for ci in range(cg):
                        for i in range(kh):
                            for j in range(kw):
                                iy = y * stride[0] + i * dilation[0] - pt
                                ix = xo * stride[1] + j * dilation[1] - pl
                                if 0 <= iy < h and 0 <= ix < wd:
                                    total += xs[b, g * cg + ci, iy, ix] * ws[o, ci, i, j]
                    out[b, o, y, xo] = total
    return out


def test_hand_worked_1x1_and_3x3():
    # x (uint8, zp 2) = [[3, 4], [5, 6]] -> x - zp = [[1, 2], [3, 4]]; w (int8) = 3x3 of ones, zp 0,
    # padding 1: each output is the sum of its in-image neighbours (padding contributes 0):
    # every 3x3 window around a 2x2 image covers all four pixels: 1 + 2 + 3 + 4 = 10.
    x = np.array([[[[3, 4], [5, 6]]]], dtype=np.uint8)
    w = np.ones((1, 1, 3, 3), dtype=np.int8)
    assert conv2d(x, w, x_zero_point=2, padding=(1, 1, 1, 1)).tolist() == [[[[10, 10], [10, 10]]]]
    # 1x1 with w = -3 and weight zero point -1: (x - 2) * (-3 - (-1)) = -2 * [[1, 2], [3, 4]]
    w1 = np.full((1, 1, 1, 1), -3, dtype=np.int8)
    assert conv2d(x, w1, x_zero_point=2, w_zero_point=-1).tolist() == [[[[-2, -4], [-6, -8]]]]


def test_asymmetric_padding_stride_dilation_hand_worked():
    # x = 0..15 on a 4x4 grid (int8, zp 0); 2x2 kernel [[1, 0], [0, -1]], dilation 2, stride (2, 3),
    # padding top 1, left 0, bottom 0, right 2. Padded rows: -1 (pad), 0..3; tap (i, j) reads
    # row 2*oy + 2*i - 1 and column 3*ox + 2*j.
    # oy=0, ox=0: taps (r-1,c0)=pad -> 0, (r1,c2) = 6 -> -6        => -6
    # oy=0, ox=1: taps (r-1,c3)=pad -> 0, (r1,c5) = pad             => 0
    # oy=1, ox=0: taps (r1,c0) = 4 -> +4, (r3,c2) = 14 -> -14       => -10
    # oy=1, ox=1: taps (r1,c3) = 7 -> +7, (r3,c5) = pad             => 7
    x = np.arange(16, dtype=np.int8).reshape(1, 1, 4, 4)
    w = np.array([[[[1, 0], [0, -1]]]], dtype=np.int8)
    got = conv2d(x, w, stride=(2, 3), padding=(1, 0, 0, 2), dilation=(2, 2))
    assert got.tolist() == [[[[-6, 0], [-10, 7]]]]


@st.composite
def conv_case(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    cg, kg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    padding = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dilation[0] * (kh - 1) + 1 - padding[0] - padding[2]), 7))
    wd = draw(st.integers(max(1, dilation[1] * (kw - 1) + 1 - padding[1] - padding[3]), 7))
    x_dtype, w_dtype = draw(st.sampled_from([np.int8, np.uint8])), draw(st.sampled_from([np.int8, np.uint8]))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    xi, wi = np.iinfo(x_dtype), np.iinfo(w_dtype)
    x = rng.integers(xi.min, xi.max + 1, (draw(st.integers(1, 2)), cg * groups, h, wd), dtype=x_dtype)
    w = rng.integers(wi.min, wi.max + 1, (kg * groups, cg, kh, kw), dtype=w_dtype)
    zx = int(rng.integers(xi.min, xi.max + 1))
    zw = rng.integers(wi.min, wi.max + 1, kg * groups) if draw(st.booleans()) else int(rng.integers(wi.min, wi.max + 1))
    return x, w, zx, zw, stride, padding, dilation, groups


@settings(max_examples=60, deadline=None)
@given(conv_case())
def test_conv_equals_direct_loop(case):
    x, w, zx, zw, stride, padding, dilation, groups = case
    got = conv2d(x, w, x_zero_point=zx, w_zero_point=zw, stride=stride, padding=padding,
                 dilation=dilation, groups=groups)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, reference_conv(x, w, zx, zw, stride, padding, dilation, groups))


def test_depthwise_equals_per_channel_convs():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (2, 5, 9, 8), dtype=np.int8)
    w = rng.integers(-128, 128, (5, 1, 3, 3), dtype=np.int8)
    got = conv2d(x, w, groups=5, padding=(1, 1, 1, 1), x_zero_point=-7)
    for c in range(5):
        single = conv2d(x[:, c:c + 1], w[c:c + 1], padding=(1, 1, 1, 1), x_zero_point=-7)
        np.testing.assert_array_equal(got[:, c:c + 1], single)


def test_long_reduction_is_exact_through_chunking():
    # K = 3*3*1024 taps of (-128) * (-128) = 16384 each: 9216 * 16384 = 150994944 > 2**24 forces
    # several float32 chunks; the exact answer is 9216 * 16384 = 150994944.
    x = np.full((1, 1024, 3, 3), -128, dtype=np.int8)
    w = np.full((1, 1024, 3, 3), -128, dtype=np.int8)
    assert conv2d(x, w).item() == 9216 * 16384


def test_partial_sums_may_wrap_final_sum_must_fit():
    # The accumulator wraps, so only the final sum matters: 140000 products of 127*127 = 16129 reach
    # 2258060000 > 2**31 - 1 part way, then 140000 products of -16129 bring the total back to 0.
    a = np.concatenate([np.full(140000, 127), np.full(140000, -127)]).astype(np.int8)[None, :]
    b = np.full((280000, 1), 127, dtype=np.int8)
    assert matmul(a, b).item() == 0
    # Final sum 140000 * 16129 = 2258060000 overflows int32: error names the op and the value.
    with pytest.raises(OverflowError, match="matmul: accumulator value 2258060000"):
        matmul(a[:, :140000], b[:140000])


def test_conv_overflow_names_worst_value():
    x = np.full((1, 9000, 1, 1), -128, dtype=np.int8)
    w = np.full((2, 9000, 1, 1), -128, dtype=np.int8)
    w[1] = 127
    # channel 0: 9000 * 16384 = 147456000 (fits); the uint8 zero point 0 case below overflows:
    assert conv2d(x, w)[0, :, 0, 0].tolist() == [147456000, -9000 * 128 * 127]
    xu = np.full((1, 40000, 1, 1), 255, dtype=np.uint8)
    wu = np.full((1, 40000, 1, 1), 255, dtype=np.uint8)
    # 40000 * 255 * 255 = 2601000000 > 2**31 - 1
    with pytest.raises(OverflowError, match="conv2d: accumulator value 2601000000"):
        conv2d(xu, wu)


def test_matmul_hand_worked_and_per_column_zero_point():
    # a - 1 = [[0, 1], [2, 3]]; b - [0, 2] per column = [[1, 0], [-1, 1]] -> [[-1, 1], [-1, 3]]
    a = np.array([[1, 2], [3, 4]], dtype=np.uint8)
    b = np.array([[1, 2], [-1, 3]], dtype=np.int8)
    assert matmul(a, b, a_zero_point=1, b_zero_point=np.array([0, 2])).tolist() == [[-1, 1], [-1, 3]]


def test_matmul_batched_matches_int64():
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (3, 4, 70), dtype=np.int8)
    b = rng.integers(0, 256, (70, 5), dtype=np.uint8)
    expected = (a.astype(np.int64) + 3) @ (b.astype(np.int64) - 128)
    np.testing.assert_array_equal(matmul(a, b, a_zero_point=-3, b_zero_point=128), expected)


X = np.zeros((1, 2, 4, 4), dtype=np.int8)
W = np.zeros((2, 2, 3, 3), dtype=np.int8)


@pytest.mark.parametrize("call, error, match", [
    (lambda: conv2d(X.astype(np.int16), W), TypeError, "x must have dtype"),
    (lambda: conv2d(X, W.astype(np.float32)), TypeError, "w must have dtype"),
    (lambda: conv2d(X.tolist(), W), TypeError, "x must be a numpy array"),
    (lambda: conv2d(X[0], W), ValueError, "x must be 4-D"),
    (lambda: conv2d(X, W[:, :1]), ValueError, r"w.shape\[1\]=1"),
    (lambda: conv2d(X, W, groups=3), ValueError, "groups=3"),
    (lambda: conv2d(X, W, stride=(0, 1)), ValueError, r"stride\[0\]=0"),
    (lambda: conv2d(X, W, dilation=(1, 0)), ValueError, r"dilation\[1\]=0"),
    (lambda: conv2d(X, W, padding=(0, -1, 0, 0)), ValueError, r"padding\[1\]=-1"),
    (lambda: conv2d(X, W, padding=(1, 1)), ValueError, "padding must have 4 entries"),
    (lambda: conv2d(X, W, x_zero_point=128), ValueError, "x_zero_point=128"),
    (lambda: conv2d(X, W, w_zero_point=np.array([0, 0, 0])), ValueError, "w_zero_point has 3 entries"),
    (lambda: conv2d(X, W, w_zero_point=np.array([0, -129])), ValueError, "w_zero_point=-129"),
    (lambda: conv2d(X, W, x_zero_point=0.5), TypeError, "x_zero_point must be an integer"),
    (lambda: conv2d(X, np.zeros((2, 2, 5, 5), dtype=np.int8)), ValueError, "does not fit"),
    (lambda: matmul(X[0, 0], W[0, 0]), ValueError, r"a.shape\[-1\]=4"),
    (lambda: matmul(X[0, 0, 0], W[0, 0]), ValueError, "at least 2-D"),
    (lambda: matmul(np.zeros((2, 3, 4), np.int8), np.zeros((5, 4, 2), np.int8)), ValueError, "broadcast"),
])
def test_bad_conv_inputs(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_remembered_checks_still_reject_what_equals_a_valid_argument():
    """conv2d remembers the checks of plain int arguments; values equal to those but not ints (1.0, True,
    numpy scalars) are checked afresh, and rejected where invalid."""
    x, w = np.zeros((1, 2, 4, 4), np.int8), np.zeros((2, 1, 3, 3), np.int8)
    conv2d(x, w, stride=(1, 1), groups=2)
    conv2d(x, w, stride=(1, 1), groups=1 + 1, x_zero_point=np.int64(0))
    with pytest.raises(TypeError, match=r"stride\[0\] must be an integer"):
        conv2d(x, w, stride=(1.0, 1), groups=2)
    conv2d(np.zeros((1, 1, 4, 4), np.int8), np.zeros((2, 1, 3, 3), np.int8), groups=1)
    with pytest.raises(TypeError, match="groups must be an integer"):
        conv2d(np.zeros((1, 1, 4, 4), np.int8), np.zeros((2, 1, 3, 3), np.int8), groups=True)


def test_uint8_operands_map_to_int8_with_shifted_zero_points():
    # docs/arithmetic.md D4: (w - z) = ((w - 128) - (z - 128)), so uint8 weights/activations become int8
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, 4, 6, 6), dtype=np.uint8)
    w = rng.integers(0, 256, (3, 4, 3, 3), dtype=np.uint8)
    direct = conv2d(x, w, x_zero_point=200, w_zero_point=17, padding=(1, 1, 1, 1))
    shifted = conv2d((x.astype(np.int16) - 128).astype(np.int8), (w.astype(np.int16) - 128).astype(np.int8),
                     x_zero_point=72, w_zero_point=-111, padding=(1, 1, 1, 1))
    np.testing.assert_array_equal(direct, shifted)


def tapwise_int64_conv(x, w, zx, zw, stride, padding, dilation, groups):
    """Second reference, vectorised differently from the golden im2col path: one int64 einsum per tap."""
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    pt, pl, pb, pr = padding
    xs = np.pad(x.astype(np.int64) - zx, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    ws = (w.astype(np.int64) - np.broadcast_to(np.asarray(zw, np.int64), (k,))[:, None, None, None])
    oh = (h + pt + pb - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    xg = xs.reshape(n, groups, cg, *xs.shape[2:])
    wg = ws.reshape(groups, k // groups, cg, kh, kw)
    out = np.zeros((n, groups, k // groups, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dilation[0], j * dilation[1]
            patch = xg[:, :, :, y0:y0 + stride[0] * (oh - 1) + 1:stride[0], x0:x0 + stride[1] * (ow - 1) + 1:stride[1]]
            out += np.einsum("ngcyx,gkc->ngkyx", patch, wg[:, :, :, i, j])
    return out.reshape(n, k, oh, ow)


@pytest.mark.parametrize("seed, shape", [
    (0, dict(c=256, k=8, h=6, kernel=3, groups=1)),     # 2304-tap reduction at uint8 extremes: several chunks
    (1, dict(c=24, k=24, h=9, kernel=5, groups=24)),    # depthwise 5x5
])
def test_medium_layers_match_tapwise_reference(seed, shape):
    rng = np.random.default_rng(seed)
    x = rng.choice(np.array([0, 255], np.uint8), (2, shape["c"], shape["h"], shape["h"]))
    w_shape = (shape["k"], shape["c"] // shape["groups"], shape["kernel"], shape["kernel"])
    w = rng.choice(np.array([-128, 127], np.int8), w_shape)
    args = (255, 0, (2, 1), (2, 1, 0, 2), (1, 2), shape["groups"])
    np.testing.assert_array_equal(conv2d(x, w, x_zero_point=255, stride=(2, 1), padding=(2, 1, 0, 2),
                                         dilation=(1, 2), groups=shape["groups"]), tapwise_int64_conv(x, w, *args))


@pytest.mark.parametrize("seed", range(8))
def test_gemm_in_row_blocks_matches_tapwise_reference(seed, monkeypatch):
    """conv_sums runs a large layer's GEMM in blocks of output rows; blocks forced down to one or a few rows
    give the same sums, checked and wide, dense and with wide groups (C/G > 16 takes the GEMM)."""
    import aipu.sim.golden.fast.conv as conv_module

    rng = np.random.default_rng(seed)
    monkeypatch.setattr(conv_module, "_GEMM_BLOCK", 1)
    monkeypatch.setattr(conv_module, "_GEMM_MIN_PIXELS", int(rng.integers(1, 4)))     # blocks of 1-2 rows
    blocks = []
    gemm = conv_module.exact_matmul
    monkeypatch.setattr(conv_module, "exact_matmul", lambda *args: blocks.append(1) or gemm(*args))
    groups = 2 if seed % 2 else 1
    cg = 17 if groups == 2 else int(rng.integers(1, 20))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    stride, dilation = tuple(int(v) for v in rng.integers(1, 3, 2)), tuple(int(v) for v in rng.integers(1, 3, 2))
    padding = tuple(int(v) for v in rng.integers(0, 3, 4))
    x = rng.integers(-128, 128, (int(rng.integers(1, 3)), cg * groups, int(rng.integers(12, 20)),
                                 int(rng.integers(8, 14))), dtype=np.int8)
    w = rng.integers(-128, 128, (18 * groups, cg, kh, kw), dtype=np.int8)     # K > 16: not the tap kernel
    zx, zw = int(rng.integers(-128, 128)), rng.integers(-128, 128, 18 * groups)
    params = dict(x_zero_point=zx, w_zero_point=zw, stride=stride, padding=padding, dilation=dilation, groups=groups)
    expected = tapwise_int64_conv(x, w, zx, zw, stride, padding, dilation, groups)
    got, wide = conv2d(x, w, **params), conv2d(x, w, **params, wide=True)
    assert got.dtype == np.int32 and wide.dtype == np.int64 and len(blocks) > 2   # two calls, each in blocks
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(wide, expected)


def test_empty_batch_gives_empty_sums():
    x, w = np.zeros((0, 3, 8, 8), np.int8), np.zeros((20, 3, 3, 3), np.int8)
    assert conv2d(x, w).shape == (0, 20, 6, 6)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2 ** 32 - 1))
def test_random_layers_match_tapwise_reference_slow(seed):
    rng = np.random.default_rng(seed)
    groups = int(rng.choice([1, 2, 4]))
    cg, kg = int(rng.integers(1, 40)), int(rng.integers(1, 12))
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    stride, dilation = tuple(rng.integers(1, 4, 2)), tuple(rng.integers(1, 3, 2))
    padding = tuple(int(v) for v in rng.integers(0, 3, 4))
    h = int(rng.integers(dilation[0] * (kh - 1) + 1, 20))
    wd = int(rng.integers(dilation[1] * (kw - 1) + 1, 20))
    x = rng.integers(0, 256, (int(rng.integers(1, 3)), cg * groups, h, wd), dtype=np.uint8)
    w = rng.integers(-128, 128, (kg * groups, cg, kh, kw), dtype=np.int8)
    zx, zw = int(rng.integers(0, 256)), rng.integers(-128, 128, kg * groups)
    np.testing.assert_array_equal(
        conv2d(x, w, x_zero_point=zx, w_zero_point=zw, stride=stride, padding=padding, dilation=dilation,
               groups=groups),
        tapwise_int64_conv(x, w, zx, zw, stride, padding, dilation, groups))


def test_accumulator_range_is_exact_and_attained():
    # w - zp_w for channel 0 = [3, -2, 0, 5] (zp 1), x uint8 with zp 10: x - zp in [-10, 245].
    # max = (3 + 5) * 245 + (-2) * (-10) = 1980; min = 8 * (-10) + (-2) * 245 = -570
    w = np.array([[4, -1, 1, 6]], dtype=np.int8).reshape(1, 4, 1, 1)
    lo, hi = accumulator_range(w, x_dtype=np.uint8, x_zero_point=10, w_zero_point=1)
    assert (lo.tolist(), hi.tolist()) == ([-570], [1980])
    best = np.array([255, 0, 0, 255], dtype=np.uint8).reshape(1, 4, 1, 1)
    worst = np.array([0, 255, 0, 0], dtype=np.uint8).reshape(1, 4, 1, 1)
    assert conv2d(best, w, x_zero_point=10, w_zero_point=1).item() == 1980
    assert conv2d(worst, w, x_zero_point=10, w_zero_point=1).item() == -570
    with pytest.raises(TypeError, match="x_dtype must be int8 or uint8"):
        accumulator_range(w, x_dtype=np.int16)
