"""Emit one conv layer (conv + requant, + LUT) as per-unit commands, tiled by its :class:`TilePlan`.

The input (HWC), weights (OHWI), per-channel parameter records and the output (HWC) lie in DRAM. The output
is split into tiles of ``tile_k`` output channels x ``tile_rows`` output rows (always the full width); the
input channels of a tile are split into chunks of ``tile_c`` that CONV accumulates, one CONV step each. An
unrolled plan loads each tile's kernel windows as the channels of a 1x1 CONV (im2col.py), one step a tile.
Every on-chip buffer is used as two halves, an item in each: ACT per CONV step (LOAD -> CONV), WEIGHT per
step when chunks reload weights, else per k-tile (LOAD or WDEC -> CONV), PARAM per k-tile (LOAD -> REQUANT),
ACC per tile (CONV -> REQUANT), OUT per tile (REQUANT (-> LUT, in place) -> STORE); the activation table is
loaded first into a LUT half. The pipeline (pipeline.py) derives the tokens from these accesses: the data
tokens along each chain, the free tokens back, and the hand-over from the previous layer.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from aipu.compiler.lowering.conv_layer import ConvLayer, weight_bytes, weight_dram_bytes
from aipu.compiler.lowering.conv_plan import TilePlan
from aipu.compiler.lowering.im2col import UnrolledWindow
from aipu.compiler.lowering.pipeline import Pipeline
from aipu.sim.machine.arch import PARAM_RECORD_BYTES, Buffer, DType, elements_bytes
from aipu.sim.machine.isa import CODEBOOK_SLOT_BYTES, LutMode, Opcode, RequantMode

WeightStream = Callable[[int, int, int, int], tuple[int, int, int] | None]


def emit_conv_layer(pipeline: Pipeline, layer: ConvLayer, plan: TilePlan, addresses: Mapping[str, int], *,
                    input_row: int | None = None, output_steps: tuple[int, int] | None = None,
                    weight_stream: WeightStream | None = None) -> None:
    """Append one layer's commands to ``pipeline`` as an operator of their own.

    ``addresses``: DRAM byte addresses of "input" (HWC), "weights" (OHWI), "params" (records), "output"
    (HWC) and, with a table, "lut" ("weights" is only read when a weight tile is loaded raw). The input and
    the output may be views of larger tensors: ``input_row`` elements between input rows (default W * C),
    ``output_steps`` elements between output rows and between output pixels (default out_w * K and K), as a
    transposed convolution's phases read and write them. ``weight_stream(k0, k, c0, c)``: where the compressed
    stream of the weights [k0:k0+k, c0:c0+c] lies in DRAM (address, length, parts), or None to load that tile raw; a
    placed tile is decoded by WDEC instead."""
    _ConvEmitter(pipeline, layer, plan, addresses, input_row, output_steps, weight_stream).emit()


@dataclass(frozen=True)
class _Tile:
    """One output tile: ``channels`` output channels from ``k0`` (k-tile ``kt``) x ``rows`` rows from ``r0``, and
    the input rows it reads: ``in_rows`` from ``in_first``, of which ``pad_top`` and ``pad_bottom`` are padding."""

    index: int
    kt: int
    k0: int
    channels: int
    r0: int
    rows: int
    in_first: int
    in_rows: int
    pad_top: int
    pad_bottom: int
    loads_params: bool       # the tile's records (and, unless chunks reload them, weights) arrive with it


class _ConvEmitter:
    """The layer's work (tiles, CONV steps) and the commands of each, appended through one pipeline."""

    def __init__(self, pipeline: Pipeline, layer: ConvLayer, plan: TilePlan, addresses: Mapping[str, int],
                 input_row: int | None, output_steps: tuple[int, int] | None,
                 weight_stream: WeightStream | None) -> None:
        program = pipeline.program
        self.pipeline, self.layer, self.plan, self.addresses = pipeline, layer, plan, addresses
        self.weight_stream = weight_stream
        _, c, _, w = layer.x.shape
        k, cg, _, _ = layer.w.shape
        self.kg = k // layer.groups
        self.input_row = w * c if input_row is None else input_row
        self.out_row, self.out_pixel = (plan.out_w * k, k) if output_steps is None else output_steps
        self.in_type = layer.in_type
        self.k_tiles = [(k0, min(plan.tile_k, k - k0)) for k0 in range(0, k, plan.tile_k)]
        self.row_tiles = [(r0, min(plan.tile_rows, plan.out_h - r0)) for r0 in range(0, plan.out_h, plan.tile_rows)]
        self.dense = layer.groups == 1 or plan.tile_c < cg      # a chunked grouped tile holds one group: dense
        per_conv = c if layer.groups == 1 else cg
        self.chunks = ([(c0, min(plan.tile_c, per_conv - c0)) for c0 in range(0, per_conv, plan.tile_c)]
                       if self.dense else [None])
        self.reload_weights = len(self.chunks) > 1
        self.window = UnrolledWindow.of(layer) if plan.unrolled else None
        # A grouped layer whose weights and records all fit one half loads them once: its tiles differ only there.
        self.resident = (not self.dense and len(self.k_tiles) > 1
                         and weight_bytes(layer, layer.w.size * layer.planes)
                         <= program.config.buffer(Buffer.WEIGHT).bytes // 2
                         and k <= program.config.buffer_units(Buffer.PARAM) // 2)
        self.step = 0

    def emit(self) -> None:
        self.pipeline.begin()
        if self.layer.lut is not None:   # the table stays in LUT memory for the whole layer
            self.pipeline.append(Opcode.LOAD, dict(buffer=Buffer.LUT, sram_addr=self._table_address(),
                                                   dram_addr=self.addresses["lut"], run=self.layer.lut.nbytes))
        if self.layer.codebook is not None:     # so does the codebook, after the table
            self.pipeline.append(Opcode.LOAD, dict(buffer=Buffer.LUT, sram_addr=self._codebook_address(),
                                                   dram_addr=self.addresses["codebook"],
                                                   run=1 << self.layer.index_bits))
        if self.layer.circulant is not None:    # or a circulant layer's sign bits
            self.pipeline.append(Opcode.LOAD, dict(buffer=Buffer.LUT, sram_addr=self._codebook_address(),
                                                   dram_addr=self.addresses["signs"], run=self._sign_bytes()))
        for tile in self._tiles():
            for chunk_index, chunk in enumerate(self.chunks):
                self._conv_step(tile, chunk_index, chunk)
            self._requantize(tile)
            if self.layer.lut is not None:
                self._apply_table(tile)
            self._store(tile)

    def _table_address(self) -> int:
        return self.pipeline.table_address(self._lut_bytes())

    def _lut_bytes(self) -> int:
        """LUT memory the layer uses: its table, then its codebook or sign bits in slots of their own."""
        table = 0 if self.layer.lut is None else -(-self.layer.lut.nbytes // CODEBOOK_SLOT_BYTES) * CODEBOOK_SLOT_BYTES
        return table + self._slot_bytes()

    def _sign_bytes(self) -> int:
        return -(-self.layer.w.shape[1] // 8)

    def _slot_bytes(self) -> int:
        """The codebook's slot, or the slots the sign bits fill, or nothing."""
        if self.layer.codebook is not None:
            return CODEBOOK_SLOT_BYTES
        return -(-self._sign_bytes() // CODEBOOK_SLOT_BYTES) * CODEBOOK_SLOT_BYTES if self.layer.circulant else 0

    def _codebook_address(self) -> int:
        return self.pipeline.table_address(self._lut_bytes()) + self._lut_bytes() - self._slot_bytes()

    def _tiles(self) -> list[_Tile]:
        """The output tiles, k-tile by k-tile, with the input rows each reads."""
        layer = self.layer
        h = layer.x.shape[2]
        stride, top = layer.stride[0], layer.padding[0]
        span = layer.dilation[0] * (layer.w.shape[2] - 1) + 1
        tiles = []
        for kt, (k0, tk) in enumerate(self.k_tiles):
            for rt, (r0, rows) in enumerate(self.row_tiles):
                in_first, in_rows = r0 * stride - top, (rows - 1) * stride + span
                loads_params = kt == 0 and rt == 0 if self.resident else rt == 0
                tiles.append(_Tile(len(tiles), kt, k0, tk, r0, rows, in_first, in_rows, max(0, -in_first),
                                   max(0, in_first + in_rows - h), loads_params))
        return tiles

    def _conv_step(self, tile: _Tile, chunk_index: int, chunk: tuple[int, int] | None) -> None:
        """One CONV step: its loads (records, weights by LOAD or WDEC, activations) and its CONV."""
        _, cg, _, _ = self.layer.w.shape
        group_base = 0 if self.layer.groups == 1 else (tile.k0 // self.kg) * cg      # the tile's first input channel
        c0, tc = (group_base + chunk[0], chunk[1]) if chunk is not None else (group_base, tile.channels // self.kg * cg)
        weight_item = self.step if self.reload_weights else 0 if self.resident else tile.kt
        brings_params = tile.loads_params and chunk_index == 0
        if brings_params:
            self._load_params(tile)
        placed = None
        if self.reload_weights or brings_params:
            weights = (tile.k0, self.layer.w.shape[0] if self.resident else tile.channels,
                       c0 - group_base if self.dense else 0, tc if self.dense else cg)
            placed = self.weight_stream(*weights) if self.weight_stream is not None else None
            if placed is None:
                self._load_weights(weight_item, *weights)
        self._load_activations(tile, c0, tc)
        if placed is not None:
            self._decode_weights(weight_item, placed, *weights[1:])
        self._convolve(tile, chunk_index, tc, weight_item)
        self.step += 1

    def _load_params(self, tile: _Tile) -> None:
        loaded_k = self.layer.w.shape[0] if self.resident else tile.channels
        self.pipeline.append(Opcode.LOAD, dict(
            buffer=Buffer.PARAM, sram_addr=self.pipeline.half(Buffer.PARAM, tile.kt) * PARAM_RECORD_BYTES,
            dram_addr=self.addresses["params"] + tile.k0 * PARAM_RECORD_BYTES, elem_type=DType.INT8, y_size=1,
            x_size=1, run=loaded_k * PARAM_RECORD_BYTES))

    def _load_weights(self, item: int, k0: int, out_c: int, c0: int, in_c: int) -> None:
        """The raw weights [k0:k0+out_c, c0:c0+in_c] (OHWI in DRAM; dual planes: both of each channel) into weight
        half ``item``."""
        layer = self.layer
        _, cg, kh, kw = layer.w.shape
        k0, out_c = k0 * layer.planes, out_c * layer.planes
        packed = functools.partial(weight_dram_bytes, layer)     # INT4 two a byte, codebook indices 8 / bits a byte
        codebook = {} if layer.codebook is None else dict(index_bits=layer.index_bits,
                                                          codebook_addr=self._codebook_address() // CODEBOOK_SLOT_BYTES)
        if layer.circulant is not None:        # the first filter of each block row, expanded by LOAD
            self._load_circulant(item, k0, out_c, kh * kw, cg)
            return
        self.pipeline.append(Opcode.LOAD, dict(
            buffer=Buffer.WEIGHT, sram_addr=self.pipeline.half(Buffer.WEIGHT, item),
            dram_addr=self.addresses["weights"] + packed(k0 * kh * kw * cg + c0), elem_type=DType.INT8,
            y_size=out_c, x_size=kh * kw, run=weight_bytes(layer, in_c), dram_y_stride=packed(kh * kw * cg),
            dram_x_stride=packed(cg), **codebook))

    def _load_circulant(self, item: int, k0: int, out_c: int, taps: int, channels: int) -> None:
        """Filters k0..k0+out_c (whole block rows, all input channels) from their block rows' first filters: a
        run per tap, so that a run's byte t is input channel t, whose sign bit LOAD applies."""
        size = self.layer.circ_size
        self.pipeline.append(Opcode.LOAD, dict(
            buffer=Buffer.WEIGHT, sram_addr=self.pipeline.half(Buffer.WEIGHT, item),
            dram_addr=self.addresses["weights"] + k0 // size * taps * channels, elem_type=DType.INT8,
            y_size=out_c // size, x_size=taps, run=channels, dram_y_stride=taps * channels, dram_x_stride=channels,
            circ_log2=size.bit_length() - 1, codebook_addr=self._codebook_address() // CODEBOOK_SLOT_BYTES))

    def _decode_weights(self, item: int, placed: tuple[int, int, int], out_c: int, c0: int, in_c: int) -> None:
        """WDEC of the stream ``placed`` (DRAM address, length, parts) into weight half ``item``."""
        _, _, kh, kw = self.layer.w.shape
        self.pipeline.append(Opcode.WDEC, dict(
            dram_addr=placed[0], length=placed[1], wgt_addr=self.pipeline.half(Buffer.WEIGHT, item), out_c=out_c,
            in_c=in_c, k_h=kh, k_w=kw, parts=placed[2]))

    def _load_activations(self, tile: _Tile, c0: int, channels: int) -> None:
        """The tile's input rows, channels ``c0``.. (HWC in DRAM), padded as the CONV reads them."""
        if self.window is not None:
            self._load_windows(tile)
            return
        layer = self.layer
        _, c, _, w = layer.x.shape
        real_rows = tile.in_rows - tile.pad_top - tile.pad_bottom
        packed = functools.partial(elements_bytes, dtype=self.in_type)      # INT4 two a byte
        elem_type, per_element, pad_value = dma_form(self.in_type, layer.x_zero_point)
        self.pipeline.append(Opcode.LOAD, dict(
            buffer=Buffer.ACT, sram_addr=self.pipeline.half(Buffer.ACT, self.step),
            dram_addr=self.addresses["input"] + packed(max(0, tile.in_first) * self.input_row + c0),
            elem_type=elem_type, y_size=real_rows, x_size=w, run=channels // per_element,
            dram_y_stride=packed(self.input_row), dram_x_stride=packed(c), pad_top=tile.pad_top,
            pad_bottom=tile.pad_bottom, pad_left=layer.padding[1], pad_right=layer.padding[3], pad_value=pad_value))

    def _load_windows(self, tile: _Tile) -> None:
        """Unrolled: each output row's kernel windows, [out_w][k_h][k_w][C] after the tile's previous rows."""
        window, base = self.window, self.pipeline.half(Buffer.ACT, self.step)
        for row in range(tile.rows):
            row_start = base + row * self.plan.out_w * window.depth
            for offset, fields in window.row_loads(tile.r0 + row, self.input_row):
                self.pipeline.append(Opcode.LOAD, dict(
                    fields, buffer=Buffer.ACT, sram_addr=row_start + offset,
                    dram_addr=self.addresses["input"] + fields["dram_addr"], elem_type=self.in_type,
                    pad_value=self.layer.x_zero_point))

    def _convolve(self, tile: _Tile, chunk_index: int, channels: int, weight_item: int) -> None:
        """The step's CONV into the tile's accumulator half (adding to it after the first chunk)."""
        layer = self.layer
        _, cg, kh, kw = layer.w.shape
        wgt_addr = (self.pipeline.half(Buffer.WEIGHT, weight_item)
                    + (weight_bytes(layer, tile.k0 * layer.planes * kh * kw * cg) if self.resident else 0))
        self.pipeline.append(Opcode.CONV, dict(
            in_addr=self.pipeline.half(Buffer.ACT, self.step), **self._conv_geometry(tile, channels),
            in_type=self.in_type, in_zero_point=layer.x_zero_point, wgt_addr=wgt_addr,
            w_zero_point=layer.w_zero_point, w_type=layer.w_type, out_c=tile.channels * layer.planes,
            groups=1 if self.dense else tile.channels // self.kg,
            acc_addr=self.pipeline.half(Buffer.ACC, tile.index), accumulate=int(chunk_index > 0)))

    def _conv_geometry(self, tile: _Tile, channels: int) -> dict:
        """A CONV's input tile and kernel: the padded input rows, or unrolled a 1x1 conv over the windows."""
        layer = self.layer
        if self.window is not None:
            return dict(in_h=tile.rows, in_w=self.plan.out_w, in_c=self.window.depth, k_h=1, k_w=1, stride_h=1,
                        stride_w=1, dilation_h=1, dilation_w=1)
        return dict(in_h=tile.in_rows, in_w=layer.x.shape[3] + layer.padding[1] + layer.padding[3], in_c=channels,
                    k_h=layer.w.shape[2], k_w=layer.w.shape[3], stride_h=layer.stride[0], stride_w=layer.stride[1],
                    dilation_h=layer.dilation[0], dilation_w=layer.dilation[1])

    def _requantize(self, tile: _Tile) -> None:
        layer = self.layer
        qmin, qmax = layer.clamp
        param_index = (self.pipeline.half(Buffer.PARAM, 0) + tile.k0 if self.resident
                       else self.pipeline.half(Buffer.PARAM, tile.kt))
        self.pipeline.append(Opcode.REQUANT, dict(
            acc_addr=self.pipeline.half(Buffer.ACC, tile.index), out_addr=self.pipeline.half(Buffer.OUT, tile.index),
            pixels=tile.rows * self.plan.out_w, channels=tile.channels, param_index=param_index,
            out_type=layer.out_type, out_zero_point=layer.out_zero_point, qmin=qmin, qmax=qmax,
            mode=RequantMode.NATIVE if layer.scale is None else RequantMode.FLOAT32,
            rounding=layer.rounding, leaky=int(layer.negative_multiplier is not None), dual=int(layer.planes == 2)))

    def _apply_table(self, tile: _Tile) -> None:
        """The activation table, in place on the tile's output half."""
        layer = self.layer
        out_info = np.iinfo(layer.out_dtype)
        table = dict(table_log2=(len(layer.lut) - 1).bit_length() - 1, index_shift=layer.lut_index_shift,
                     input_min=layer.lut_input_min, qmin=int(out_info.min), qmax=int(out_info.max)) \
            if layer.lut_mode == LutMode.INTERP16 else {}
        out = self.pipeline.half(Buffer.OUT, tile.index)
        self.pipeline.append(Opcode.LUT, dict(
            src_buf=Buffer.OUT, src_addr=out, dst_addr=out, table_addr=self._table_address(),
            count=tile.rows * self.plan.out_w * tile.channels, mode=layer.lut_mode, in_type=layer.out_type,
            out_type=layer.out_type, **table))

    def _store(self, tile: _Tile) -> None:
        packed = functools.partial(elements_bytes, dtype=self.layer.out_type)      # INT4 two a byte
        elem_type, per_element, _ = dma_form(self.layer.out_type)
        self.pipeline.append(Opcode.STORE, dict(
            sram_addr=self.pipeline.half(Buffer.OUT, tile.index),
            dram_addr=self.addresses["output"] + packed(tile.r0 * self.out_row + tile.k0), elem_type=elem_type,
            y_size=tile.rows, x_size=self.plan.out_w, run=tile.channels // per_element,
            dram_y_stride=packed(self.out_row), dram_x_stride=packed(self.out_pixel)))


def dma_form(dtype: DType, zero_point: int = 0) -> tuple[DType, int, int]:
    """How LOAD and STORE move elements of ``dtype``: (elem_type, elements a DMA element holds, the padding
    value at ``zero_point``). INT4 moves as bytes (UINT8) of two, its padding byte the zero point in both
    nibbles (docs/arithmetic.md D23)."""
    if dtype != DType.INT4:
        return dtype, 1, zero_point
    nibble = zero_point & 0xF
    return DType.UINT8, 2, nibble | nibble << 4
