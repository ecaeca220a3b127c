"""MAC-array units: convolution (groups, depthwise, stride, dilation, asymmetric padding) and matmul/FC.

Contract (docs/arithmetic.md §3): every multiplier operand is ``value - zero_point``, a signed
``MAC_OPERAND_BITS``-bit number; padded taps hold the input zero point, so they contribute exactly 0;
products are summed in a wrapping ``ACC_BITS``-bit accumulator. Because two's-complement addition
is associative modulo 2**ACC_BITS, the register holds the exact sum whatever the hardware's
accumulation order, provided the exact final sum fits; the golden model therefore checks the
final sum of every output and raises OverflowError otherwise (the compiler must prove it cannot).
The bias is not added here: the requantizer adds it at REQUANT_SUM_BITS.

The module opens with the definition in int64 numpy. The public functions check their arguments and compute
through aipu.sim.golden.fast.conv: float32 BLAS GEMMs and numba tap kernels whose every partial sum is an
exact float32 integer (the argument is in that module and in docs/arithmetic.md §3.4);
tests/sim/golden/test_conv.py checks them against the definition.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from aipu.sim.machine.arch import ACC_DTYPE
from aipu.sim.golden.fast import conv as fast_conv
from aipu.sim.golden._checks import (BYTE_DTYPES, check_accumulator, check_array, check_int, check_int_param,
                                     check_int_tuple, dtype_range, plain_scalars)


# The definition (docs/arithmetic.md §3)

def convolution(x: np.ndarray, w: np.ndarray, x_zero_point: int, w_zero_point, stride, padding, dilation,
                groups: int) -> np.ndarray:
    """The exact sums, int64 [N, K, OH, OW]: output k of group g = k // (K/G) at (y, x') is the sum over its
    group's input channels c and the taps (i, j) of (x - zx)[n, g*C/G + c, y*sh + i*dh - pt, x'*sw + j*dw - pl]
    * (w - zw)[k, c, i, j], a tap in the padding being 0 (it holds the zero point). x [N, C, H, W],
    w [K, C/G, KH, KW], zw a scalar or one per output channel; stride, dilation (height, width), padding
    (top, left, bottom, right)."""
    n, c, height, width = x.shape
    k, group_c, kh, kw = w.shape
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = stride, padding, dilation
    oh = (height + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (width + pl + pr - dw * (kw - 1) - 1) // sw + 1
    xs = np.pad(x.astype(np.int64) - x_zero_point, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    ws = w.astype(np.int64) - np.reshape(w_zero_point, (-1, 1, 1, 1))
    xs = xs.reshape(n, groups, group_c, *xs.shape[2:])          # [N, G, C/G, H + pt + pb, W + pl + pr]
    ws = ws.reshape(groups, k // groups, group_c, kh, kw)       # [G, K/G, C/G, KH, KW]
    sums = np.zeros((n, groups, k // groups, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            taps = xs[..., i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            sums += np.einsum("ngcyx,gkc->ngkyx", taps, ws[..., i, j])
    return sums.reshape(n, k, oh, ow)


def matrix_product(a: np.ndarray, b: np.ndarray, a_zero_point: int, b_zero_point) -> np.ndarray:
    """The exact (a - za) @ (b - zb), int64: a [..., M, K], b [..., K, N] (batch axes broadcast), zb a scalar or
    one per column N."""
    return np.matmul(a.astype(np.int64) - a_zero_point, b.astype(np.int64) - np.asarray(b_zero_point, np.int64))


def accumulated(op: str, sums: np.ndarray) -> np.ndarray:
    """The sums as the ACC_BITS accumulator holds them (int32); OverflowError naming the value farthest out where
    one does not fit."""
    if sums.size:
        check_accumulator(op, sums.min(), sums.max())
    return sums.astype(ACC_DTYPE)


# The public functions: checks, then the fast paths.

class ConvGeometry(NamedTuple):
    """conv2d's parameters checked for one pair of operand shapes and types (made by :func:`conv_geometry`),
    so that :func:`conv_sums` can run the same convolution on many operand pairs without checks. A named
    tuple: made on every conv2d call, where a frozen dataclass costs more."""

    x_shape: tuple[int, int, int, int]
    x_dtype: np.dtype
    w_shape: tuple[int, int, int, int]
    w_dtype: np.dtype
    x_zero_point: int
    w_zero_point: np.ndarray             # int64, scalar or one per output channel
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]   # top, left, bottom, right
    dilation: tuple[int, int]
    groups: int
    out_hw: tuple[int, int]


def conv_geometry(x_shape, x_dtype, w_shape, w_dtype, x_zero_point=0, w_zero_point=0, stride=(1, 1),
                  padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1) -> ConvGeometry:
    """Check conv2d's parameters for operands of these shapes and types (ValueError/TypeError naming the
    parameter)."""
    x_dtype, w_dtype = np.dtype(x_dtype), np.dtype(w_dtype)
    for name, dtype in (("x", x_dtype), ("w", w_dtype)):
        if dtype not in BYTE_DTYPES:
            raise TypeError(f"{name} must have dtype in ({', '.join(d.name for d in BYTE_DTYPES)}), got {dtype.name}")
    if len(x_shape) != 4:
        raise ValueError(f"x must be 4-D [N, C, H, W], got shape {tuple(x_shape)}")
    if len(w_shape) != 4:
        raise ValueError(f"w must be 4-D [K, C/groups, KH, KW], got shape {tuple(w_shape)}")
    n, c, h, wd = x_shape
    k, cg, kh, kw = w_shape
    groups = check_int("groups", groups, 1)
    if c % groups or k % groups:
        raise ValueError(f"groups={groups} must divide input channels {c} and output channels {k}")
    if cg != c // groups:
        raise ValueError(f"w.shape[1]={cg} must equal input channels / groups = {c // groups}")
    sh, sw = check_int_tuple("stride", stride, 2, 1)
    dh, dw = check_int_tuple("dilation", dilation, 2, 1)
    pt, pl, pb, pr = check_int_tuple("padding", padding, 4, 0)
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    oh, ow = (h + pt + pb - span_h) // sh + 1, (wd + pl + pr - span_w) // sw + 1
    if oh < 1 or ow < 1 or kh < 1 or kw < 1:
        raise ValueError(f"kernel {kh}x{kw} (dilation {dh}x{dw}) does not fit padded input "
                         f"{h + pt + pb}x{wd + pl + pr}")
    zx = int(check_int_param("x_zero_point", x_zero_point, *dtype_range(x_dtype), None))
    zw = check_int_param("w_zero_point", w_zero_point, *dtype_range(w_dtype), k)
    return ConvGeometry(tuple(x_shape), x_dtype, tuple(w_shape), w_dtype, zx, zw, (sh, sw), (pt, pl, pb, pr),
                        (dh, dw), groups, (oh, ow))


_cached_conv_geometry = functools.lru_cache(maxsize=1024)(conv_geometry)


def conv2d(x: np.ndarray, w: np.ndarray, *, x_zero_point=0, w_zero_point=0, stride=(1, 1),
           padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1, wide: bool = False) -> np.ndarray:
    """Integer 2-D convolution, NCHW: sum over taps of (x - zx) * (w - zw) -> int32 [N, K, OH, OW].

    ``wide=True`` returns the exact sums without the ACC_BITS check (int64, or int32 where every sum provably
    fits): for the interpreter, which models the wrapping accumulator register itself and checks where a sum
    is consumed (D6).

    x: int8/uint8 [N, C, H, W]; w: int8/uint8 [K, C/groups, KH, KW]; x_zero_point scalar;
    w_zero_point scalar or one per output channel K; padding (top, left, bottom, right) taps are
    real zeros (stored value x_zero_point); depthwise is groups == C.
    """
    check_array("x", x, BYTE_DTYPES)
    check_array("w", w, BYTE_DTYPES)
    # checked once for plain int arguments (a small layer otherwise spends much of its time here)
    checks = _cached_conv_geometry if plain_scalars((x_zero_point, w_zero_point, stride, padding, dilation,
                                                     groups)) else conv_geometry
    geometry = checks(x.shape, x.dtype, w.shape, w.dtype, x_zero_point, w_zero_point, stride, padding, dilation,
                      groups)
    return fast_conv.conv_sums(x, w, geometry, wide=wide)


def conv_sums(x: np.ndarray, w: np.ndarray, geometry: ConvGeometry, *, wide: bool = False) -> np.ndarray:
    """conv2d's arithmetic on operands of the shapes and types ``geometry`` was checked for."""
    return fast_conv.conv_sums(x, w, geometry, wide=wide)


def conv_sums_channels_last(x: np.ndarray, w: np.ndarray, geometry: ConvGeometry, *, wide: bool = False) -> np.ndarray:
    """:func:`conv_sums` on channels-last operands, as the NPU's buffers hold them: x [N, H, W, C] and
    w [K, KH, KW, C/G] give sums [N, OH, OW, K] (``geometry`` made for the NCHW shapes), with no transposes."""
    return fast_conv.conv_sums_channels_last(x, w, geometry, wide=wide)


def _operand(name: str, value: np.ndarray, zero_point, zp_channels: int | None, zp_axis: int) -> np.ndarray:
    """value - zero_point as float32, the zero point checked: scalar or one per ``zp_axis`` channel."""
    lo, hi = dtype_range(value.dtype)
    return fast_conv.minus_zero_point(value, check_int_param(f"{name}_zero_point", zero_point, lo, hi, zp_channels),
                                      zp_axis)


def matmul(a: np.ndarray, b: np.ndarray, *, a_zero_point=0, b_zero_point=0) -> np.ndarray:
    """Integer matmul / fully connected: (a - za) @ (b - zb) -> int32.

    a: int8/uint8 [..., M, K]; b: int8/uint8 [K, N] or [..., K, N] (batch dims broadcast as in
    numpy.matmul); a_zero_point scalar; b_zero_point scalar or one per output column N.
    """
    check_array("a", a, BYTE_DTYPES)
    check_array("b", b, BYTE_DTYPES)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"a and b must be at least 2-D, got shapes {a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"a.shape[-1]={a.shape[-1]} must equal b.shape[-2]={b.shape[-2]}")
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError as exc:
        raise ValueError(f"batch shapes of a {a.shape} and b {b.shape} do not broadcast") from exc
    return fast_conv.exact_matmul("matmul", _operand("a", a, a_zero_point, None, 0),
                                  _operand("b", b, b_zero_point, b.shape[-1], b.ndim - 1))


def accumulator_range(w: np.ndarray, *, x_dtype, x_zero_point=0, w_zero_point=0) -> tuple[np.ndarray, np.ndarray]:
    """Exact (min, max) of the accumulator of each output channel over all possible inputs.

    The compiler's static overflow proof (docs/arithmetic.md §3.3): with b = w - zp_w and x - zp_x in
    [lo, hi] = [type_min - zp_x, type_max - zp_x], the sum is largest when every tap with b > 0 sees hi and
    every tap with b < 0 sees lo (and smallest the other way round). Padded taps contribute 0, which lies in
    [lo, hi], so border outputs stay inside the same range. Axis 0 of ``w`` is the output channel
    (conv weights [K, C/G, KH, KW]; for matmul pass b.T).
    """
    check_array("w", w, BYTE_DTYPES)
    if w.ndim < 1:
        raise ValueError(f"w must have an output-channel axis, got shape {w.shape}")
    x_dtype = np.dtype(x_dtype)
    if x_dtype not in tuple(np.dtype(d) for d in BYTE_DTYPES):
        raise TypeError(f"x_dtype must be int8 or uint8, got {x_dtype.name}")
    type_min, type_max = dtype_range(x_dtype)
    zx = check_int("x_zero_point", x_zero_point, type_min, type_max)
    lo, hi = type_min - zx, type_max - zx
    operands = _operand("w", w, w_zero_point, w.shape[0], 0).astype(np.int64).reshape(w.shape[0], -1)
    positive = np.where(operands > 0, operands, 0).sum(axis=1)
    negative = np.where(operands < 0, operands, 0).sum(axis=1)
    return positive * lo + negative * hi, positive * hi + negative * lo
