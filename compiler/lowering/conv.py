"""Conv, fully connected, depthwise 1x1 (BN, PReLU) and transposed conv layers of a model: each a ConvLayer
(conv_layer.py) planned by conv_plan.py and emitted by conv_emit.py, with an 8-bit activation table applied
before STORE when a table operator is the conv's only reader.

A transposed convolution (qir.QConv with ``upsample`` s) is not run on its zero-filled conv form: output
pixels of one phase (row % s_h, column % s_w) see only the kernel taps whose positions land on real input
pixels, so each phase is an ordinary stride-1 conv with a sub-kernel over a window of the input, its output
written every s-th row and pixel of the result (docs/compiler.md §4). No multiply is spent on a filled zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from aipu.compiler.lowering.base import Context, dtype_code, image_shape
from aipu.compiler.lowering.conv_depthwise import conv_constants, emit_conv, plan_conv
from aipu.compiler.lowering.conv_layer import ConvLayer, check_layer
from aipu.compiler.lowering.conv_plan import TilePlan
from aipu.compiler.lowering.weight_streams import WeightStreams
from aipu.compiler.qir import QConv, QLut
from aipu.sim.machine.arch import LUT_ENTRY_DTYPE, DType
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Rounding


@dataclass(frozen=True)
class AxisPhase:
    """One phase of a transposed convolution along one axis: outputs first, first + factor, ...; for each tap
    of its sub-kernel the conv-form kernel position it takes (-1: a zero tap); the input window read and the
    padding around it."""

    first: int
    count: int
    taps: tuple[int, ...]
    dilation: int
    crop: int                  # input elements skipped before the window
    length: int                # input elements in the window
    pad_begin: int
    pad_end: int


def axis_phases(size: int, factor: int, pad_begin: int, pad_end: int, kernel: int, dilation: int) -> list[AxisPhase]:
    """The phases of a transposed convolution along one axis, from its conv form: ``size`` inputs upsampled by
    ``factor``, padded by ``pad_begin``/``pad_end`` (negative: cropped), a ``kernel``-tap kernel with
    ``dilation``. Output o = ph + factor * j reads conv-form position o - pad_begin + t * dilation, a real input
    where that is a multiple of ``factor``: the taps t = t0 + m * factor / g (g = gcd(dilation, factor)),
    reading input j + q + m * dilation / g. A phase no tap reaches is a zero tap (the bias alone); where an
    output would read padding only (the tiler's limit), zero taps are added on the other side."""
    out = factor * (size - 1) + 1 + pad_begin + pad_end - dilation * (kernel - 1)
    step = factor // math.gcd(dilation, factor)
    sub_dilation = dilation // math.gcd(dilation, factor)
    phases = []
    for first in range(min(factor, out)):
        count = len(range(first, out, factor))
        t0 = next((t for t in range(min(kernel, step)) if (first - pad_begin + t * dilation) % factor == 0), None)
        taps = tuple(range(t0, kernel, step)) if t0 is not None else (-1,)
        offset = (first - pad_begin + t0 * dilation) // factor if t0 is not None else 0
        reach = sub_dilation * (len(taps) - 1)
        begin, end = -offset, count + offset + reach - size
        crop, crop_end = max(0, -begin), max(0, -end)
        begin, end = max(0, begin), max(0, end)
        before, after = (max(0, -(-(pad - reach) // sub_dilation)) for pad in (end, begin))
        phases.append(AxisPhase(first, count, (-1,) * before + taps + (-1,) * after, sub_dilation, crop,
                                size - crop - crop_end, begin + before * sub_dilation, end + after * sub_dilation))
    return phases


@dataclass
class ConvPart:
    """One conv the tiler emits: the whole layer, or one phase of a transposed one."""

    layer: ConvLayer
    tiles: TilePlan
    input_offset: int = 0                          # elements from the input tensor's start to the window
    input_row: int | None = None                   # elements between input rows (None: the window's width)
    output_offset: int = 0                         # elements from the output tensor's start to the first output
    output_steps: tuple[int, int] | None = None    # elements between output rows and pixels (None: dense)


@dataclass
class ConvPlan:
    op: QConv
    parts: list[ConvPart]
    y: str                 # the tensor written: the conv's output, or the fused table's


class ConvLowering:
    def plan(self, op: QConv, context: Context, table: QLut | None = None) -> ConvPlan:
        x, y = context.tensors[op.x], context.tensors[table.y if table else op.y]
        h, w, c = image_shape(x)
        try:
            if op.upsample == (1, 1):
                parts = [self._part(op, context, table, (op.w, op.w_second), (h, w), op.padding, op.dilation)]
            else:
                parts = self._phases(op, context, table, (h, w, c), image_shape(y))
        except ValueError as exc:
            raise (exc if isinstance(exc, InputError) else InputError("tiling", "no plan", str(exc))).within(
                f"layer {op.name!r}") from None
        return ConvPlan(op, parts, y.name)

    def _phases(self, op: QConv, context: Context, table: QLut | None, x_shape: tuple[int, int, int],
                y_shape: tuple[int, int, int]) -> list[ConvPart]:
        (h, w, c), (_, out_w, k) = x_shape, y_shape
        top, left, bottom, right = op.padding
        kh, kw = op.w.shape[2:]
        rows = axis_phases(h, op.upsample[0], top, bottom, kh, op.dilation[0])
        columns = axis_phases(w, op.upsample[1], left, right, kw, op.dilation[1])
        parts = []
        for row in rows:
            for column in columns:
                if min(row.length, column.length) < 1:
                    raise InputError("transposed convolution phase", f"rows {row.first}::{op.upsample[0]}, "
                                     f"columns {column.first}::{op.upsample[1]}", "outputs that read at least "
                                     "one input pixel (this padding leaves a phase with padding only)")
                weights = tuple(None if plane is None else _phase_kernel(plane, row.taps, column.taps)
                                for plane in (op.w, op.w_second))
                part = self._part(op, context, table, weights, (row.length, column.length),
                                  (row.pad_begin, column.pad_begin, row.pad_end, column.pad_end),
                                  (row.dilation, column.dilation))
                part.input_offset, part.input_row = (row.crop * w + column.crop) * c, w * c
                part.output_offset = (row.first * out_w + column.first) * k
                part.output_steps = (op.upsample[0] * out_w * k, op.upsample[1] * k)
                parts.append(part)
        return parts

    @staticmethod
    def _part(op: QConv, context: Context, table: QLut | None, weights: tuple[np.ndarray, np.ndarray | None],
              size: tuple[int, int], padding: tuple[int, int, int, int], dilation: tuple[int, int]) -> ConvPart:
        """One conv layer of ``op`` with these kernels (the first plane's, and dual INT4's second plane or None)
        on an input of ``size``."""
        x, y = context.tensors[op.x], context.tensors[op.y]
        weights, second = weights
        requant = op.requant
        leaky = requant.negative_multiplier is not None
        native = requant.scale is None          # else FLOAT32 mode: the records' multiplier and shift are unused
        k = weights.shape[0]
        layer = ConvLayer(x=np.zeros((1, weights.shape[1] * op.groups, *size), x.dtype), w=weights, bias=op.bias,
                          multiplier=requant.multiplier if native else np.zeros(k, np.int64),
                          shift=requant.shift if native else np.zeros(k, np.int64), scale=requant.scale,
                          x_zero_point=x.zero_point, w_zero_point=op.w_zero_point,
                          out_zero_point=requant.out_zero_point, qmin=requant.qmin, qmax=requant.qmax,
                          out_type=DType.INT4 if y.int4 else dtype_code(y.dtype), x_int4=x.int4,
                          rounding=Rounding[requant.rounding.upper()],
                          stride=op.stride, padding=padding, dilation=dilation, groups=op.groups,
                          w_type=DType.INT4 if op.weight_format.startswith("int4") else DType.INT8,
                          codebook=op.codebook, w_second=second, second_multiplier=requant.second_multiplier,
                          circulant=op.circulant if op.upsample == (1, 1) else None,
                          negative_multiplier=requant.negative_multiplier if leaky else None,
                          negative_shift=requant.negative_shift if leaky else None,
                          lut=table.table.astype(LUT_ENTRY_DTYPE) if table else None,
                          **({"lut_index_shift": table.index_shift}     # the default domain: all of int16
                             if table is not None and table.index_shift is not None else {}))
        check_layer(layer)
        plan = plan_conv(layer, context.config, compress=context.compress, hidden_under=context.weight_item_cycles,
                         k_boundary=context.k_boundaries.get(op.name))
        context.weight_item_cycles = plan.weight_item_cycles
        return ConvPart(layer, plan)

    def emit(self, plan: ConvPlan, context: Context) -> None:
        y = context.tensors[plan.y]
        source, target = context.address(plan.op.x), context.plan.tensor(plan.y, y.shape, y.dtype, int4=y.int4)
        elem_in, elem_out = context.tensors[plan.op.x].dtype.itemsize, y.dtype.itemsize
        last = len(plan.parts) - 1
        for index, part in enumerate(plan.parts):       # phases one after another, as operators of their own
            prefix = plan.op.name if last == 0 else f"{plan.op.name}/phase{index}"
            constants = conv_constants(part.layer, part.tiles, context.config)
            addresses = _PlacedOnUse(lambda name: context.plan.constant(f"{prefix}/{name}", constants[name]),
                                     input=source + part.input_offset * elem_in,
                                     output=target + part.output_offset * elem_out)
            emit_conv(context.pipeline, part.layer, part.tiles, addresses,
                      input_row=part.input_row, output_steps=part.output_steps,
                      weight_stream=WeightStreams(part.layer, prefix, context.plan, context.weight_streams,
                                                 context.config, part.tiles.parts_overhead, part.tiles.compressed)
                      if context.compress else None)


def _phase_kernel(weights: np.ndarray, row_taps, column_taps) -> np.ndarray:
    """A transposed convolution phase's kernel: the taps it reads of ``weights``, zeros where a tap is -1."""
    kernel = np.zeros((*weights.shape[:2], len(row_taps), len(column_taps)), weights.dtype)
    for i, tap_h in enumerate(row_taps):
        for j, tap_w in enumerate(column_taps):
            if tap_h >= 0 and tap_w >= 0:
                kernel[:, :, i, j] = weights[:, :, tap_h, tap_w]
    return kernel


class _PlacedOnUse(dict):
    """DRAM addresses of a layer's constants, each placed when first asked for: raw weights that WDEC streams
    replace everywhere never take DRAM."""

    def __init__(self, place, **addresses: int) -> None:
        super().__init__(addresses)
        self._place = place

    def __missing__(self, name: str) -> int:
        self[name] = address = self._place(name)
        return address
