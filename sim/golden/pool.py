"""The pooling unit: max, average (exact division, selectable rounding) and global average.

docs/arithmetic.md §7. Layout NCHW, int8/uint8/int16, same quantization in and out (pass-through
ops, Zhouyi whitepaper §4.4/§4.43). Padding (top, left, bottom, right): max pooling ignores padded taps; average
pooling treats them as real zeros (stored value x_zero_point) and divides either by the full kernel
size (count_include_pad=True) or by the number of taps inside the image (False, ONNX default).
The module opens with the definitions in int64 numpy over the padded input's windows; the public functions
check their arguments and run the kernels of aipu.sim.golden.fast.pool, which
tests/sim/golden/test_pool_kernels.py checks against the definitions.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from aipu.sim.machine.arch import ACC_BITS, bit_range
from aipu.sim.golden.fast import kernels
from aipu.sim.golden._checks import QUANT_DTYPES, check_array, check_int, check_int_tuple, dtype_range
from aipu.sim.golden.rounding import check_rounding, rounding_divide


# The definition (docs/arithmetic.md §7). x is [N, C, H, W]; kernel, stride and dilation are (height, width)
# pairs and padding is (top, left, bottom, right), as the public functions check them.

def windows(x: np.ndarray, kernel, stride, padding, dilation, fill) -> np.ndarray:
    """The windows of x padded with ``fill``: [N, C, OH, OW, KH, KW], tap (i, j) of output (y, x') being
    padded[y * sh + i * dh, x' * sw + j * dw]."""
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = kernel, stride, dilation, padding
    padded = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    view = sliding_window_view(padded, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    return view[:, :, ::sh, ::sw, ::dh, ::dw]


def max_pool(x: np.ndarray, kernel, stride, padding, dilation) -> np.ndarray:
    """The largest tap of each window; padded taps hold the type's minimum, so they never win."""
    return windows(x, kernel, stride, padding, dilation, np.iinfo(x.dtype).min).max(axis=(4, 5))


def avg_pool(x: np.ndarray, kernel, stride, padding, count_include_pad: bool, zero_point: int,
             rounding: str) -> np.ndarray:
    """rounding_divide(S, D, mode) + zp, S the window's sum of x - zp (padded taps are real zeros) within
    ACC_BITS, D = KH * KW (count_include_pad) or the number of the window's taps inside the image."""
    sums = windows(x.astype(np.int64) - zero_point, kernel, stride, padding, (1, 1), 0).sum(axis=(4, 5))
    check_window_sums(sums)
    if count_include_pad:
        divisor = np.int64(kernel[0] * kernel[1])
    else:
        inside = np.ones((1, 1, *x.shape[2:]), np.int64)
        divisor = windows(inside, kernel, stride, padding, (1, 1), 0).sum(axis=(4, 5))
    return (rounding_divide(sums, divisor, rounding) + zero_point).astype(x.dtype)


def global_average(x: np.ndarray, zero_point: int, rounding: str) -> np.ndarray:
    """[N, C, 1, 1]: rounding_divide(S, H * W, mode) + zp, S the plane's sum of x - zp within ACC_BITS."""
    sums = (x.astype(np.int64) - zero_point).sum(axis=(2, 3), keepdims=True)
    check_window_sums(sums)
    return (rounding_divide(sums, np.int64(x.shape[2] * x.shape[3]), rounding) + zero_point).astype(x.dtype)


def check_window_sums(sums: np.ndarray) -> None:
    """OverflowError naming the sum farthest out where a window sum leaves the ACC_BITS accumulator."""
    if sums.size:
        _check_sum(int(sums.min()), int(sums.max()))


# The public functions: checks, then the kernels.

def _geometry(x: np.ndarray, kernel, stride, padding, dilation):
    """((kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr), (oh, ow)) after validating the geometry."""
    if x.ndim != 4:
        raise ValueError(f"x must be 4-D [N, C, H, W], got shape {x.shape}")
    kh, kw = check_int_tuple("kernel", kernel, 2, 1)
    sh, sw = check_int_tuple("stride", (kh, kw) if stride is None else stride, 2, 1)
    dh, dw = check_int_tuple("dilation", dilation, 2, 1)
    pt, pl, pb, pr = check_int_tuple("padding", padding, 4, 0)
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    if max(pt, pb) >= span_h or max(pl, pr) >= span_w:
        raise ValueError(f"padding {padding} must be smaller than the kernel extent {span_h}x{span_w}")
    h, w = x.shape[2] + pt + pb, x.shape[3] + pl + pr
    if span_h > h or span_w > w:
        raise ValueError(f"kernel extent {span_h}x{span_w} does not fit padded input {h}x{w}")
    return (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr), ((h - span_h) // sh + 1, (w - span_w) // sw + 1)


def _planes(x: np.ndarray) -> np.ndarray:
    """x as C-contiguous [N * C, H, W], the kernels' layout."""
    return np.ascontiguousarray(x).reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def max_pool2d(x: np.ndarray, kernel, *, stride=None, padding=(0, 0, 0, 0), dilation=(1, 1)) -> np.ndarray:
    """Window maximum; padded taps hold the dtype minimum so they never win (stride defaults to kernel)."""
    check_array("x", x, QUANT_DTYPES)
    (kh, kw), (sh, sw), (dh, dw), (pt, pl, _, _), (oh, ow) = _geometry(x, kernel, stride, padding, dilation)
    out = np.empty((*x.shape[:2], oh, ow), x.dtype)
    kernels("pool").max_pool(_planes(x), kh, kw, sh, sw, pt, pl, dh, dw, dtype_range(x.dtype)[0],
                                      out.reshape(-1, oh, ow))
    return out


def avg_pool2d(x: np.ndarray, kernel, *, stride=None, padding=(0, 0, 0, 0), count_include_pad: bool = False,
               x_zero_point=0, rounding: str = "half_up") -> np.ndarray:
    """round(sum(x - zp) / divisor) + zp, with the exact rational division of :func:`rounding_divide`."""
    module = kernels("pool")
    check_array("x", x, QUANT_DTYPES)
    check_rounding(rounding)
    zp = check_int("x_zero_point", x_zero_point, *dtype_range(x.dtype))
    (kh, kw), (sh, sw), _, (pt, pl, _, _), (oh, ow) = _geometry(x, kernel, stride, padding, (1, 1))
    if not count_include_pad and 0 in x.shape[2:]:
        raise ValueError("divisor=0 must be positive")   # no pixel inside any window: rounding_divide's error
    out = np.empty((*x.shape[:2], oh, ow), x.dtype)
    sums = module.avg_pool(_planes(x), zp, kh, kw, sh, sw, pt, pl, bool(count_include_pad),
                           module.ROUNDING_CODES[rounding], out.reshape(-1, oh, ow))
    _check_sum(*sums)
    return out


def global_avg_pool(x: np.ndarray, *, x_zero_point=0, rounding: str = "half_up") -> np.ndarray:
    """Average over H x W -> [N, C, 1, 1]: round(sum(x - zp) / (H * W)) + zp."""
    module = kernels("pool")
    check_array("x", x, QUANT_DTYPES)
    if x.ndim != 4:
        raise ValueError(f"x must be 4-D [N, C, H, W], got shape {x.shape}")
    check_rounding(rounding)
    zp = check_int("x_zero_point", x_zero_point, *dtype_range(x.dtype))
    if 0 in x.shape[2:]:
        raise ValueError("divisor=0 must be positive")   # no pixel to average: rounding_divide's error
    out = np.empty((*x.shape[:2], 1, 1), x.dtype)
    sums = module.global_avg_pool(np.ascontiguousarray(x).reshape(-1, x.shape[2] * x.shape[3]), zp,
                                  module.ROUNDING_CODES[rounding], out.reshape(-1))
    _check_sum(*sums)
    return out


def _check_sum(smallest: int, largest: int) -> None:
    low, high = bit_range(ACC_BITS, signed=True)
    if smallest < low or largest > high:
        worst = int(smallest if -smallest > largest else largest)
        raise OverflowError(f"avg_pool: window sum {worst} does not fit in int{ACC_BITS}")
