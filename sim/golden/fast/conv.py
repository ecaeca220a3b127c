"""conv2d's and matmul's fast paths: exact sums from float32 BLAS GEMMs and numba tap kernels.

Exact arithmetic on floating-point BLAS (why the GEMMs below are bit-exact):
every operand is an integer with |v| <= 2**(MAC_OPERAND_BITS-1) - 1 = 255, so each product is an
integer with |p| <= 255 * 255 < 2**16. We split the reduction into chunks of ``L`` terms with
L * max|a| * max|b| <= 2**24. Every partial sum the BLAS kernel can form, in any order and with or
without FMA, is a sum of a subset of a chunk's products, hence an integer of magnitude <= 2**24,
which float32 represents exactly; so every float32 operation is exact (no rounding ever happens).
Chunk results (exact integers <= 2**24) are summed in float64, exact while the running total stays
below 2**53, i.e. for fewer than 2**29 chunks -- far beyond any tensor that fits in memory.
(OpenBLAS uses classical, not Strassen-like, multiplication.)

Grouped and depthwise convs with few channels per group (C/G <= 16), and convs with few input and output
channels (C, K <= 16: a depthwise layer's tile of one channel), skip the GEMM, whose calls would be tiny:
a numba kernel (grouped_conv.py, channels_last_conv.py) multiply-adds the kernel taps into float32 output
planes. It is taken only when the whole reduction is one chunk, C/G * KH * KW * max|a| * max|b| <= 2**24, so
every partial sum is again an integer of magnitude <= 2**24 and exact, in any order, and the final sum fits
ACC_BITS without a check (a larger reduction takes the GEMM path and its check).

This module itself needs only numpy (sim/golden/conv.py imports it); the numba kernels load on first use.
tests/sim/golden/test_conv.py checks every path against the definition in sim/golden/conv.py.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from aipu.sim.machine.arch import ACC_BITS, ACC_DTYPE, MAC_OPERAND_MAX, bit_range
from aipu.sim.golden.fast import kernels
from aipu.sim.golden._checks import check_accumulator, dtype_range

if TYPE_CHECKING:
    from aipu.sim.golden.conv import ConvGeometry

_FLOAT32_EXACT = 2 ** 24
_DIRECT_MAX_GROUP_CHANNELS = 16  # grouped convs with at most this many channels per group skip the GEMM
_ACC_MAX = bit_range(ACC_BITS, signed=True)[1]
_PRODUCT_MAX = MAC_OPERAND_MAX * MAC_OPERAND_MAX   # the largest product of two operands
_GEMM_BLOCK = 1 << 17   # im2col values per GEMM call of conv_sums (512 KB of float32), ...
_GEMM_MIN_PIXELS = 1024   # ... unless that leaves a GEMM fewer output pixels than this (skinny GEMMs run slower)
# Depthwise layers whose input planes are at most this large and kernels at most this tall take the unpadded-row
# kernel; larger ones the padded-row kernel, which is faster there.
_FLAT_DEPTHWISE_MAX_PLANE = 64 * 64
_FLAT_DEPTHWISE_MAX_KERNEL = 5
_CHANNELS_LAST_MIN_GROUPS = 16   # several channels per group: the channels-last kernel from this many groups


def minus_zero_point(value: np.ndarray, zp: np.ndarray, zp_axis: int) -> np.ndarray:
    """value - zp as float32 (zp a checked int64 scalar or per-channel vector).

    Exact: a byte minus a zero point in the byte's own range is at most MAC_OPERAND_MAX in magnitude."""
    operand = value.astype(np.float32)
    if zp.ndim == 1:
        shape = [1] * value.ndim
        shape[zp_axis] = zp.shape[0]
        operand -= zp.reshape(shape).astype(np.float32)
    elif zp:
        operand -= np.float32(zp)
    return operand


def exact_matmul(op: str, a: np.ndarray, b: np.ndarray, wide: bool = False) -> np.ndarray:
    """a @ b for float32 arrays holding integers (|v| <= MAC_OPERAND_MAX), exactly, checked against int32.

    Reduces over the last axis of ``a`` / second-to-last of ``b`` in exact float32 chunks (see the
    module docstring for the bound) and returns int32; ``wide`` returns the exact int64 sums unchecked.
    """
    depth = a.shape[-1]
    if depth * _PRODUCT_MAX <= _FLOAT32_EXACT:      # one chunk whatever the values: no pass over them
        chunk = depth
    else:
        worst_product = float(np.abs(a).max(initial=0.0)) * float(np.abs(b).max(initial=0.0))
        chunk = depth if worst_product * depth <= _FLOAT32_EXACT else max(1, int(_FLOAT32_EXACT // worst_product))
    if chunk >= depth:
        total = np.matmul(a, b)         # float32 integers within 2**24: exact as they are
    else:
        total = None
        for start in range(0, depth, chunk):
            part = np.matmul(a[..., start:start + chunk], b[..., start:start + chunk, :]).astype(np.float64)
            total = part if total is None else total + part
    if wide:
        return total.astype(np.int64)
    if total.size and depth * _PRODUCT_MAX > _ACC_MAX:   # else no sum of ``depth`` products can leave int32
        check_accumulator(op, total.min(), total.max())
    return total.astype(ACC_DTYPE)


def conv_sums(x: np.ndarray, w: np.ndarray, geometry: ConvGeometry, *, wide: bool = False) -> np.ndarray:
    """conv2d's sums on operands of the shapes and types ``geometry`` was checked for: the numba tap kernels
    where they take the conv, else exact float32 GEMMs (int32, or with ``wide`` the exact sums unchecked)."""
    n = x.shape[0]
    k, cg, kh, kw = w.shape
    ws = minus_zero_point(w, geometry.w_zero_point, 0)
    if _takes_direct_path(x, geometry, ws):
        return _direct_grouped_conv(x, geometry.x_zero_point, ws, geometry)
    windows = _windows(minus_zero_point(x, np.int64(geometry.x_zero_point), 0), geometry, (2, 3))
    groups, (oh, ow) = geometry.groups, geometry.out_hw
    depth = cg * kh * kw
    weights = ws.reshape(groups, k // groups, depth)
    # windows[n, c, oh, ow, i, j] = xs[n, c, oh*sh + i*dh, ow*sw + j*dw]; cols [N, G, C/G*KH*KW, pixels]
    block_rows = max(-(-_GEMM_MIN_PIXELS // ow), _GEMM_BLOCK // max(1, n * groups * depth * ow))   # n may be 0
    if block_rows >= oh or (depth * _PRODUCT_MAX > _ACC_MAX and not wide):   # one GEMM, its check over all sums
        cols = windows.transpose(0, 1, 4, 5, 2, 3).reshape(n, groups, depth, oh * ow)
        return exact_matmul("conv2d", weights, cols, wide).reshape(n, k, oh, ow)
    # Blocks of output rows: the im2col copy and the GEMM's result stay in cache, where whole-layer
    # temporaries (megabytes on a 7x7 stem) cost more than the GEMM in page faults.
    # No sum of ``depth`` products here can leave int32 (or ``wide`` wants them unchecked): no check is split.
    out = np.empty((n, groups, k // groups, oh * ow), np.int64 if wide else ACC_DTYPE)
    for top in range(0, oh, block_rows):
        bottom = min(oh, top + block_rows)
        cols = windows[:, :, top:bottom].transpose(0, 1, 4, 5, 2, 3).reshape(n, groups, depth, (bottom - top) * ow)
        out[..., top * ow:bottom * ow] = exact_matmul("conv2d", weights, cols, wide)
    return out.reshape(n, k, oh, ow)


def conv_sums_channels_last(x: np.ndarray, w: np.ndarray, geometry: ConvGeometry, *, wide: bool = False) -> np.ndarray:
    """:func:`conv_sums` on channels-last operands, as the NPU's buffers hold them: x [N, H, W, C] and
    w [K, KH, KW, C/G] give sums [N, OH, OW, K] (``geometry`` made for the NCHW shapes). The GEMM's rows come
    straight from the channels-last windows and its result is already channels-last: no operand or result
    is transposed (conv_sums on transposed views would copy them)."""
    n, k = x.shape[0], w.shape[0]
    _, kh, kw, cg = w.shape
    groups, (oh, ow) = geometry.groups, geometry.out_hw
    ws = minus_zero_point(w, geometry.w_zero_point, 0)
    if _takes_direct_path(x, geometry, ws):
        if takes_channels_last(groups, cg):
            return _grouped_channels_last(x, ws, geometry)
        sums = _direct_grouped_conv(x.transpose(0, 3, 1, 2), geometry.x_zero_point, ws.transpose(0, 3, 1, 2),
                                    geometry)
        return sums.transpose(0, 2, 3, 1)
    windows = _windows(minus_zero_point(x, np.int64(geometry.x_zero_point), 0), geometry, (1, 2))
    # windows[n, oh, ow, c, i, j] = xs[n, oh*sh + i*dh, ow*sw + j*dw, c]; rows ordered as w: [i][j][c in group]
    rows = windows.transpose(0, 1, 2, 4, 5, 3).reshape(n * oh * ow, kh * kw, groups, cg)
    rows = rows.transpose(2, 0, 1, 3).reshape(groups, n * oh * ow, kh * kw * cg)
    weights = ws.reshape(groups, k // groups, kh * kw * cg).transpose(0, 2, 1)
    out = exact_matmul("conv2d", rows, weights, wide)          # [G, N*OH*OW, Kg]
    return out.transpose(1, 0, 2).reshape(n, oh, ow, k)


def _windows(xs: np.ndarray, geometry: ConvGeometry, axes: tuple[int, int]) -> np.ndarray:
    """The padded input's kernel windows as a view: the spatial ``axes`` become output positions, two new
    last axes the kernel taps."""
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = geometry.stride, geometry.padding, geometry.dilation
    kh, kw = geometry.w_shape[2:]
    oh, ow = geometry.out_hw
    index = [slice(None)] * xs.ndim
    index[axes[0]], index[axes[1]] = slice(0, (oh - 1) * sh + 1, sh), slice(0, (ow - 1) * sw + 1, sw)
    if kh == kw == 1 and not (pt or pl or pb or pr):
        # a 1x1 kernel's windows are the (strided) pixels themselves: a basic slice, no sliding_window_view
        # (which costs more than the GEMM on the one-row tiles of a pointwise layer)
        return xs[tuple(index)][..., None, None]
    if pt or pl or pb or pr:
        pads = [(0, 0)] * xs.ndim
        pads[axes[0]], pads[axes[1]] = (pt, pb), (pl, pr)
        xs = np.pad(xs, pads)  # zeros = the zero point, subtracted
    windows = sliding_window_view(xs, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=axes)[..., ::dh, ::dw]
    return windows[tuple(index)]


def takes_channels_last(groups: int, group_c: int) -> bool:
    """Whether a grouped conv on channels-last operands takes the channels-last kernel
    (channels_last_conv.grouped_channels_last) rather than transposes around the NCHW tap kernel: every
    depthwise-like conv (one input channel per group), and several channels per group from
    _CHANNELS_LAST_MIN_GROUPS groups on. Its vector loops run over the groups: with 4-8 groups of 8-16
    channels, transposing was as fast or faster on 3x3 tiles."""
    return groups > 1 and (group_c == 1 or groups >= _CHANNELS_LAST_MIN_GROUPS)


def _takes_direct_path(x: np.ndarray, geometry: ConvGeometry, ws: np.ndarray) -> bool:
    """Whether the numba tap kernel computes this conv: few input channels per group and few outputs per
    call (grouped, or a dense conv of at most 16 output channels, e.g. one channel of a depthwise layer),
    and every partial sum exact in float32."""
    k, cg, kh, kw = geometry.w_shape
    few_outputs = geometry.groups > 1 or k <= _DIRECT_MAX_GROUP_CHANNELS
    return (cg <= _DIRECT_MAX_GROUP_CHANNELS and few_outputs
            and _direct_sums_exact(x, ws, cg * kh * kw, geometry))


def _direct_sums_exact(x: np.ndarray, ws: np.ndarray, reduction: int, geometry: ConvGeometry) -> bool:
    """Whether every partial sum of a ``reduction``-term output is within 2**24 (exact in float32): first
    under the bounds of both operands' types and zero points, which need no pass over either (a depthwise or
    small-group kernel always fits them: 25 taps of 255 x 255), then under w's actual values and the bound of
    x's type, then under x's actual values too."""
    zx = geometry.x_zero_point
    lo, hi = dtype_range(x.dtype)
    x_bound = max(hi - zx, zx - lo)
    w_lo, w_hi = dtype_range(geometry.w_dtype)
    zw = geometry.w_zero_point          # a scalar or one per output channel (0 included: a looser bound)
    # a scalar's bounds without numpy's reductions
    zw_lo, zw_hi = (int(zw), int(zw)) if zw.ndim == 0 else (int(zw.min(initial=0)), int(zw.max(initial=0)))
    w_bound = max(w_hi - min(zw_lo, 0), max(zw_hi, 0) - w_lo)
    if reduction * x_bound * w_bound <= _FLOAT32_EXACT:
        return True
    w_operand_max = float(np.abs(ws).max(initial=0.0))
    if reduction * x_bound * w_operand_max <= _FLOAT32_EXACT:
        return True
    x_operand_max = max(int(x.max(initial=zx)) - zx, zx - int(x.min(initial=zx)))  # padding contributes 0
    return reduction * x_operand_max * w_operand_max <= _FLOAT32_EXACT


def _direct_grouped_conv(x: np.ndarray, x_zero_point: int, ws: np.ndarray, geometry: ConvGeometry) -> np.ndarray:
    """Grouped/depthwise conv with few channels per group, where a per-group GEMM is mostly overhead.

    x: int8/uint8 [N, C, H, W]; ws: float32 operands [K, C/G, KH, KW]. Multiply-adds over the kernel taps
    (numba, float32, exact under the caller's bound) with no tensor-sized temporaries; returns int32 sums.
    """
    module = kernels("grouped_conv")
    k, cg, kh, kw = ws.shape
    height, width = x.shape[2:]
    out = np.empty((x.shape[0], k, *geometry.out_hw), ACC_DTYPE)
    flat = (cg == 1 and k == x.shape[1] and kh <= _FLAT_DEPTHWISE_MAX_KERNEL
            and height * width <= _FLAT_DEPTHWISE_MAX_PLANE
            and module.flat_depthwise_fits(width, geometry.out_hw[1], kw, geometry.stride[1], geometry.padding[1],
                                           geometry.dilation[1]))
    kernel = module.depthwise_flat if flat else module.grouped_conv_taps
    kernel(np.ascontiguousarray(x), x_zero_point, np.ascontiguousarray(ws).reshape(k, cg * kh * kw), kh, kw,
           *geometry.stride, *geometry.padding[:2], *geometry.dilation, out)
    return out


def _grouped_channels_last(x: np.ndarray, ws: np.ndarray, geometry: ConvGeometry) -> np.ndarray:
    """A grouped conv on channels-last x [N, H, W, C] and float32 operands ws [K, KH, KW, C/G], with no
    transposes in or out (faster than transposing around the NCHW tap kernel on the tiles it takes)."""
    module = kernels("channels_last_conv")
    k, kh, kw, cg = ws.shape
    out = np.empty((x.shape[0], *geometry.out_hw, k), ACC_DTYPE)
    by_tap = np.ascontiguousarray(ws).reshape(k, kh * kw, cg)
    repeated = module.repeated_group_weights(by_tap, geometry.groups)
    windowed = module.window_weights(by_tap, geometry.groups)
    module.grouped_channels_last(np.ascontiguousarray(x), geometry.x_zero_point, repeated, windowed, kh, kw,
                                 *geometry.stride, *geometry.padding[:2], *geometry.dilation, out)
    return out


