"""The pooling unit: max, average (exact division, selectable rounding) and global average.

docs/arithmetic.md §7. Layout NCHW, int8/uint8/int16, same quantization in and out (pass-through
ops, S003 §4.4/§4.43). Padding (top, left, bottom, right): max pooling ignores padded taps; average
pooling treats them as real zeros (stored value x_zero_point) and divides either by the full kernel
size (count_include_pad=True) or by the number of taps inside the image (False, ONNX default).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from aipu.sim.machine.arch import ACC_BITS, bit_range
from aipu.sim.golden._checks import QUANT_DTYPES, check_array, check_int, check_int_tuple, dtype_range
from aipu.sim.golden.rounding import check_rounding, rounding_divide


def _windows(x: np.ndarray, kernel, stride, padding, dilation, fill):
    """Padded sliding windows [N, C, OH, OW, KH, KW] (a view) after validating the geometry."""
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
    padded = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    return sliding_window_view(padded, (span_h, span_w), axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]


def max_pool2d(x: np.ndarray, kernel, *, stride=None, padding=(0, 0, 0, 0), dilation=(1, 1)) -> np.ndarray:
    """Window maximum; padded taps hold the dtype minimum so they never win (stride defaults to kernel)."""
    check_array("x", x, QUANT_DTYPES)
    windows = _windows(x, kernel, stride, padding, dilation, dtype_range(x.dtype)[0])
    return windows.max(axis=(4, 5))


def avg_pool2d(x: np.ndarray, kernel, *, stride=None, padding=(0, 0, 0, 0), count_include_pad: bool = False,
               x_zero_point=0, rounding: str = "half_up") -> np.ndarray:
    """round(sum(x - zp) / divisor) + zp, with the exact rational division of :func:`rounding_divide`."""
    check_array("x", x, QUANT_DTYPES)
    check_rounding(rounding)
    zp = check_int("x_zero_point", x_zero_point, *dtype_range(x.dtype))
    centred = x.astype(np.int64) - zp
    sums = _windows(centred, kernel, stride, padding, (1, 1), 0).sum(axis=(4, 5))
    if count_include_pad:
        divisor = np.int64(np.prod(check_int_tuple("kernel", kernel, 2, 1)))
    else:
        inside = np.ones((1, 1) + x.shape[2:], dtype=np.int64)
        divisor = _windows(inside, kernel, stride, padding, (1, 1), 0).sum(axis=(4, 5))
    _check_sum(sums)
    return (rounding_divide(sums, divisor, rounding) + zp).astype(x.dtype)


def global_avg_pool(x: np.ndarray, *, x_zero_point=0, rounding: str = "half_up") -> np.ndarray:
    """Average over H x W -> [N, C, 1, 1]: round(sum(x - zp) / (H * W)) + zp."""
    check_array("x", x, QUANT_DTYPES)
    if x.ndim != 4:
        raise ValueError(f"x must be 4-D [N, C, H, W], got shape {x.shape}")
    check_rounding(rounding)
    zp = check_int("x_zero_point", x_zero_point, *dtype_range(x.dtype))
    sums = (x.astype(np.int64) - zp).sum(axis=(2, 3), keepdims=True)
    _check_sum(sums)
    return (rounding_divide(sums, x.shape[2] * x.shape[3], rounding) + zp).astype(x.dtype)


def _check_sum(sums: np.ndarray) -> None:
    low, high = bit_range(ACC_BITS, signed=True)
    if sums.size and (sums.min() < low or sums.max() > high):
        worst = int(sums.min() if -sums.min() > sums.max() else sums.max())
        raise OverflowError(f"avg_pool: window sum {worst} does not fit in int{ACC_BITS}")
