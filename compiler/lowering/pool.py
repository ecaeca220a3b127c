"""Max, average and global average pooling on the POOL unit: tiles of output rows x channels, each a LOAD of
the input rows it reads, one POOL (with the tile's own share of the padding) and a STORE."""
from __future__ import annotations

from dataclasses import dataclass

from aipu.compiler.lowering.base import Context, dtype_code, field_max, image_shape
from aipu.compiler.lowering.pipeline import Tile, emit_pipeline, half_bytes
from aipu.compiler.qir import QPool
from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode, PoolMode, Rounding


@dataclass
class PoolPlan:
    op: QPool
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    rows: int                # output rows per tile
    channels: int            # channels per tile


class PoolLowering:
    def plan(self, op: QPool, context: Context) -> PoolPlan:
        x, y = context.tensors[op.x], context.tensors[op.y]
        h, w, c = image_shape(x)
        out_h, out_w, _ = image_shape(y)
        if op.mode == "global_avg":
            kernel, stride, padding = (h, w), (1, 1), (0, 0, 0, 0)
        else:
            kernel, stride, padding = op.kernel, op.stride, op.padding
        for name, values, fields in (("kernel", kernel, ("k_h", "k_w")), ("stride", stride, ("stride_h", "stride_w")),
                                     ("dilation", op.dilation, ("dilation_h", "dilation_w")),
                                     ("padding", padding, ("pad_top", "pad_left", "pad_bottom", "pad_right"))):
            for value, field in zip(values, fields):
                if value > field_max(context.config, Opcode.POOL, field):
                    raise InputError(f"layer {op.name!r} {name}", list(values),
                                     f"at most {field_max(context.config, Opcode.POOL, field)} (POOL {field})")
        elem = x.dtype.itemsize
        span = (kernel[0] - 1) * op.dilation[0] + 1
        size_max = field_max(context.config, Opcode.POOL, "in_h", "in_w", "channels")
        for channels in sorted({-(-c // n) for n in range(1, c + 1)}, reverse=True):
            for rows in range(out_h, 0, -1):
                in_rows = min(h, (rows - 1) * stride[0] + span)
                if (in_rows * w * channels * elem <= half_bytes(context.program, Buffer.ACT)
                        and rows * out_w * channels * elem <= half_bytes(context.program, Buffer.OUT)
                        and max(in_rows, w, channels) <= size_max):
                    return PoolPlan(op, kernel, stride, padding, rows, channels)
        raise InputError(f"layer {op.name!r}", f"{h}x{w}x{c}", "no tile of it fits half the ACT and OUT buffers")

    def emit(self, plan: PoolPlan, context: Context) -> None:
        op = plan.op
        x, y = context.tensors[op.x], context.tensors[op.y]
        h, w, c = image_shape(x)
        out_h, out_w, _ = image_shape(y)
        elem, code = x.dtype.itemsize, dtype_code(x.dtype)
        source = context.address(op.x)
        target = context.plan.tensor(op.y, y.shape, y.dtype)
        top, left, _, right = plan.padding
        span = (plan.kernel[0] - 1) * op.dilation[0] + 1
        tiles = [(r0, min(plan.rows, out_h - r0), c0, min(plan.channels, c - c0))
                 for r0 in range(0, out_h, plan.rows) for c0 in range(0, c, plan.channels)]

        def build(t: int, act: int, out: int) -> Tile:
            r0, rows, c0, channels = tiles[t]
            first = r0 * plan.stride[0] - top
            needed = (rows - 1) * plan.stride[0] + span
            pad_top, pad_bottom = max(0, -first), max(0, first + needed - h)
            real = needed - pad_top - pad_bottom
            load = dict(buffer=Buffer.ACT, sram_addr=act, dram_addr=source + (max(0, first) * w * c + c0) * elem,
                        elem_type=code, y_size=real, x_size=w, run=channels, dram_y_stride=w * c * elem,
                        dram_x_stride=c * elem)
            pool = dict(src_buf=Buffer.ACT, src_addr=act, dst_addr=out, in_h=real, in_w=w, channels=channels,
                        dtype=code, mode=PoolMode.MAX if op.mode == "max" else PoolMode.AVG, k_h=plan.kernel[0],
                        k_w=plan.kernel[1], stride_h=plan.stride[0], stride_w=plan.stride[1],
                        dilation_h=op.dilation[0], dilation_w=op.dilation[1], pad_top=pad_top, pad_left=left,
                        pad_bottom=pad_bottom, pad_right=right,
                        **({} if op.mode == "max" else dict(count_include_pad=int(op.count_include_pad),
                                                                zero_point=x.zero_point)),
                        rounding=Rounding[op.rounding.upper()])
            store = dict(sram_addr=out, dram_addr=target + (r0 * out_w * c + c0) * elem, elem_type=code, y_size=rows,
                         x_size=out_w, run=channels, dram_y_stride=out_w * c * elem, dram_x_stride=c * elem)
            return Tile([load], [(Opcode.POOL, pool)], [store])

        emit_pipeline(context.pipeline, len(tiles), build)

