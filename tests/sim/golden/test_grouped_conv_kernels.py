"""conv2d's numba kernels for grouped and depthwise convolutions (sim/golden/fast/grouped_conv.py,
channels_last_conv.py): which path each layer shape takes, and each path against the int64 references of
test_conv.py, across the limits between the kernels."""
import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from aipu.sim.golden import conv2d, conv_geometry, conv_sums_channels_last
from tests.sim.golden.test_conv import reference_conv, tapwise_int64_conv


@pytest.fixture
def direct_path_calls(monkeypatch):
    """Names the numba grouped/depthwise kernels conv2d called, to prove which path it took."""
    import aipu.sim.golden.fast.grouped_conv as kernel_module

    calls = []

    def counted(name):
        kernel = getattr(kernel_module, name)
        return lambda *args: calls.append(name) or kernel(*args)

    for name in ("grouped_conv_taps", "depthwise_flat"):
        monkeypatch.setattr(kernel_module, name, counted(name))
    return calls


@pytest.mark.parametrize("seed", range(40))
def test_grouped_and_depthwise_direct_path_matches_int64_reference(seed, direct_path_calls):
    rng = np.random.default_rng(seed)
    groups = int(rng.choice([2, 3, 8]))
    depthwise = seed % 2 == 0
    cg, kg = (1, int(rng.integers(1, 3))) if depthwise else (int(rng.integers(1, 5)), int(rng.integers(1, 4)))
    kh, kw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    stride, dilation = tuple(int(v) for v in rng.integers(1, 4, 2)), tuple(int(v) for v in rng.integers(1, 4, 2))
    padding = tuple(int(v) for v in rng.integers(0, 4, 4))
    h = int(rng.integers(max(1, dilation[0] * (kh - 1) + 1 - padding[0] - padding[2]), 24))
    wd = int(rng.integers(max(1, dilation[1] * (kw - 1) + 1 - padding[1] - padding[3]), 24))
    x_dtype, w_dtype = (np.uint8, np.int8) if seed % 4 < 2 else (np.int8, np.uint8)
    xi, wi = np.iinfo(x_dtype), np.iinfo(w_dtype)
    x = rng.integers(xi.min, xi.max + 1, (int(rng.integers(1, 3)), cg * groups, h, wd), dtype=x_dtype)
    w = rng.integers(wi.min, wi.max + 1, (kg * groups, cg, kh, kw), dtype=w_dtype)
    zx = int(rng.integers(xi.min, xi.max + 1))
    zw = rng.integers(wi.min, wi.max + 1, kg * groups) if seed % 3 else int(rng.integers(wi.min, wi.max + 1))
    args = (zx, zw, stride, padding, dilation, groups)
    got = conv2d(x, w, x_zero_point=zx, w_zero_point=zw, stride=stride, padding=padding, dilation=dilation,
                 groups=groups)
    assert direct_path_calls and got.dtype == np.int32
    np.testing.assert_array_equal(got, reference_conv(x, w, *args))
    wide = conv2d(x, w, x_zero_point=zx, w_zero_point=zw, stride=stride, padding=padding, dilation=dilation,
                  groups=groups, wide=True)
    assert wide.dtype == np.int32     # the direct path's sums provably fit, wide or not
    np.testing.assert_array_equal(wide, got)


def test_grouped_paths_agree_across_the_float32_bound(direct_path_calls):
    # 16 channels per group, 5x5: 400 taps. Operands of at most 200 * 200 keep every sum <= 2**24 (direct
    # path); full-range uint8 extremes (255 * 255 * 400 > 2**24) fall back to the chunked GEMM.
    rng = np.random.default_rng(7)
    w = rng.integers(-128, 128, (8, 16, 5, 5), dtype=np.int8)
    small = rng.integers(-100, 101, (1, 32, 9, 9), dtype=np.int8)
    extreme = rng.choice(np.array([0, 255], np.uint8), (1, 32, 9, 9))
    for x, zx, zw, direct in ((small, 100, 72, True), (extreme, 255, 127, False)):
        direct_path_calls.clear()
        got = conv2d(x, w, x_zero_point=zx, w_zero_point=zw, padding=(2, 2, 2, 2), groups=2)
        assert bool(direct_path_calls) == direct
        np.testing.assert_array_equal(got, tapwise_int64_conv(x, w, zx, zw, (1, 1), (2, 2, 2, 2), (1, 1), 2))


def test_grouped_conv_overflow_names_worst_value():
    # 2 groups of 4000 channels, 3x3: 36000 taps of 255 * 255 = 2340900000 > 2**31 - 1 in every output.
    x = np.full((1, 8000, 3, 3), 255, dtype=np.uint8)
    w = np.full((2, 4000, 3, 3), 255, dtype=np.uint8)
    with pytest.raises(OverflowError, match="conv2d: accumulator value 2340900000"):
        conv2d(x, w, groups=2)
    assert conv2d(x, w, groups=2, wide=True)[0, :, 0, 0].tolist() == [2340900000] * 2


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from([np.int8, np.uint8]), st.booleans())
def test_depthwise_kernel_is_exact(seed, x_dtype, channels_last):
    """Depthwise convs up to 5x5 always take a direct kernel (25 * 255 * 255 < 2**24): strides 1 and 2 (their
    own copy loops) and 3, dilation, asymmetric padding, kernels of 1 to 5 taps a row (taps three per pass and
    the rest), per-channel weight zero points, every byte value, planes smaller and larger than a SIMD run;
    NCHW operands (conv2d) and channels-last ones (conv_sums_channels_last, the interpreter's tiles)."""
    rng = np.random.default_rng(seed)
    channels, kernel = int(rng.integers(1, 100)), tuple(int(k) for k in rng.integers(1, 6, 2))
    stride, dilation = tuple(int(s) for s in rng.integers(1, 4, 2)), tuple(int(d) for d in rng.integers(1, 3, 2))
    padding = tuple(int(p) for p in rng.integers(0, 3, 4))
    size = [int(rng.integers(max(1, d * (k - 1) + 1 - lo - hi), 20))
            for d, k, lo, hi in zip(dilation, kernel, padding[:2], padding[2:])]
    info = np.iinfo(x_dtype)
    x = rng.integers(info.min, info.max + 1, (int(rng.integers(1, 3)), channels, *size), dtype=x_dtype)
    w = rng.integers(-128, 128, (channels, 1, *kernel), dtype=np.int8)
    zx, zw = int(rng.integers(info.min, info.max + 1)), rng.integers(-128, 128, channels)
    params = dict(x_zero_point=zx, w_zero_point=zw, stride=stride, padding=padding, dilation=dilation,
                  groups=channels)
    if channels_last:
        geometry = conv_geometry(x.shape, x.dtype, w.shape, w.dtype, **params)
        got = conv_sums_channels_last(x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1), geometry).transpose(0, 3, 1, 2)
    else:
        got = conv2d(x, w, **params)
    want = tapwise_int64_conv(x, w, zx, zw, stride, padding, dilation, channels)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(48))
def test_unpadded_row_depthwise_kernel_matches_reference(seed, direct_path_calls):
    """Depthwise layers whose total column padding is the kernel's span - 1 ("same" padding, split any way
    between left and right) take the unpadded-row kernel: strides 1 (one conversion loop over the plane),
    2 (row pairs, odd widths) and 3 (the generic loop), rows cut by any top/bottom padding, 3x3 (one pass,
    when its centre column needs no mask), 5x5 (three passes) and the per-column passes of other kernels.
    Each one is compared with the int64 reference, every output including both ends of every row."""
    rng = np.random.default_rng(seed)
    kh, kw = ((3, 3), (5, 5))[seed // 4 % 2] if seed < 32 else tuple(int(k) for k in rng.integers(1, 6, 2))
    stride = ((1, 1), (2, 2), (2, 2), tuple(int(s) for s in rng.integers(1, 4, 2)))[seed % 4]
    dilation = tuple(int(d) for d in rng.integers(1, 3, 2))
    span_w = dilation[1] * (kw - 1)
    pad_left = int(rng.integers(0, span_w + 1))
    padding = (int(rng.integers(0, 4)), pad_left, int(rng.integers(0, 4)), span_w - pad_left)
    height = int(rng.integers(max(1, dilation[0] * (kh - 1) + 1 - padding[0] - padding[2]), 20))
    width = int(rng.integers(1, 20))
    x_dtype = (np.int8, np.uint8)[seed % 2]
    info = np.iinfo(x_dtype)
    channels = int(rng.integers(1, 12))
    x = rng.integers(info.min, info.max + 1, (int(rng.integers(1, 3)), channels, height, width), dtype=x_dtype)
    w = rng.integers(-128, 128, (channels, 1, kh, kw), dtype=np.int8)
    zx, zw = int(rng.integers(info.min, info.max + 1)), rng.integers(-128, 128, channels)
    got = conv2d(x, w, x_zero_point=zx, w_zero_point=zw, stride=stride, padding=padding, dilation=dilation,
                 groups=channels)
    assert direct_path_calls == ["depthwise_flat"]
    np.testing.assert_array_equal(got, tapwise_int64_conv(x, w, zx, zw, stride, padding, dilation, channels))


@pytest.mark.parametrize("width", [27, 28, 31, 32, 33, 34, 47, 56, 57, 64, 66])
@pytest.mark.parametrize("kernel, padding", [(3, (1, 1, 1, 1)), (5, (2, 2, 2, 2)), (3, (0, 1, 2, 1)),
                                             (5, (1, 2, 0, 2))])
def test_stride_2_rows_split_sixteen_pairs_at_a_time(width, kernel, padding, direct_path_calls):
    """The unpadded-row kernel splits a stride-2 row's column pairs 16 at a time: rows of fewer pairs (zeros
    after them, under rows that are padding too), exactly 16, more (the last 16 overlapping), odd widths; the
    last channel's last rows, whose 32-byte read would pass x's end, take the scalar loop."""
    rng = np.random.default_rng(width * 10 + kernel + padding[0])
    for x_dtype in (np.int8, np.uint8):
        info = np.iinfo(x_dtype)
        x = rng.integers(info.min, info.max + 1, (2, 3, int(rng.integers(kernel, 12)), width), dtype=x_dtype)
        w = rng.integers(-128, 128, (3, 1, kernel, kernel), dtype=np.int8)
        zx = int(rng.integers(info.min, info.max + 1))
        direct_path_calls.clear()
        got = conv2d(x, w, x_zero_point=zx, w_zero_point=-3, stride=(2, 2), padding=padding, groups=3)
        assert direct_path_calls == ["depthwise_flat"]
        np.testing.assert_array_equal(got, tapwise_int64_conv(x, w, zx, -3, (2, 2), padding, (1, 1), 3))


@pytest.mark.parametrize("shape, padding, stride", [
    ((1, 4, 9, 9), (1, 0, 1, 0), (1, 1)),      # no left padding: the columns to the right reach past OW
    ((1, 4, 9, 10), (1, 0, 1, 0), (2, 2)),     # stride 2: the even phase (5 columns) is wider than OW = 4
    ((1, 2, 65, 65), (1, 1, 1, 1), (1, 1)),    # planes over 64 x 64: the padded-row kernel is faster
])
def test_depthwise_layers_outside_the_unpadded_kernel_take_the_padded_one(shape, padding, stride,
                                                                           direct_path_calls):
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, shape, dtype=np.int8)
    w = rng.integers(-128, 128, (shape[1], 1, 3, 3), dtype=np.int8)
    got = conv2d(x, w, x_zero_point=-3, stride=stride, padding=padding, groups=shape[1])
    assert direct_path_calls == ["grouped_conv_taps"]
    np.testing.assert_array_equal(got, tapwise_int64_conv(x, w, -3, 0, stride, padding, (1, 1), shape[1]))


@pytest.mark.parametrize("groups, group_c, per_group, stride, taken", [
    (10, 1, 1, (2, 1), True),      # depthwise
    (6, 1, 3, (2, 1), True),       # depthwise with a channel multiplier
    (16, 3, 2, (2, 1), True),      # many groups of several channels
    (16, 2, 1, (1, 2), True),      # 2, 4 and 8 channels a group: converted as interleaved vectors
    (17, 4, 2, (2, 2), True),
    (16, 8, 1, (1, 1), True),
    (16, 4, 4, (1, 1), True),      # 2, 4 and 8 outputs a group: written as interleaved vectors, 5 one by one
    (16, 2, 8, (2, 1), True),
    (16, 3, 5, (1, 1), True),
    (4, 3, 2, (2, 1), False),      # few groups of several channels: transposed for the NCHW tap kernel
])
def test_channels_last_grouped_tiles_take_their_own_kernel(monkeypatch, groups, group_c, per_group, stride, taken):
    """A grouped tile in the buffers' layout is computed where it lies (no transposes) where the channels-last
    kernel is the faster one (takes_channels_last), and equals the straightforward sums either way."""
    import aipu.sim.golden.fast.channels_last_conv as kernel_module

    calls = []
    kernel = kernel_module.grouped_channels_last
    monkeypatch.setattr(kernel_module, "grouped_channels_last", lambda *args: calls.append(1) or kernel(*args))
    rng = np.random.default_rng(3)
    c, k = groups * group_c, groups * per_group
    x = rng.integers(-128, 128, (1, 9, 11, c), dtype=np.int8)
    w = rng.integers(-128, 128, (k, 3, 3, group_c), dtype=np.int8)
    geometry = conv_geometry((1, c, 9, 11), x.dtype, (k, group_c, 3, 3), w.dtype, x_zero_point=5, stride=stride,
                             padding=(1, 1, 1, 1), groups=groups)
    got = conv_sums_channels_last(x, w, geometry)
    assert bool(calls) == taken
    np.testing.assert_array_equal(got.transpose(0, 3, 1, 2), tapwise_int64_conv(
        x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), 5, 0, stride, (1, 1, 1, 1), (1, 1), groups))


@pytest.mark.parametrize("kernel", [(3, 3), (5, 5), (3, 5), (1, 1), (7, 1), (3, 6)])
@pytest.mark.parametrize("stride, dilation, per_group", [((1, 1), (1, 1), 1), ((2, 1), (2, 2), 1), ((1, 1), (1, 2), 3),
                                                         ((2, 2), (1, 1), 1), ((1, 3), (2, 1), 1), ((2, 2), (1, 1), 2)])
@pytest.mark.parametrize("x_dtype, zx", [(np.int8, -128), (np.int8, 127), (np.uint8, 0), (np.uint8, 255)])
@pytest.mark.parametrize("channels", [19, 7])
def test_unpadded_depthwise_tiles_read_x_unconverted(kernel, stride, dilation, per_group, x_dtype, zx, channels):
    """A depthwise tile with no top/left padding and its windows inside x (a tile whose LOAD wrote the padding)
    is summed from x as it lies, the zero point taken off as -zp * the sum of the tap weights: 19 channels by
    the window kernel (3x3 and 5x5, one output a channel, stride 1 or 2 across), 7 channels (and the other
    kernels) at stride 1 across by the tap passes in every pass structure (one 3x3 pass, five 5x5 passes,
    passes of nine that start and end the sums (3x6), the general passes); the others, and a channel
    multiplier, converted. Row strides and dilations, both byte types at the zero point's extremes, bytes at
    their extremes too."""
    rng = np.random.default_rng(kernel[0] * 7 + kernel[1] + stride[0] * 100 + stride[1] * 10 + per_group * 1000 + zx
                                + channels)
    (kh, kw), (stride_h, stride_w) = kernel, stride
    oh, ow = 3, 5
    height = (oh - 1) * stride_h + dilation[0] * (kh - 1) + 1
    width = (ow - 1) * stride_w + dilation[1] * (kw - 1) + 1 + stride_w // 2   # a column past the windows, or not
    info = np.iinfo(x_dtype)
    x = rng.choice(np.array([info.min, info.max, info.min + 1, 0, 1], x_dtype), (1, height, width, channels))
    x[0, 1] = rng.integers(info.min, info.max + 1, (width, channels), dtype=x_dtype)
    w = rng.integers(-128, 128, (channels * per_group, kh, kw, 1), dtype=np.int8)
    geometry = conv_geometry((1, channels, height, width), x.dtype, (channels * per_group, 1, kh, kw), w.dtype,
                             x_zero_point=zx, w_zero_point=-128, stride=stride, dilation=dilation,
                             groups=channels)
    got = conv_sums_channels_last(x, w, geometry)
    np.testing.assert_array_equal(got.transpose(0, 3, 1, 2), tapwise_int64_conv(
        x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), zx, -128, stride, (0, 0, 0, 0), dilation, channels))


@pytest.mark.parametrize("kernel", [3, 5])
@pytest.mark.parametrize("stride_w, dilation_w", [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (2, 4), (3, 1)])
@pytest.mark.parametrize("channels, ow", [(16, 1), (16, 9), (40, 5), (17, 2), (48, 14)])
def test_depthwise_window_slides_along_chains(kernel, stride_w, dilation_w, channels, ow):
    """The windowed depthwise kernel (16 channels a vector, the last overlapping the one before it) on
    unpadded tiles: windows one tap column apart along chains of pixels (stride 1 at any dilation, stride 2
    at dilation 2 and 4), two apart (stride 2), chains longer and shorter than a row and empty ones (OW
    below the dilation); stride 3 takes the converted planes. Two images, two output rows, row stride 2."""
    rng = np.random.default_rng(kernel * 1000 + stride_w * 100 + dilation_w * 10 + channels + ow)
    oh, stride, dilation = 2, (2, stride_w), (1, dilation_w)
    height = (oh - 1) * 2 + kernel
    width = (ow - 1) * stride_w + dilation_w * (kernel - 1) + 1 + int(rng.integers(0, 3))
    for x_dtype, zx in ((np.int8, -128), (np.uint8, 255), (np.uint8, 7)):
        info = np.iinfo(x_dtype)
        x = rng.integers(info.min, info.max + 1, (2, height, width, channels), dtype=x_dtype)
        w = rng.integers(-128, 128, (channels, kernel, kernel, 1), dtype=np.int8)
        geometry = conv_geometry((2, channels, height, width), x.dtype, (channels, 1, kernel, kernel), w.dtype,
                                 x_zero_point=zx, w_zero_point=3, stride=stride, dilation=dilation, groups=channels)
        got = conv_sums_channels_last(x, w, geometry)
        np.testing.assert_array_equal(got.transpose(0, 3, 1, 2), tapwise_int64_conv(
            x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), zx, 3, stride, (0, 0, 0, 0), dilation, channels))


@pytest.mark.parametrize("stride_w, dilation_w", [(1, 1), (1, 2), (2, 1), (3, 1)])
@pytest.mark.parametrize("groups, group_c, per_group, kernel", [(16, 4, 4, 3), (17, 4, 4, 3), (32, 4, 4, 3),
                                                                 (16, 4, 4, 5), (16, 4, 8, 3), (16, 2, 2, 3)])
def test_grouped_tiles_in_groups_of_four_slide_a_window(groups, group_c, per_group, kernel, stride_w, dilation_w):
    """Channels-last 3x3 convs (16 groups or more) in groups of 4 channels and 4 outputs take the window
    kernel, each input channel of a group reaching each output through a rotation inside the group: 64, 68
    (the last vector overlapping the one before by 13 groups) and 128 channels, strides 1, 2 and 3 (the last
    converted), dilation 2; 5x5 kernels, 8 outputs a group and groups of 2 take the other paths. Every output
    against the int64 reference, both byte types."""
    rng = np.random.default_rng(groups * 100 + group_c * 10 + per_group + kernel + stride_w * 7 + dilation_w * 3)
    channels, k, oh, ow = groups * group_c, groups * per_group, 2, 6
    height = oh - 1 + kernel
    width = (ow - 1) * stride_w + dilation_w * (kernel - 1) + 1
    for x_dtype, zx in ((np.int8, -5), (np.uint8, 255)):
        info = np.iinfo(x_dtype)
        x = rng.integers(info.min, info.max + 1, (2, height, width, channels), dtype=x_dtype)
        w = rng.integers(-128, 128, (k, kernel, kernel, group_c), dtype=np.int8)
        geometry = conv_geometry((2, channels, height, width), x.dtype, (k, group_c, kernel, kernel), w.dtype,
                                 x_zero_point=zx, w_zero_point=-7, stride=(1, stride_w), dilation=(1, dilation_w),
                                 groups=groups)
        got = conv_sums_channels_last(x, w, geometry)
        np.testing.assert_array_equal(got.transpose(0, 3, 1, 2), tapwise_int64_conv(
            x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), zx, -7, (1, stride_w), (0, 0, 0, 0), (1, dilation_w),
            groups))


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("weight", [2001, 5285])
@pytest.mark.parametrize("channels", [16, 8])
def test_unconverted_depthwise_sums_stay_within_float32(weight, stride, channels):
    """The unconverted paths' partial sums reach sum |w| * (|x| + |zp|) where the converted planes' reach
    sum |w| * |x - zp|: with x = zp = 127 and 25 odd weights of 5285 the planes hold zeros, while
    -zp * sum w = -16779875 is no float32 (over 2**24, odd): the kernel converts instead, and the sums are 0.
    Weights of 2001 keep both within 2**24: the unconverted path, exact. 16 channels take the window kernel
    at both strides, 8 the tap passes at stride 1 (the planes at stride 2)."""
    from aipu.sim.golden.fast.channels_last_conv import grouped_channels_last, repeated_group_weights, window_weights

    x = np.full((1, 5, 5, channels), 127, np.int8)
    x[0, 2, 2, ::2] = -128          # the centre tap far from the zero point on every other channel
    ws = np.full((channels, 25, 1), weight, np.float32)
    out = np.empty((1, 1, 1, channels), np.int32)
    grouped_channels_last(x, 127, repeated_group_weights(ws, channels), window_weights(ws, channels), 5, 5, stride,
                          stride, 0, 0, 1, 1, out)
    want = np.einsum("ntc,ct->nc", x.reshape(1, 25, channels).astype(np.int64) - 127, ws[:, :, 0].astype(np.int64))
    np.testing.assert_array_equal(out.reshape(1, channels), want)



@pytest.mark.parametrize("count", [0, 1, 17, 1000])
def test_kernel_buffers_start_on_a_cache_line(count):
    """The grouped kernels' weights and scratch buffers begin on a 64-byte line, whole and zeroed where asked
    (numba's own arrays are aligned to 32 bytes only)."""
    from aipu.sim.golden.fast.channels_last_conv import repeated_group_weights
    from aipu.sim.golden.fast.grouped_conv import _aligned_empty, _aligned_zeros

    @numba.njit
    def buffers(count):
        empty, zeros = _aligned_empty(count, np.float32), _aligned_zeros(count, np.int64)
        return empty.ctypes.data % 64, empty.size, zeros.ctypes.data % 64, zeros.size, zeros.sum()

    assert buffers(count) == (0, count, 0, count, 0)
    for groups in (3, 16, 144):
        assert repeated_group_weights(np.ones((groups, 9, 1), np.float32), groups).ctypes.data % 64 == 0


@pytest.mark.parametrize("groups", [1, 5, 15, 16, 17, 32, 255, 256, 300])
@pytest.mark.parametrize("per_group, group_c, taps", [(1, 1, 9), (1, 1, 25), (2, 3, 9), (4, 4, 1)])
def test_repeated_group_weights_repeat_whole_pixels_and_sum_each_lane(groups, per_group, group_c, taps):
    """repeated_group_weights' lines, as numpy lays them out: virtual tap c*KH*KW + t of output o holds the
    groups' weights ws[g*Kg + o, t, c] in lane g of every pixel of about 256 floats, then the lines of their
    sums and of their magnitudes' sums. Pixels shorter and longer than a vector, one pixel or many."""
    from aipu.sim.golden.fast.channels_last_conv import SUM_LINES, repeated_group_weights

    rng = np.random.default_rng(groups * 100 + taps)
    ws = rng.integers(-255, 256, (groups * per_group, taps, group_c)).astype(np.float32)
    virtual, copies = group_c * taps, max(1, 256 // groups)
    by_output = ws.reshape(groups, per_group, taps, group_c).transpose(1, 3, 2, 0).reshape(per_group, virtual, groups)
    lines = np.tile(by_output, (1, 1, copies))
    expected = np.concatenate([lines, lines.sum(axis=1, keepdims=True), np.abs(lines).sum(axis=1, keepdims=True)],
                              axis=1)
    assert SUM_LINES == 2
    np.testing.assert_array_equal(repeated_group_weights(ws, groups), expected)

@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), groups=st.sampled_from([1, 1, 2, 3, 16]), wide=st.booleans())
def test_channels_last_sums_equal_conv2d(seed, groups, wide):
    """conv_sums_channels_last (the interpreter's path: channels-last operands, no transposes) against conv2d
    on the same operands transposed, on the GEMM path (many outputs, or a reduction beyond float32's exact
    range) and the direct one (few channels)."""
    rng = np.random.default_rng(seed)
    cg, kg = int(rng.choice([1, 3, 20])), int(rng.choice([1, 4, 17]))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    stride, dilation = tuple(int(v) for v in rng.integers(1, 3, 2)), tuple(int(v) for v in rng.integers(1, 3, 2))
    padding = tuple(int(v) for v in rng.integers(0, 3, 4))
    h, wd = (int(d * (kernel - 1) + 1 + rng.integers(0, 6)) for d, kernel in zip(dilation, (kh, kw)))
    x = rng.integers(-128, 128, (int(rng.integers(1, 3)), h, wd, cg * groups), dtype=np.int8)
    w = rng.integers(-128, 128, (kg * groups, kh, kw, cg), dtype=np.int8)
    zw = rng.integers(-128, 128, kg * groups) if seed % 2 else int(rng.integers(-128, 128))
    params = dict(x_zero_point=int(rng.integers(-128, 128)), w_zero_point=zw, stride=stride, padding=padding,
                  dilation=dilation, groups=groups)
    expected = conv2d(x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), wide=True, **params).transpose(0, 2, 3, 1)
    geometry = conv_geometry((x.shape[0], x.shape[3], h, wd), x.dtype, (w.shape[0], cg, kh, kw), w.dtype, **params)
    got = conv_sums_channels_last(x, w, geometry, wide=wide)
    np.testing.assert_array_equal(got, expected)
