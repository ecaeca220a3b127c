"""Reshape, Flatten, Squeeze, Unsqueeze, Transpose, nearest Resize and Pad: data movement only.

In the channels-last DRAM layout many of them move nothing (a [1, C, 1, 1] tensor flattened to [1, C], an
unsqueeze of a vector): the output then is the input's region under a second name. Otherwise the output is a
gather: for each output element, the input element it copies. That map is cut into DMA patterns (runs of
consecutive source elements, repeated at a constant stride, repeated again at a constant stride), each a LOAD
into the activation buffer; a 1x1 max pool copies the tile to the output buffer (MAX of one tap is the value
itself) and STORE writes it back contiguously. A constant Pad's fill comes from a small DRAM constant of its
value: runs of fill are patterns over that constant (repeated at stride 0), never mixed with input patterns.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aipu.compiler.lowering.base import Context, dtype_code, field_max
from aipu.compiler.lowering.memory import channels_last, from_channels_last
from aipu.compiler.lowering.pipeline import Tile, emit_pipeline, half_bytes
from aipu.compiler.qir import QLayout
from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.isa import Opcode, PoolMode

def source_map(op: QLayout, x_shape: tuple[int, ...], y_shape: tuple[int, ...]) -> np.ndarray:
    """For each element of the output's channels-last layout, the index of the input element it copies in
    the input's channels-last layout (-1: the fill value)."""
    ids = from_channels_last(np.arange(int(np.prod(x_shape)), dtype=np.int64), x_shape)
    if op.permutation is not None:
        moved = ids.transpose(op.permutation)
    elif op.gather is not None:
        moved = np.where(op.gather < 0, -1, ids.reshape(-1)[op.gather]).reshape(y_shape)
    else:
        moved = ids.reshape(y_shape)
    return channels_last(moved).reshape(-1)


def patterns(sources: np.ndarray, size_max: int) -> list[tuple[int, int, int, int, int, int, int]]:
    """``sources`` (consecutive output elements) as DMA patterns in order: (first output element, source
    start, y_size, y_stride, x_size, x_stride, run); each copies y_size * x_size * run elements, strides in
    elements and never negative (DMA strides are unsigned); sizes at most ``size_max``."""
    out, position, total = [], 0, sources.size
    while position < total:
        start = int(sources[position])
        run = 1
        while position + run < total and run < size_max and sources[position + run] == start + run:
            run += 1
        x_size, x_stride = 1, 0
        while True:          # more runs at a constant stride
            nxt = position + x_size * run
            if nxt + run > total or x_size >= size_max:
                break
            stride = int(sources[nxt]) - start if x_size == 1 else x_stride
            if stride < 0 or not np.array_equal(sources[nxt:nxt + run], start + x_size * stride + np.arange(run)):
                break
            x_stride, x_size = stride, x_size + 1
        y_size, y_stride, block = 1, 0, x_size * run
        block_map = sources[position:position + block] - start
        while True:          # more blocks at a constant stride
            nxt = position + y_size * block
            if nxt + block > total or y_size >= size_max:
                break
            stride = int(sources[nxt]) - start if y_size == 1 else y_stride
            if stride < 0 or not np.array_equal(sources[nxt:nxt + block] - start - y_size * stride, block_map):
                break
            y_stride, y_size = stride, y_size + 1
        out.append((position, start, y_size, y_stride, x_size, x_stride, run))
        position += y_size * block
    return out


@dataclass
class LayoutPlan:
    op: QLayout
    alias: bool
    tiles: list[list[tuple]]        # per tile: patterns (output element, source, y, y_stride, x, x_stride, run,
    fill_run: int = 0               #   from the fill constant), the fill constant's length in elements


def _segments(sources: np.ndarray, size_max: int) -> list[tuple[tuple, bool]]:
    """The patterns of ``sources`` (-1: fill), each with whether it reads the fill constant; a run of fill of
    length L reads elements 0..L-1 of the constant (modulo its length ``size_max``)."""
    out, start = [], 0
    fill = sources < 0
    edges = np.flatnonzero(np.diff(fill.astype(np.int8))) + 1
    for end in [*edges.tolist(), sources.size]:
        segment = np.arange(end - start) % size_max if fill[start] else sources[start:end]
        out += [((first + start, *rest), bool(fill[start])) for first, *rest in patterns(segment, size_max)]
        start = end
    return out


def _split(pattern: tuple, limit: int) -> list[tuple]:
    """A pattern cut into pieces of at most ``limit`` elements: whole rows, else columns of a row, else runs."""
    first, start, y_size, y_stride, x_size, x_stride, run = pattern
    if y_size * x_size * run <= limit:
        return [pattern]
    row = x_size * run
    if row <= limit:
        rows = limit // row
        return [(first + r * row, start + r * y_stride, min(rows, y_size - r), y_stride, x_size, x_stride, run)
                for r in range(0, y_size, rows)]
    pieces = []
    for r in range(y_size):
        base, origin = first + r * row, start + r * y_stride
        if run <= limit:
            columns = limit // run
            pieces += [(base + c * run, origin + c * x_stride, 1, 0, min(columns, x_size - c), x_stride, run)
                       for c in range(0, x_size, columns)]
        else:
            pieces += [(base + c * run + e, origin + c * x_stride + e, 1, 0, 1, 0, min(limit, run - e))
                       for c in range(x_size) for e in range(0, run, limit)]
    return pieces


class LayoutLowering:
    def plan(self, op: QLayout, context: Context) -> LayoutPlan:
        x, y = context.tensors[op.x], context.tensors[op.y]
        sources = source_map(op, x.shape, y.shape)
        if np.array_equal(sources, np.arange(sources.size)):
            return LayoutPlan(op, True, [])
        halves = min(half_bytes(context.program, Buffer.ACT), half_bytes(context.program, Buffer.OUT))
        limit = min(halves // x.dtype.itemsize, field_max(context.config, Opcode.POOL, "channels"))
        size_max = field_max(context.config, Opcode.LOAD, "y_size", "x_size", "run")
        tiles, current, filled = [], [], 0
        for pattern, from_fill in _segments(sources, size_max):
            for piece in _split(pattern, limit):
                size = piece[2] * piece[4] * piece[6]
                if filled + size > limit:
                    tiles.append(current)
                    current, filled = [], 0
                current.append((*piece, from_fill))
                filled += size
        tiles.append(current)
        fills = sources < 0
        return LayoutPlan(op, False, tiles, min(size_max, int(np.count_nonzero(fills))) if fills.any() else 0)

    def emit(self, plan: LayoutPlan, context: Context) -> None:
        op = plan.op
        x, y = context.tensors[op.x], context.tensors[op.y]
        if plan.alias:
            context.plan.alias(op.y, op.x)
            return
        elem, code = x.dtype.itemsize, dtype_code(x.dtype)
        source = context.address(op.x)
        fill = (context.plan.constant(f"{op.name}/fill", np.full(plan.fill_run, op.fill, x.dtype))
                if plan.fill_run else 0)
        target = context.plan.tensor(op.y, y.shape, y.dtype)

        def build(t: int, act: int, out: int) -> Tile:
            pieces = plan.tiles[t]
            first = pieces[0][0]
            count = sum(y_size * x_size * run for _, _, y_size, _, x_size, _, run, _ in pieces)
            loads = [dict(buffer=Buffer.ACT, sram_addr=act + (position - first) * elem,
                          dram_addr=(fill if from_fill else source) + start * elem, elem_type=code, y_size=y_size,
                          x_size=x_size, run=run, dram_y_stride=y_stride * elem, dram_x_stride=x_stride * elem)
                     for position, start, y_size, y_stride, x_size, x_stride, run, from_fill in pieces]
            copy = dict(src_buf=Buffer.ACT, src_addr=act, dst_addr=out, in_h=1, in_w=1, channels=count, dtype=code,
                        mode=PoolMode.MAX)
            store = dict(sram_addr=out, dram_addr=target + first * elem, elem_type=code, run=count)
            return Tile(loads, [(Opcode.POOL, copy)], [store])

        emit_pipeline(context.pipeline, len(plan.tiles), build)
