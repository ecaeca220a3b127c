"""Element-wise operators and concatenation on the ELTWISE unit (queue POOL).

Tiles are output rows x channels of the channels-last output. An operand of the output's shape loads as the
tile's box; a broadcast operand (a per-channel vector as in squeeze-excitation, a per-pixel map, a scalar)
loads through a DMA pattern whose broadcast dimensions have stride 0, so the unit always sees two dense
operands of equal length. Concat requantizes each input into its box of the output (ELTWISE RESCALE),
one pipeline operator per input.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aipu.compiler.lowering.base import Context, dtype_code, field_max, image_shape
from aipu.compiler.lowering.pipeline import Tile, emit_pipeline, half_bytes
from aipu.compiler.qir import QConcat, QEltwise, QTensor
from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import EltwiseOp, Opcode, Rounding

_OPERAND_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))


def _tiles(context: Context, height: int, width: int, channels: int, bytes_in: int, bytes_out: int,
           name: str) -> tuple[int, int]:
    """(rows, channels) per tile: the largest whose operands fit half the ACT buffer and result half OUT."""
    count_max = field_max(context.config, Opcode.ELTWISE, "count")
    size_max = field_max(context.config, Opcode.LOAD, "y_size", "x_size", "run")     # STORE's are as wide
    for tc in sorted({-(-channels // n) for n in range(1, channels + 1)}, reverse=True):
        for rows in range(height, 0, -1):
            count = rows * width * tc
            if (count * bytes_in <= half_bytes(context.program, Buffer.ACT) and count <= count_max
                    and count * bytes_out <= half_bytes(context.program, Buffer.OUT)
                    and max(rows, width, tc) <= size_max):
                return rows, tc
    raise InputError(f"layer {name!r}", f"{height}x{width}x{channels}", "no tile fits half the ACT and OUT buffers")


def _operand_loads(tensor: QTensor, address: int, out_shape: tuple[int, int, int], r0: int, rows: int, c0: int,
                   tc: int, sram: int) -> list[dict]:
    """LOADs that fill ``rows x W x tc`` dense elements at ``sram`` from ``tensor`` broadcast to the output
    (operands are bytes: offsets and strides in elements are in bytes)."""
    height, width, channels = image_shape(tensor)
    _, out_w, _ = out_shape
    code = dtype_code(tensor.dtype)
    row_stride = width * channels if height > 1 else 0
    pixel_stride = channels if width > 1 else 0
    first = (r0 if height > 1 else 0) * width * channels + (c0 if channels > 1 else 0)
    if channels > 1 or tc == 1:          # channels contiguous (or one): rows x columns of runs
        return [dict(buffer=Buffer.ACT, sram_addr=sram, dram_addr=address + first, elem_type=code, y_size=rows,
                     x_size=out_w, run=tc, dram_y_stride=row_stride, dram_x_stride=pixel_stride)]
    return [dict(buffer=Buffer.ACT, sram_addr=sram + row * out_w * tc, dram_addr=address + first + row * row_stride,
                 elem_type=code, y_size=out_w, x_size=tc, run=1, dram_y_stride=pixel_stride, dram_x_stride=0)
            for row in range(rows)]        # one value per pixel repeated over the channels: a LOAD per row


@dataclass
class EltwisePlan:
    op: QEltwise
    rows: int
    channels: int


class EltwiseLowering:
    def plan(self, op: QEltwise, context: Context) -> EltwisePlan:
        for name in (op.a, op.b):
            if context.tensors[name].dtype not in _OPERAND_TYPES:
                raise InputError(f"layer {op.name!r} operand {name!r}", context.tensors[name].dtype.name,
                                 "int8 or uint8 (ELTWISE a_type/b_type)")
        y = context.tensors[op.y]
        height, width, channels = image_shape(y)
        return EltwisePlan(op, *_tiles(context, height, width, channels, 2, y.dtype.itemsize, op.name))

    def emit(self, plan: EltwisePlan, context: Context) -> None:
        op = plan.op
        a, b, y = (context.tensors[name] for name in (op.a, op.b, op.y))
        out_shape = image_shape(y)
        height, width, channels = out_shape
        sources = context.address(op.a), context.address(op.b)
        target = context.plan.tensor(op.y, y.shape, y.dtype)
        out_bytes = y.dtype.itemsize
        pairs = (op.multiplier, op.shift) if op.op != "mul" else ((op.multiplier, 0), (op.shift, 0))
        tiles = [(r0, min(plan.rows, height - r0), c0, min(plan.channels, channels - c0))
                 for r0 in range(0, height, plan.rows) for c0 in range(0, channels, plan.channels)]

        def build(t: int, act: int, out: int) -> Tile:
            r0, rows, c0, tc = tiles[t]
            count = rows * width * tc
            loads = (_operand_loads(a, sources[0], out_shape, r0, rows, c0, tc, act)
                     + _operand_loads(b, sources[1], out_shape, r0, rows, c0, tc, act + count))
            fields = dict(op=EltwiseOp[op.op.upper()], a_buf=Buffer.ACT, a_addr=act, b_buf=Buffer.ACT,
                          b_addr=act + count, dst_addr=out, count=count, a_type=dtype_code(a.dtype),
                          b_type=dtype_code(b.dtype), out_type=dtype_code(y.dtype), a_zero_point=a.zero_point,
                          b_zero_point=b.zero_point, out_zero_point=y.zero_point, a_multiplier=pairs[0][0],
                          a_shift=pairs[1][0], b_multiplier=pairs[0][1], b_shift=pairs[1][1],
                          rounding=Rounding[op.rounding.upper()], qmin=op.qmin, qmax=op.qmax)
            store = dict(sram_addr=out, dram_addr=target + (r0 * width * channels + c0) * out_bytes,
                         elem_type=dtype_code(y.dtype), y_size=rows, x_size=width, run=tc,
                         dram_y_stride=width * channels * out_bytes, dram_x_stride=channels * out_bytes)
            return Tile(loads, [(Opcode.ELTWISE, fields)], [store])

        emit_pipeline(context.pipeline, len(tiles), build)


# A [1, C, H, W], [1, C, L] or [1, C] tensor's axis as its position in image_shape's (H, W, C).
_IMAGE_AXIS = {4: {1: 2, 2: 0, 3: 1}, 3: {1: 2, 2: 1}, 2: {1: 2}}


@dataclass
class ConcatPlan:
    op: QConcat
    boxes: list[tuple[int, int, int]]                 # each input's (row, column, channel) offset in the output
    tiles: list[tuple[int, int]]                      # each input's (rows, channels) per tile


class ConcatLowering:
    def plan(self, op: QConcat, context: Context) -> ConcatPlan:
        y = context.tensors[op.y]
        axis = _IMAGE_AXIS[len(y.shape)][op.axis]                            # NCHW axis -> (H, W, C) position
        boxes, tiles, offset = [], [], 0
        for name in op.xs:
            x = context.tensors[name]
            if x.dtype not in _OPERAND_TYPES:
                raise InputError(f"layer {op.name!r} input {name!r}", x.dtype.name, "int8 or uint8 (ELTWISE a_type)")
            shape = image_shape(x)
            box = [0, 0, 0]
            box[axis] = offset
            offset += shape[axis]
            boxes.append(tuple(box))
            tiles.append(_tiles(context, *shape, 1, y.dtype.itemsize, op.name))
        return ConcatPlan(op, boxes, tiles)

    def emit(self, plan: ConcatPlan, context: Context) -> None:
        op, y = plan.op, context.tensors[plan.op.y]
        _, out_w, out_c = image_shape(y)
        target = context.plan.tensor(op.y, y.shape, y.dtype)
        out_bytes = y.dtype.itemsize
        for index, name in enumerate(op.xs):
            x = context.tensors[name]
            height, width, channels = image_shape(x)
            source = context.address(name)
            rows_per, tc_per = plan.tiles[index]
            top, left, front = plan.boxes[index]
            tiles = [(r0, min(rows_per, height - r0), c0, min(tc_per, channels - c0))
                     for r0 in range(0, height, rows_per) for c0 in range(0, channels, tc_per)]

            def build(t: int, act: int, out: int, x=x, source=source, tiles=tiles, index=index, width=width,
                      channels=channels, top=top, left=left, front=front) -> Tile:
                r0, rows, c0, tc = tiles[t]
                load = _operand_loads(x, source, (height, width, channels), r0, rows, c0, tc, act)
                fields = dict(op=EltwiseOp.RESCALE, a_buf=Buffer.ACT, a_addr=act, dst_addr=out, count=rows * width * tc,
                              a_type=dtype_code(x.dtype), out_type=dtype_code(y.dtype),
                              a_zero_point=x.zero_point, out_zero_point=y.zero_point,
                              a_multiplier=op.multipliers[index], a_shift=op.shifts[index],
                              rounding=Rounding[op.rounding.upper()], qmin=int(np.iinfo(y.dtype).min),
                              qmax=int(np.iinfo(y.dtype).max))
                first = ((top + r0) * out_w + left) * out_c + front + c0
                store = dict(sram_addr=out, dram_addr=target + first * out_bytes, elem_type=dtype_code(y.dtype),
                             y_size=rows, x_size=width, run=tc, dram_y_stride=out_w * out_c * out_bytes,
                             dram_x_stride=out_c * out_bytes)
                return Tile(load, [(Opcode.ELTWISE, fields)], [store])

            emit_pipeline(context.pipeline, len(tiles), build)
