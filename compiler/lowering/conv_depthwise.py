"""Depthwise conv layers on DWCONV, the MAC array's output-stationary dataflow (docs/rtl-conv.md, "Depthwise
dataflow"), where the cycles say it is faster than the weight-stationary CONV; and the dispatch every conv
layer goes through (:func:`plan_conv`, :func:`conv_constants`, :func:`emit_conv`).

A DWCONV plan cuts the channels into tiles of at most ``mac.rows`` and the output into row tiles (always the
full width), as the conv tiler does; each tile is one DWCONV. The emitter is the conv emitter's pipeline
(conv_emit.py) with three steps changed: the input rows go into a WEIGHT half, one LOAD per phase plane (row
mod stride_h, column mod stride_w: every tap then reads one contiguous run); the kernel goes tap-major into an
ACT half, from a DRAM copy laid out for the plan's channel tiles; the tile's command is a DWCONV. Requant,
table and store are every conv layer's.
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
from aipu.compiler.lowering.pipeline import Pipeline
from aipu.sim.machine.arch import BUFFER_UNIT_BYTES, DEFAULT, DType, PARAM_RECORD_BYTES, Buffer, HardwareConfig
from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.program import Command
from aipu.sim.timing.conv import depthwise_cycles
from aipu.sim.timing.dma import least_cycles, walk_words
from aipu.sim.timing.requant import command_cycles as requant_cycles

_PAD_MAX = field_max(DEFAULT, Opcode.LOAD, "pad_left")
_PIXELS_MAX = field_max(DEFAULT, Opcode.REQUANT, "pixels")


@dataclass(frozen=True)
class DepthwisePlan(TilePlan):
    """A TilePlan whose tiles run as DWCONVs: ``tile_k`` channels each (at most ``mac.rows``), ``tile_c`` 1."""


@dataclass(frozen=True)
class PhaseSlots:
    """One phase of a DWCONV input axis (rows or columns, every stride-th of the padded tile from the phase's
    own): ``count`` real elements from ``first`` (counted from the tile's first real one), ``pad_before``
    padding slots before them and ``pad_after`` after; the phase plane's extent, ceil(padded length / stride),
    in all."""

    first: int
    count: int
    pad_before: int
    pad_after: int

    @property
    def slots(self) -> int:
        return self.pad_before + self.count + self.pad_after


def phase_slots(length: int, pad_before: int, pad_after: int, stride: int) -> list[PhaseSlots] | None:
    """The phases of an axis of ``length`` real elements padded by ``pad_before``/``pad_after``; None if one
    holds no real element or more padding than LOAD writes (DWCONV then does not take the tile)."""
    extent = -(-(length + pad_before + pad_after) // stride)
    phases = []
    for phase in range(stride):
        first = max(0, -(-(pad_before - phase) // stride))      # the first slot at a real element
        last = (pad_before + length - 1 - phase) // stride        # the last one
        if last < first or max(first, extent - 1 - last) > _PAD_MAX:
            return None
        phases.append(PhaseSlots(phase + stride * first - pad_before, last - first + 1, first, extent - 1 - last))
    return phases


def _row_tiles(layer: ConvLayer, out_h: int, rows: int) -> list[tuple[int, int, int]]:
    """(real input rows, padding rows before, after) of each tile of ``rows`` output rows (the last shorter),
    as conv_emit's tiles read them."""
    h, stride, top = layer.x.shape[2], layer.stride[0], layer.padding[0]
    span = layer.dilation[0] * (layer.w.shape[2] - 1) + 1
    tiles = []
    for r0 in range(0, out_h, rows):
        first, count = r0 * stride - top, (min(rows, out_h - r0) - 1) * stride + span
        pad_top, pad_bottom = max(0, -first), max(0, first + count - h)
        tiles.append((count - pad_top - pad_bottom, pad_top, pad_bottom))
    return tiles


def takes_dwconv(layer: ConvLayer) -> bool:
    """Whether DWCONV can run the layer: depthwise with channel multiplier 1, every column phase fed."""
    _, c, _, w = layer.x.shape
    return (layer.groups == c == layer.w.shape[0]
            and phase_slots(w, layer.padding[1], layer.padding[3], layer.stride[1]) is not None)


def _rows_fed(layer: ConvLayer, out_h: int, rows: int) -> bool:
    """Whether every row phase of every row tile of ``rows`` output rows holds a real input row."""
    return all(phase_slots(real, pad_top, pad_bottom, layer.stride[0]) is not None
               for real, pad_top, pad_bottom in _row_tiles(layer, out_h, rows))


def plan_conv(layer: ConvLayer, config: HardwareConfig = DEFAULT, *, dwconv: bool = True, tile_k: int | None = None,
              tile_c: int | None = None, tile_rows: int | None = None, unrolled: bool | None = None,
              compress: str | None = None, hidden_under: float = 0.0, k_boundary: int | None = None) -> TilePlan:
    """The conv tiler's plan (conv_plan.plan_tiles), or with ``dwconv`` a DepthwisePlan where the layer takes
    DWCONV and its estimated cycles are fewer. Explicitly given sizes and a forced ``unrolled`` mapping (which
    rules DWCONV out) are kept; ``compress``, ``hidden_under``: the compression policy the tiler weighs WDEC
    streams by and the cycles the layer's first decode may hide under (plan_tiles); ``k_boundary``: an output
    channel a tile boundary falls on (plan_tiles; it rules DWCONV out)."""
    tiles = {"tile_k": tile_k, "tile_c": tile_c, "tile_rows": tile_rows, "unrolled": unrolled, "compress": compress,
             "hidden_under": hidden_under, "k_boundary": k_boundary}
    dwconv = dwconv and k_boundary is None
    try:
        plan = plan_tiles(layer, config, **tiles)
    except ValueError:
        plan = None
    if dwconv and not unrolled and tile_c in (None, 1) and takes_dwconv(layer):
        depthwise = _plan_depthwise(layer, config, tile_k, tile_rows)
        if depthwise is not None and (plan is None or depthwise[0] < _conv_plan_cycles(layer, config, plan)):
            return depthwise[1]
    return plan if plan is not None else plan_tiles(layer, config, **tiles)


def _conv_plan_cycles(layer: ConvLayer, config: HardwareConfig, plan: TilePlan) -> float:
    """The conv tiler's estimate of its plan, or its REQUANTs' cycles where they take longer: DWCONV plans are
    weighed with REQUANT as a stage, so the two are compared on the same stages."""
    shape = ConvGeometry.of(layer)
    tiles = -(-shape.k // plan.tile_k) * -(-shape.out_h // plan.tile_rows)
    requant = tiles * requant_cycles(config, Command.make(Opcode.REQUANT, pixels=plan.tile_rows * shape.out_w,
                                                          channels=plan.tile_k))
    return max(CostEstimate(shape, config)(plan.tile_k, plan.tile_c, plan.tile_rows)[0], requant)


def _plan_depthwise(layer: ConvLayer, config: HardwareConfig, tile_k: int | None,
                    tile_rows: int | None) -> tuple[float, DepthwisePlan] | None:
    """(estimated cycles, plan) of the DWCONV plan with the fewest commands, then the fewest DWCONV cycles
    (where DMA or REQUANT bind, the array need not be the busiest), among those within ESTIMATE_TOLERANCE of
    the fewest estimated cycles; None if no tile fits."""
    estimate = DepthwiseEstimate(layer, config)
    shape = estimate.shape
    candidates = [(*estimate(tk, rows), -rows, tk, rows)
                  for tk in ([tile_k] if tile_k else sorted({*_even_splits(shape.c), config.mac.rows}))
                  if tk <= min(config.mac.rows, shape.c) and tk % shape.k_step == 0
                  for rows in ([tile_rows] if tile_rows else _halvings(shape.out_h))
                  if estimate.fits(tk, rows) and _rows_fed(layer, shape.out_h, rows)]
    if not candidates:
        return None
    fastest = min(candidate[0] for candidate in candidates)
    cycles, _, _, _, tk, rows = min(candidates, key=lambda candidate: (candidate[0] > fastest * ESTIMATE_TOLERANCE,
                                                                        candidate[1:]))
    return cycles, DepthwisePlan(tk, 1, rows, shape.out_h, shape.out_w)


def _resident(layer: ConvLayer, config: HardwareConfig, k_tiles: int) -> bool:
    """Whether the whole kernel and every record are loaded once (several channel tiles, one ACT half)."""
    k, _, kh, kw = layer.w.shape
    return k_tiles > 1 and k * kh * kw <= config.buffer(Buffer.ACT).bytes // 2 \
        and k <= config.buffer_units(Buffer.PARAM) // 2


class DepthwiseEstimate:
    """(cycles, commands, DWCONV cycles) of a layer's DWCONV plans (tk, rows), weighed as conv_plan.CostEstimate
    weighs the conv tiler's, with REQUANT as a third stage (DWCONV outpaces it): each DWCONV's and REQUANT's cycles
    (``sim.timing``) on a full tile; the DMA's walk (the input by phase, each channel tile at its own offset,
    the kernel, the outputs) plus each LOAD's and STORE's fixed cycles. The busiest stage's cycles plus the
    others' share of one tile (the pipeline's fill)."""

    def __init__(self, layer: ConvLayer, config: HardwareConfig) -> None:
        self.layer, self.config, self.shape = layer, config, ConvGeometry.of(layer)
        self.columns = phase_slots(layer.x.shape[3], layer.padding[1], layer.padding[3], layer.stride[1])
        self.row_phases = layer.stride[0]
        self.load, self.store = (least_cycles(config, opcode) for opcode in (Opcode.LOAD, Opcode.STORE))

    def fits(self, tk: int, rows: int) -> bool:
        shape, config = self.shape, self.config
        halves = {buffer: config.buffer(buffer).bytes // 2 for buffer in Buffer}
        in_rows, pixels = shape.input_rows(rows), rows * shape.out_w
        planes = self.row_phases * -(-in_rows // self.row_phases) * len(self.columns) * self.columns[0].slots
        return (planes * tk <= halves[Buffer.WEIGHT]
                and tk * shape.kh * shape.kw <= halves[Buffer.ACT]
                and pixels * tk * BUFFER_UNIT_BYTES[Buffer.ACC] <= halves[Buffer.ACC]
                and pixels * shape.out_bytes(tk) <= halves[Buffer.OUT]
                and tk * PARAM_RECORD_BYTES <= halves[Buffer.PARAM]
                and in_rows <= DIM_MAX and pixels <= _PIXELS_MAX)

    def __call__(self, tk: int, rows: int) -> tuple[float, int, int]:
        """(estimated cycles, commands, DWCONV cycles) of the plan."""
        shape, config = self.shape, self.config
        channel_tiles = [(k0, min(tk, shape.c - k0)) for k0 in range(0, shape.c, tk)]
        row_tiles = -(-shape.out_h // rows)
        tiles = len(channel_tiles) * row_tiles
        kernels_and_records = 2 * (1 if _resident(self.layer, config, len(channel_tiles)) else len(channel_tiles))
        loads = tiles * self.row_phases * len(self.columns) + kernels_and_records
        dma = (self._dram_words(channel_tiles, row_tiles * shape.input_rows(rows)) + self.load * loads
               + self.store * tiles)
        mac = tiles * depthwise_cycles(config, channels=tk, taps=shape.kh * shape.kw, out_h=rows, out_w=shape.out_w,
                                       plane_w=self.columns[0].slots)
        requant = tiles * requant_cycles(config, Command.make(Opcode.REQUANT, pixels=rows * shape.out_w,
                                                              channels=tk))
        stages = (dma, mac, requant)
        return max(stages) + (sum(stages) - max(stages)) / tiles, loads + 3 * tiles, mac

    def _dram_words(self, channel_tiles: list[tuple[int, int]], input_rows: int) -> int:
        """DRAM words of the inputs (each channel tile's runs at its channel offset), kernel and outputs."""
        shape, word = self.shape, self.config.dram.bytes_per_cycle
        stride = len(self.columns) * shape.c
        inputs = sum(walk_words(word, input_rows * phase.count, tk, stride, k0 + phase.first * shape.c)
                     for k0, tk in channel_tiles for phase in self.columns)
        outputs = sum(walk_words(word, shape.out_h * shape.out_w, shape.out_bytes(tk), shape.out_bytes(shape.k),
                                 shape.out_bytes(k0)) for k0, tk in channel_tiles)
        kernel = shape.k * shape.kh * shape.kw
        return inputs + outputs + walk_words(word, 1, kernel, kernel)


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


def emit_conv(pipeline: Pipeline, layer: ConvLayer, plan: TilePlan, addresses: Mapping[str, int], *,
              input_row: int | None = None, output_steps: tuple[int, int] | None = None,
              weight_stream: WeightStream | None = None) -> None:
    """conv_emit.emit_conv_layer, or a DepthwisePlan's commands (its kernel loaded raw: WDEC writes WEIGHT)."""
    if isinstance(plan, DepthwisePlan):
        _DepthwiseEmitter(pipeline, layer, plan, addresses, input_row, output_steps).emit()
    else:
        emit_conv_layer(pipeline, layer, plan, addresses, input_row=input_row, output_steps=output_steps,
                        weight_stream=weight_stream)


class _DepthwiseEmitter(_ConvEmitter):
    """The conv emitter with the input in WEIGHT by phase, the kernel tap-major in ACT and DWCONVs."""

    def __init__(self, pipeline: Pipeline, layer: ConvLayer, plan: DepthwisePlan, addresses: Mapping[str, int],
                 input_row: int | None, output_steps: tuple[int, int] | None) -> None:
        super().__init__(pipeline, layer, plan, addresses, input_row, output_steps, None)
        self.resident = _resident(layer, pipeline.program.config, len(self.k_tiles))
        self.columns = phase_slots(layer.x.shape[3], layer.padding[1], layer.padding[3], layer.stride[1])
        self.taps = layer.w.shape[2] * layer.w.shape[3]

    def _load_weights(self, item: int, k0: int, out_c: int, c0: int, in_c: int) -> None:
        """Channels k0 .. k0 + out_c of the tap-major kernel (whole channel tiles) into ACT half ``item``."""
        self.pipeline.append(Opcode.LOAD, dict(
            buffer=Buffer.ACT, sram_addr=self.pipeline.half(Buffer.ACT, item),
            dram_addr=self.addresses["weights"] + k0 * self.taps, elem_type=DType.INT8, y_size=1, x_size=1,
            run=out_c * self.taps))

    def _load_activations(self, tile: _Tile, c0: int, channels: int) -> None:
        """The tile's input rows, channels ``c0``.., one LOAD per phase plane into the step's WEIGHT half."""
        layer = self.layer
        c = layer.x.shape[1]
        stride_h, stride_w = layer.stride
        rows = phase_slots(tile.in_rows - tile.pad_top - tile.pad_bottom, tile.pad_top, tile.pad_bottom, stride_h)
        plane_bytes = rows[0].slots * self.columns[0].slots * channels
        base, first_row = self.pipeline.half(Buffer.WEIGHT, self.step), max(0, tile.in_first)
        for p, row in enumerate(rows):
            for q, column in enumerate(self.columns):
                self.pipeline.append(Opcode.LOAD, dict(
                    buffer=Buffer.WEIGHT, sram_addr=base + (p * stride_w + q) * plane_bytes,
                    dram_addr=(self.addresses["input"] + (first_row + row.first) * self.input_row + column.first * c
                               + c0),
                    elem_type=self.in_type, y_size=row.count, x_size=column.count, run=channels,
                    dram_y_stride=stride_h * self.input_row, dram_x_stride=stride_w * c, pad_top=row.pad_before,
                    pad_bottom=row.pad_after, pad_left=column.pad_before, pad_right=column.pad_after,
                    pad_value=layer.x_zero_point))

    def _convolve(self, tile: _Tile, chunk_index: int, channels: int, weight_item: int) -> None:
        """The tile's DWCONV into its accumulator half."""
        layer = self.layer
        _, _, kh, kw = layer.w.shape
        kernel = self.pipeline.half(Buffer.ACT, weight_item) + (tile.k0 * self.taps if self.resident else 0)
        self.pipeline.append(Opcode.DWCONV, dict(
            in_addr=self.pipeline.half(Buffer.WEIGHT, self.step), in_h=tile.in_rows,
            in_w=layer.x.shape[3] + layer.padding[1] + layer.padding[3], channels=tile.channels,
            in_type=self.in_type, in_zero_point=layer.x_zero_point, wgt_addr=kernel, w_zero_point=layer.w_zero_point,
            k_h=kh, k_w=kw, stride_h=layer.stride[0], stride_w=layer.stride[1], dilation_h=layer.dilation[0],
            dilation_w=layer.dilation[1], acc_addr=self.pipeline.half(Buffer.ACC, tile.index), accumulate=0))
