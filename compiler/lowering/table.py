"""A table operator on the LUT unit (DIRECT8 for an 8-bit input, INTERP16 for int16): the table loaded once into
LUT memory, then flat tiles of the tensor (element-wise, so any split will do) through LOAD, LUT and STORE."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from aipu.compiler.lowering.base import Context, dtype_code, field_max
from aipu.compiler.lowering.pipeline import Tile, emit_pipeline, half_bytes
from aipu.compiler.qir import QLut
from aipu.sim.machine.arch import LUT16_INPUT_BITS, LUT_ENTRY_DTYPE, Buffer, bit_range
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import LutMode, Opcode

@dataclass
class TablePlan:
    op: QLut
    per_tile: int


class TableLowering:
    def plan(self, op: QLut, context: Context) -> TablePlan:
        x, y = context.tensors[op.x], context.tensors[op.y]
        if (x.dtype.itemsize == 1) != (op.index_shift is None):
            raise InputError(f"layer {op.name!r} input", x.dtype.name, "8-bit for a direct table, int16 for an "
                             "interpolated one")
        if op.table.size * LUT_ENTRY_DTYPE.itemsize > context.program.config.buffer(Buffer.LUT).bytes:
            raise InputError(f"layer {op.name!r} table", op.table.size, "fits the LUT memory")
        per_tile = min(half_bytes(context.program, Buffer.ACT) // x.dtype.itemsize,
                       half_bytes(context.program, Buffer.OUT) // y.dtype.itemsize,
                       field_max(context.config, Opcode.LUT, "count"), field_max(context.config, Opcode.LOAD, "run"))
        return TablePlan(op, per_tile)

    def emit(self, plan: TablePlan, context: Context) -> None:
        op = plan.op
        x, y = context.tensors[op.x], context.tensors[op.y]
        total = math.prod(x.shape)
        source = context.address(op.x)
        target = context.plan.tensor(op.y, y.shape, y.dtype)
        table = context.plan.constant(f"{op.name}/table", op.table.astype(LUT_ENTRY_DTYPE))
        table_bytes = op.table.size * LUT_ENTRY_DTYPE.itemsize
        starts = range(0, total, plan.per_tile)

        if op.index_shift is None:
            mode = dict(mode=LutMode.DIRECT8)
        else:                                   # the whole int16 range (compiler.quantize's tables)
            info = np.iinfo(y.dtype)
            mode = dict(mode=LutMode.INTERP16, table_log2=(op.table.size - 1).bit_length() - 1,
                        index_shift=op.index_shift, input_min=bit_range(LUT16_INPUT_BITS, signed=True)[0],
                        qmin=int(info.min), qmax=int(info.max))

        def build(t: int, act: int, out: int) -> Tile:
            first = starts[t]
            count = min(plan.per_tile, total - first)
            load = dict(buffer=Buffer.ACT, sram_addr=act, dram_addr=source + first * x.dtype.itemsize,
                        elem_type=dtype_code(x.dtype), run=count)
            lut = dict(src_buf=Buffer.ACT, src_addr=act, dst_addr=out, count=count, in_type=dtype_code(x.dtype),
                       out_type=dtype_code(y.dtype),
                       table_addr=context.pipeline.table_address(table_bytes), **mode)
            store = dict(sram_addr=out, dram_addr=target + first * y.dtype.itemsize, elem_type=dtype_code(y.dtype),
                         run=count)
            return Tile([load], [(Opcode.LUT, lut)], [store])

        emit_pipeline(context.pipeline, len(starts), build, (table, table_bytes))
