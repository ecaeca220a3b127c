"""Reshape, Flatten, Squeeze, Unsqueeze, Transpose and nearest Resize: data movement only.

In the channels-last DRAM layout many of them move nothing (a [1, C, 1, 1] tensor flattened to [1, C], an
unsqueeze of a vector): the output then is the input's region under a second name. Otherwise the output is a
gather: for each output element, the input element it copies. That map is cut into DMA patterns (runs of
consecutive source elements, repeated at a constant stride, repeated again at a constant stride), each a LOAD
into the activation buffer; a 1x1 max pool copies the tile to the output buffer (MAX of one tap is the value
itself) and STORE writes it back contiguously.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aipu.compiler.lowering.base import Context, dtype_code, field_max
from aipu.compiler.lowering.memory import channels_last, from_channels_last
from aipu.compiler.lowering.pipeline import Link, Tile, emit_pipeline, half_bytes
from aipu.compiler.qir import QLayout
from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.isa import Opcode, PoolMode, Unit

def source_map(op: QLayout, x_shape: tuple[int, ...], y_shape: tuple[int, ...]) -> np.ndarray:
    """For each element of the output's channels-last layout, the index of the input element it copies in
    the input's channels-last layout."""
    ids = from_channels_last(np.arange(int(np.prod(x_shape)), dtype=np.int64), x_shape)
    if op.permutation is not None:
        moved = ids.transpose(op.permutation)
    elif op.gather is not None:
        moved = ids.reshape(-1)[op.gather].reshape(y_shape)
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
    tiles: list[list[tuple]]        # per tile: patterns (output element, source, y, y_stride, x, x_stride, run)


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
        limit = min(halves // x.dtype.itemsize, field_max(context, Opcode.POOL, "channels"))
        tiles, current, filled = [], [], 0
        for pattern in patterns(sources, field_max(context, Opcode.LOAD, "y_size", "x_size", "run")):
            for piece in _split(pattern, limit):
                size = piece[2] * piece[4] * piece[6]
                if filled + size > limit:
                    tiles.append(current)
                    current, filled = [], 0
                current.append(piece)
                filled += size
        tiles.append(current)
        return LayoutPlan(op, False, tiles)

    def emit(self, plan: LayoutPlan, context: Context, link: Link) -> None:
        op = plan.op
        x, y = context.tensors[op.x], context.tensors[op.y]
        if plan.alias:
            context.plan.alias(op.y, op.x)
            return
        elem, code = x.dtype.itemsize, dtype_code(x.dtype)
        source = context.address(op.x)
        target = context.plan.tensor(op.y, y.shape, y.dtype)

        def build(t: int, act: int, out: int) -> Tile:
            pieces = plan.tiles[t]
            first = pieces[0][0]
            count = sum(y_size * x_size * run for _, _, y_size, _, x_size, _, run in pieces)
            loads = [dict(buffer=Buffer.ACT, sram_addr=act + (position - first) * elem, dram_addr=source + start * elem,
                          elem_type=code, y_size=y_size, x_size=x_size, run=run, dram_y_stride=y_stride * elem,
                          dram_x_stride=x_stride * elem)
                     for position, start, y_size, y_stride, x_size, x_stride, run in pieces]
            copy = dict(src_buf=Buffer.ACT, src_addr=act, dst_addr=out, in_h=1, in_w=1, channels=count, dtype=code,
                        mode=PoolMode.MAX)
            store = dict(sram_addr=out, dram_addr=target + first * elem, elem_type=code, run=count)
            return Tile(loads, [(Opcode.POOL, copy)], [store])

        emit_pipeline(context.program, Unit.POOL, len(plan.tiles), build, link)
