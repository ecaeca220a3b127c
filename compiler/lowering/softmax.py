"""Softmax on the LUT unit (docs/arithmetic.md §6.4): the exp table loaded once into LUT memory, then tiles of
whole rows through LOAD, SOFTMAX and STORE. The softmax axis is contiguous in the channels-last layout (the
channels of each pixel, or a whole flattened tensor), so a row is a run of consecutive elements."""
from __future__ import annotations

import math
from dataclasses import dataclass

from aipu.compiler.lowering.base import Context, dtype_code, field_max
from aipu.compiler.lowering.pipeline import Tile, emit_pipeline, half_bytes
from aipu.compiler.qir import QSoftmax
from aipu.sim.machine.arch import SOFTMAX_TABLE_DTYPE, Buffer
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode


@dataclass
class SoftmaxPlan:
    op: QSoftmax
    rows: int               # rows of the whole tensor
    length: int             # elements per row
    rows_per_tile: int


class SoftmaxLowering:
    def plan(self, op: QSoftmax, context: Context) -> SoftmaxPlan:
        x, y = context.tensors[op.x], context.tensors[op.y]
        length = op.length(x.shape)
        rows = math.prod(x.shape) // length
        if length > field_max(context.config, Opcode.SOFTMAX, "length"):
            raise InputError(f"layer {op.name!r} softmax axis", length,
                             f"at most {field_max(context.config, Opcode.SOFTMAX, 'length')} elements (the 32-bit sum)")
        if op.table.nbytes > context.program.config.buffer(Buffer.LUT).bytes:
            raise InputError(f"layer {op.name!r} table", f"{op.table.nbytes} bytes", "fits the LUT memory")
        row_bytes = length * max(x.dtype.itemsize, y.dtype.itemsize)
        fit = min(half_bytes(context.program, Buffer.ACT), half_bytes(context.program, Buffer.OUT)) // row_bytes
        if fit < 1:
            raise InputError(f"layer {op.name!r} softmax row", f"{row_bytes} bytes",
                             "fits half the activation and output buffers")
        rows_per_tile = min(fit, rows, field_max(context.config, Opcode.SOFTMAX, "rows"),
                            field_max(context.config, Opcode.LOAD, "run") // length)
        return SoftmaxPlan(op, rows, length, rows_per_tile)

    def emit(self, plan: SoftmaxPlan, context: Context) -> None:
        op = plan.op
        x, y = context.tensors[op.x], context.tensors[op.y]
        source = context.address(op.x)
        target = context.plan.tensor(op.y, y.shape, y.dtype)
        table = context.plan.constant(f"{op.name}/exp_table", op.table.astype(SOFTMAX_TABLE_DTYPE))
        starts = range(0, plan.rows, plan.rows_per_tile)

        def build(t: int, act: int, out: int) -> Tile:
            first = starts[t]
            rows = min(plan.rows_per_tile, plan.rows - first)
            count = rows * plan.length
            load = dict(buffer=Buffer.ACT, sram_addr=act, dram_addr=source + first * plan.length * x.dtype.itemsize,
                        elem_type=dtype_code(x.dtype), run=count)
            softmax = dict(src_buf=Buffer.ACT, src_addr=act, dst_addr=out, rows=rows, length=plan.length,
                           in_type=dtype_code(x.dtype), out_type=dtype_code(y.dtype),
                           table_addr=context.pipeline.table_address(op.table.nbytes),
                           multiplier=op.multiplier, shift=op.shift, out_zero_point=y.zero_point, qmin=op.qmin,
                           qmax=op.qmax)
            store = dict(sram_addr=out, dram_addr=target + first * plan.length * y.dtype.itemsize,
                         elem_type=dtype_code(y.dtype), run=count)
            return Tile([load], [(Opcode.SOFTMAX, softmax)], [store])

        emit_pipeline(context.pipeline, len(starts), build, (table, op.table.nbytes))
