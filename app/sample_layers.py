"""Random and real-network-shaped conv layers for `aipu run-layer --random`, benchmarks and tests: legal by
construction, with outputs spread over the output range so that only the tails saturate."""
from __future__ import annotations

import dataclasses

import numpy as np

from aipu.compiler.lowering.conv_layer import TENSOR_DTYPES, ConvLayer
from aipu.sim.machine.arch import (BIAS_DTYPE, LUT8_ENTRIES, LUT16_INDEX_BITS_MAX, LUT16_INDEX_BITS_MIN,
                                LUT16_INPUT_BITS, LUT_ENTRY_DTYPE, MULTIPLIER_BITS, SHIFT_MAX, INT4_MAX, INT4_MIN,
                                DType)
from aipu.sim.machine.isa import LutMode, Rounding


def random_layer(rng: np.random.Generator, *, max_channels: int = 24, max_size: int = 12,
                 with_lut: bool = False, x: np.ndarray | None = None,
                 out_types: tuple[DType, ...] = (DType.INT8, DType.UINT8, DType.INT16)) -> ConvLayer:
    """A random but legal layer: depthwise/grouped, strides, dilations, padding, uint8 or int8 input,
    and with ``with_lut`` a random activation table (DIRECT8 for 8-bit outputs, INTERP16 for int16).
    Given ``x`` (e.g. the previous layer's output) the layer is built around its shape and dtype."""
    c = int(rng.integers(1, max_channels + 1)) if x is None else x.shape[1]
    groups, k = _random_grouping(rng, c, max_channels)
    kh, kw, stride, dilation, padding, size = _random_geometry(rng, max_size, None if x is None else x.shape[2:])
    if x is None:
        x_dtype = np.uint8 if rng.integers(2) else np.int8
        info = np.iinfo(x_dtype)
        x = rng.integers(info.min, info.max + 1, size=(1, c, *size)).astype(x_dtype)
    info = np.iinfo(x.dtype)
    w_info = np.iinfo(TENSOR_DTYPES["w"][0])
    wgt = rng.integers(w_info.min, w_info.max + 1, size=(k, c // groups, kh, kw)).astype(TENSOR_DTYPES["w"][0])
    out_type = DType(int(rng.choice(out_types)))
    layer = ConvLayer(x=x, w=wgt, bias=rng.integers(-5000, 5000, size=k).astype(BIAS_DTYPE),
                      multiplier=rng.integers(2 ** (MULTIPLIER_BITS - 2), 2 ** MULTIPLIER_BITS, size=k),
                      shift=np.zeros(k, np.int64), x_zero_point=int(rng.integers(info.min, info.max + 1)),
                      w_zero_point=int(rng.integers(-8, 9)), out_type=out_type,
                      rounding=Rounding(int(rng.integers(len(Rounding)))), stride=stride, padding=padding,
                      dilation=dilation, groups=groups)
    _spread_outputs(layer, rng)
    if with_lut:
        _random_table(layer, rng)
    return layer


def int4_weights(layer: ConvLayer, rng: np.random.Generator) -> ConvLayer:
    """``layer`` (an even number of input channels a group) with random INT4 weights and weight zero point,
    its shifts spread again for the smaller sums."""
    int4 = dataclasses.replace(layer, w=rng.integers(INT4_MIN, INT4_MAX + 1, size=layer.w.shape).astype(np.int8),
                               w_type=DType.INT4, w_zero_point=int(rng.integers(INT4_MIN, INT4_MAX + 1)))
    _spread_outputs(int4, rng)
    return int4


def dual_int4_weights(layer: ConvLayer, rng: np.random.Generator) -> ConvLayer:
    """``layer`` with random dual INT4 weights (docs/arithmetic.md §4.7): :func:`int4_weights` as the first plane,
    a second plane with a multiplier up to the first's, a NATIVE requantizer without leaky."""
    dual = dataclasses.replace(int4_weights(layer, rng), negative_multiplier=None, negative_shift=None, scale=None,
                               w_second=rng.integers(INT4_MIN, INT4_MAX + 1, size=layer.w.shape).astype(np.int8))
    dual.second_multiplier = (dual.multiplier * rng.random(dual.w.shape[0])).astype(np.int64)
    return dual


def _random_grouping(rng: np.random.Generator, c: int, max_channels: int) -> tuple[int, int]:
    """(groups, output channels) of a dense, depthwise or grouped layer on ``c`` input channels."""
    kind = rng.choice(["dense", "depthwise", "grouped"])
    if kind == "depthwise":
        return c, c * int(rng.integers(1, 3))
    if kind == "grouped" and c > 1:
        divisors = [d for d in range(2, c + 1) if c % d == 0]
        groups = int(rng.choice(divisors))
        return groups, groups * int(rng.integers(1, 4))
    return 1, int(rng.integers(1, max_channels + 1))


def _random_geometry(rng: np.random.Generator, max_size: int, size: tuple[int, int] | None):
    """Kernel (kh, kw), stride, dilation, padding and the input's (h, w): a random size up to ``max_size``
    past the kernel's reach, or the given ``size``, drawing again until the kernel fits it."""
    while True:
        kh, kw = (int(v) for v in rng.choice([1, 2, 3, 5], size=2))
        stride = tuple(int(v) for v in rng.integers(1, 3, size=2))
        dilation = tuple(int(v) for v in rng.integers(1, 3, size=2))
        reach = [d * (kk - 1) for d, kk in zip(dilation, (kh, kw))]
        padding = tuple(int(rng.integers(0, r + 1)) for r in (reach[0], reach[1], reach[0], reach[1]))
        if size is None:
            h = int(rng.integers(max(1, reach[0] + 1 - padding[0] - padding[2]), max_size + reach[0] + 1))
            w = int(rng.integers(max(1, reach[1] + 1 - padding[1] - padding[3]), max_size + reach[1] + 1))
            return kh, kw, stride, dilation, padding, (h, w)
        h, w = size
        if h + padding[0] + padding[2] > reach[0] and w + padding[1] + padding[3] > reach[1]:
            return kh, kw, stride, dilation, padding, (h, w)


def _random_table(layer: ConvLayer, rng: np.random.Generator) -> None:
    """A random activation table: DIRECT8 entries within the output range, or a sorted INTERP16 table."""
    if layer.lut_mode == LutMode.DIRECT8:
        info = np.iinfo(layer.out_dtype)
        layer.lut = rng.integers(info.min, info.max + 1, LUT8_ENTRIES).astype(LUT_ENTRY_DTYPE)
    else:
        index_bits = int(rng.integers(LUT16_INDEX_BITS_MIN, LUT16_INDEX_BITS_MAX + 1))
        entries = np.iinfo(LUT_ENTRY_DTYPE)
        layer.lut = np.sort(rng.integers(entries.min, entries.max + 1, 2 ** index_bits + 1)).astype(LUT_ENTRY_DTYPE)
        layer.lut_index_shift = LUT16_INPUT_BITS - index_bits


def _spread_outputs(layer: ConvLayer, rng: np.random.Generator) -> None:
    """Shifts that map each channel's largest |acc + bias| to about half the output range, so outputs spread
    over the range and only the tails saturate; a small random output zero point."""
    total = np.abs(layer.conv_golden()[0].astype(np.int64) + layer.bias[:, None, None])
    total = total.reshape(layer.w.shape[0], -1).max(axis=1)
    half_range = (np.iinfo(layer.out_dtype).max - np.iinfo(layer.out_dtype).min) // 4
    wanted = np.log2(np.maximum(total, 1) * layer.multiplier / half_range)
    layer.shift = np.clip(np.ceil(wanted), 0, SHIFT_MAX).astype(np.int64)
    layer.out_zero_point = (int(rng.integers(0, 50)) if layer.out_type == DType.UINT8
                            else int(rng.integers(-10, 11)))


def shaped_layer(rng: np.random.Generator, channels: int, size: int, out_channels: int, kernel: int, *,
                 stride: int = 1, groups: int = 1) -> ConvLayer:
    """A layer of a real network's shape (square ``size`` input, "same" padding, int8 in and out) with random
    data: the shapes of ResNet-18's and MobileNet's layers for tests and benchmarks."""
    w_info = np.iinfo(TENSOR_DTYPES["w"][0])
    layer = ConvLayer(x=rng.integers(-128, 128, (1, channels, size, size)).astype(np.int8),
                      w=rng.integers(w_info.min, w_info.max + 1,
                                     (out_channels, channels // groups, kernel, kernel)).astype(TENSOR_DTYPES["w"][0]),
                      bias=rng.integers(-5000, 5000, size=out_channels).astype(BIAS_DTYPE),
                      multiplier=rng.integers(2 ** (MULTIPLIER_BITS - 2), 2 ** MULTIPLIER_BITS, size=out_channels),
                      shift=np.zeros(out_channels, np.int64), x_zero_point=int(rng.integers(-8, 9)),
                      w_zero_point=int(rng.integers(-4, 5)), stride=(stride, stride), padding=(kernel // 2,) * 4,
                      groups=groups)
    _spread_outputs(layer, rng)
    return layer
