"""Depthwise conv layers on DWCONV, the MAC array's output-stationary dataflow (docs/rtl-conv.md, "Depthwise
dataflow"), where the cycles say it is faster than the weight-stationary CONV; and the dispatch every conv
layer goes through (:func:`plan_conv`, :func:`conv_constants`, :func:`emit_conv`).

A DWCONV plan cuts the channels into tiles of at most ``mac.rows`` and the output into row tiles (always the
full width), as the conv tiler does; each tile is one DWCONV. The emitter is the conv emitter's pipeline
(conv_emit.py) with three steps changed: the input rows go into a WEIGHT half, one LOAD per column phase
(column mod stride_w, so that strided taps read contiguous runs); the kernel goes tap-major into an ACT half,
from a DRAM copy laid out for the plan's channel tiles; the tile's command is a DWCONV. Requant, table and
store are every conv layer's.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from aipu.compiler.lowering.base import field_max
from aipu.compiler.lowering.conv_emit import WeightStream, _ConvEmitter, _Tile, emit_conv_layer
from aipu.compiler.lowering.conv_layer import DIM_MAX, ConvLayer, layer_constants
from aipu.compiler.lowering.conv_plan import (ESTIMATE_TOLERANCE, ConvGeometry, CostEstimate, TilePlan, _even_splits,
                                              _halvings, plan_tiles)
from aipu.compiler.lowering.pipeline import Link, half
from aipu.sim.machine.arch import BUFFER_UNIT_BYTES, DEFAULT, DType, PARAM_RECORD_BYTES, Buffer, HardwareConfig
from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.program import Program
from aipu.sim.timing.conv import depthwise_cycles
from aipu.sim.timing.dma import least_cycles, walk_words

_PAD_MAX = field_max(DEFAULT, Opcode.LOAD, "pad_left")
_PIXELS_MAX = field_max(DEFAULT, Opcode.REQUANT, "pixels")


@dataclass(frozen=True)
class DepthwisePlan(TilePlan):
    """A TilePlan whose tiles run as DWCONVs: ``tile_k`` channels each (at most ``mac.rows``), ``tile_c`` 1."""


@dataclass(frozen=True)
class ColumnPhase:
    """The padded input columns ``phase``, ``phase + stride``, ... of a DWCONV tile: ``count`` real ones from
    input column ``first``, ``pad_left`` padding slots before them and ``pad_right`` after (the phase's width in
    all: ceil(padded width / stride))."""

    first: int
    count: int
    pad_left: int
    pad_right: int


def column_phases(width: int, pad_left: int, pad_right: int, stride: int) -> list[ColumnPhase] | None:
    """The column phases of a row of ``width`` input pixels padded by ``pad_left``/``pad_right``; None if one
    holds no real column or more padding than LOAD writes (DWCONV then does not take the layer)."""
    phase_width = -(-(width + pad_left + pad_right) // stride)
    phases = []
    for phase in range(stride):
        first = max(0, -(-(pad_left - phase) // stride))       # the first slot at a real column
        last = (pad_left + width - 1 - phase) // stride          # the last one
        if last < first or max(first, phase_width - 1 - last) > _PAD_MAX:
            return None
        phases.append(ColumnPhase(phase + stride * first - pad_left, last - first + 1, first, phase_width - 1 - last))
    return phases


def takes_dwconv(layer: ConvLayer) -> bool:
    """Whether DWCONV can run the layer: depthwise with channel multiplier 1, every column phase fed."""
    _, c, _, w = layer.x.shape
    return (layer.groups == c == layer.w.shape[0]
            and column_phases(w, layer.padding[1], layer.padding[3], layer.stride[1]) is not None)


def plan_conv(layer: ConvLayer, config: HardwareConfig = DEFAULT, *, dwconv: bool = True, tile_k: int | None = None,
              tile_c: int | None = None, tile_rows: int | None = None) -> TilePlan:
    """The conv tiler's plan (conv_plan.plan_tiles), or with ``dwconv`` a DepthwisePlan where the layer takes
    DWCONV and its estimated cycles are fewer. Explicitly given sizes are kept by both."""
    try:
        plan = plan_tiles(layer, config, tile_k=tile_k, tile_c=tile_c, tile_rows=tile_rows)
    except ValueError:
        plan = None
    if dwconv and tile_c in (None, 1) and takes_dwconv(layer):
        depthwise = _plan_depthwise(layer, config, tile_k, tile_rows)
        if depthwise is not None and (plan is None or depthwise[0] < CostEstimate(ConvGeometry.of(layer), config)(
                plan.tile_k, plan.tile_c, plan.tile_rows)[0]):
            return depthwise[1]
    return plan if plan is not None else plan_tiles(layer, config, tile_k=tile_k, tile_c=tile_c, tile_rows=tile_rows)


def _plan_depthwise(layer: ConvLayer, config: HardwareConfig, tile_k: int | None,
                    tile_rows: int | None) -> tuple[float, DepthwisePlan] | None:
    """(estimated cycles, plan) of the DWCONV plan with the fewest commands among those within
    ESTIMATE_TOLERANCE of the fewest estimated cycles; None if no tile fits."""
    estimate = DepthwiseEstimate(layer, config)
    shape = estimate.shape
    candidates = [(*estimate(tk, rows), -rows, tk, rows)
                  for tk in ([tile_k] if tile_k else _even_splits(shape.c)) if tk <= config.mac.rows
                  for rows in ([tile_rows] if tile_rows else _halvings(shape.out_h)) if estimate.fits(tk, rows)]
    if not candidates:
        return None
    fastest = min(candidate[0] for candidate in candidates)
    cycles, _, _, tk, rows = min(candidates, key=lambda candidate: (candidate[0] > fastest * ESTIMATE_TOLERANCE,
                                                                     candidate[1:]))
    return cycles, DepthwisePlan(tk, 1, rows, shape.out_h, shape.out_w)


def _resident(layer: ConvLayer, config: HardwareConfig, k_tiles: int) -> bool:
    """Whether the whole kernel and every record are loaded once (several channel tiles, one ACT half)."""
    k, _, kh, kw = layer.w.shape
    return k_tiles > 1 and k * kh * kw <= config.buffer(Buffer.ACT).bytes // 2 \
        and k <= config.buffer_units(Buffer.PARAM) // 2


class DepthwiseEstimate:
    """(cycles, commands) of a layer's DWCONV plans (tk, rows), weighed as conv_plan.CostEstimate weighs the
    conv tiler's: each DWCONV's cycles (``sim.timing``) on a full tile, the DMA's walk (the input by column
    phase, the kernel, the outputs) plus each LOAD's and STORE's fixed cycles, overlapped across tiles."""

    def __init__(self, layer: ConvLayer, config: HardwareConfig) -> None:
        self.layer, self.config, self.shape = layer, config, ConvGeometry.of(layer)
        self.phases = column_phases(layer.x.shape[3], layer.padding[1], layer.padding[3], layer.stride[1])
        self.load, self.store = (least_cycles(config, opcode) for opcode in (Opcode.LOAD, Opcode.STORE))

    def fits(self, tk: int, rows: int) -> bool:
        shape, config = self.shape, self.config
        phase_width = self.phases[0].pad_left + self.phases[0].count + self.phases[0].pad_right
        halves = {buffer: config.buffer(buffer).bytes // 2 for buffer in Buffer}
        in_rows, pixels = shape.input_rows(rows), rows * shape.out_w
        return (len(self.phases) * in_rows * phase_width * tk <= halves[Buffer.WEIGHT]
                and tk * shape.kh * shape.kw <= halves[Buffer.ACT]
                and pixels * tk * BUFFER_UNIT_BYTES[Buffer.ACC] <= halves[Buffer.ACC]
                and pixels * tk * shape.out_bytes <= halves[Buffer.OUT]
                and tk * PARAM_RECORD_BYTES <= halves[Buffer.PARAM]
                and in_rows <= DIM_MAX and pixels <= _PIXELS_MAX)

    def __call__(self, tk: int, rows: int) -> tuple[float, int]:
        shape, word = self.shape, self.config.dram.bytes_per_cycle
        k_tiles, row_tiles = -(-shape.c // tk), -(-shape.out_h // rows)
        tiles = k_tiles * row_tiles
        taps = shape.kh * shape.kw
        in_rows = row_tiles * shape.input_rows(rows)
        inputs = k_tiles * sum(walk_words(word, in_rows * phase.count, tk, len(self.phases) * shape.c)
                               for phase in self.phases)
        outputs = k_tiles * walk_words(word, shape.out_h * shape.out_w, tk * shape.out_bytes, shape.k * shape.out_bytes)
        kernel = walk_words(word, 1, shape.k * taps, shape.k * taps)
        loads = tiles * len(self.phases) + 2 * (1 if _resident(self.layer, self.config, k_tiles) else k_tiles)
        dma = inputs + kernel + outputs + self.load * loads + self.store * tiles
        mac = tiles * depthwise_cycles(self.config, channels=tk, taps=taps, out_h=rows, out_w=shape.out_w)
        return max(dma, mac) + min(dma, mac) / tiles, loads + 3 * tiles


def tap_major_kernel(w: np.ndarray, tile_k: int) -> np.ndarray:
    """The depthwise kernel [K, 1, KH, KW] as DWCONV reads it, one channel tile after another: tile t's
    [KH][KW][channels] at byte t * tile_k * KH * KW."""
    return np.concatenate([w[k0:k0 + tile_k, 0].transpose(1, 2, 0).ravel() for k0 in range(0, w.shape[0], tile_k)])


def conv_constants(layer: ConvLayer, plan: TilePlan, config: HardwareConfig) -> dict[str, np.ndarray]:
    """What a conv layer reads from DRAM besides its input (conv_layer.layer_constants); a DepthwisePlan's
    "weights" are tap-major by channel tile."""
    constants = layer_constants(layer, config)
    if isinstance(plan, DepthwisePlan):
        constants["weights"] = tap_major_kernel(layer.w, plan.tile_k)
    return constants


def emit_conv(program: Program, layer: ConvLayer, plan: TilePlan, addresses: Mapping[str, int], link: Link, *,
              input_row: int | None = None, output_steps: tuple[int, int] | None = None,
              weight_stream: WeightStream | None = None) -> None:
    """conv_emit.emit_conv_layer, or a DepthwisePlan's commands (its kernel loaded raw: WDEC writes WEIGHT)."""
    if isinstance(plan, DepthwisePlan):
        _DepthwiseEmitter(program, layer, plan, addresses, link, input_row, output_steps).emit()
    else:
        emit_conv_layer(program, layer, plan, addresses, link, input_row=input_row, output_steps=output_steps,
                        weight_stream=weight_stream)


class _DepthwiseEmitter(_ConvEmitter):
    """The conv emitter with the input in WEIGHT by column phase, the kernel tap-major in ACT and DWCONVs."""

    def __init__(self, program: Program, layer: ConvLayer, plan: DepthwisePlan, addresses: Mapping[str, int],
                 link: Link, input_row: int | None, output_steps: tuple[int, int] | None) -> None:
        super().__init__(program, layer, plan, addresses, link, input_row, output_steps, None)
        self.resident = _resident(layer, program.config, len(self.k_tiles))
        self.phases = column_phases(layer.x.shape[3], layer.padding[1], layer.padding[3], layer.stride[1])
        self.taps = layer.w.shape[2] * layer.w.shape[3]

    def _load_weights(self, item: int, k0: int, out_c: int, c0: int, in_c: int) -> None:
        """Channels k0 .. k0 + out_c of the tap-major kernel (whole channel tiles) into ACT half ``item``."""
        self.pipeline.append(Opcode.LOAD, dict(
            buffer=Buffer.ACT, sram_addr=half(self.program, Buffer.ACT, item),
            dram_addr=self.addresses["weights"] + k0 * self.taps, elem_type=DType.INT8, y_size=1, x_size=1,
            run=out_c * self.taps), (self.steps, self.step))

    def _load_activations(self, tile: _Tile, c0: int, channels: int) -> None:
        """The tile's input rows, channels ``c0``.., one LOAD per column phase into the step's WEIGHT half."""
        layer = self.layer
        c = layer.x.shape[1]
        stride = layer.stride[1]
        base, phase_bytes = half(self.program, Buffer.WEIGHT, self.step), tile.in_rows * self._phase_width() * channels
        for index, phase in enumerate(self.phases):
            self.pipeline.append(Opcode.LOAD, dict(
                buffer=Buffer.WEIGHT, sram_addr=base + index * phase_bytes,
                dram_addr=self.addresses["input"] + max(0, tile.in_first) * self.input_row + phase.first * c + c0,
                elem_type=self.in_type, y_size=tile.in_rows - tile.pad_top - tile.pad_bottom, x_size=phase.count,
                run=channels, dram_y_stride=self.input_row, dram_x_stride=stride * c, pad_top=tile.pad_top,
                pad_bottom=tile.pad_bottom, pad_left=phase.pad_left, pad_right=phase.pad_right,
                pad_value=layer.x_zero_point), (self.steps, self.step))

    def _phase_width(self) -> int:
        phase = self.phases[0]
        return phase.pad_left + phase.count + phase.pad_right

    def _convolve(self, tile: _Tile, chunk_index: int, channels: int, weight_item: int) -> None:
        """The tile's DWCONV into its accumulator half."""
        layer = self.layer
        _, _, kh, kw = layer.w.shape
        kernel = half(self.program, Buffer.ACT, weight_item) + (tile.k0 * self.taps if self.resident else 0)
        self.pipeline.append(Opcode.DWCONV, dict(
            in_addr=half(self.program, Buffer.WEIGHT, self.step), in_h=tile.in_rows,
            in_w=layer.x.shape[3] + layer.padding[1] + layer.padding[3], channels=tile.channels,
            in_type=self.in_type, in_zero_point=layer.x_zero_point, wgt_addr=kernel, w_zero_point=layer.w_zero_point,
            k_h=kh, k_w=kw, stride_h=layer.stride[0], stride_w=layer.stride[1], dilation_h=layer.dilation[0],
            dilation_w=layer.dilation[1], acc_addr=half(self.program, Buffer.ACC, tile.index), accumulate=0),
            (self.steps, self.step), (self.accumulators, tile.index))
