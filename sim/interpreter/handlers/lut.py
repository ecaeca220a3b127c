"""The LUT unit's handlers: LUT (a direct 256-entry table, or an interpolated one with an index shift) and SOFTMAX
(rows through the exponent table)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from aipu.sim import golden
from aipu.sim.interpreter.state import RunState, view
from aipu.sim.machine.arch import (DTYPE_BYTES, DTYPE_NUMPY, LUT8_ENTRIES, LUT_ENTRY_DTYPE, SOFTMAX_TABLE_DTYPE, Buffer,
                                DType)
from aipu.sim.machine.isa import LutMode
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.machine.program import Command

if TYPE_CHECKING:
    from aipu.sim.interpreter.preparer import Preparer


def lut(preparer: Preparer, cmd: Command):
    in_type, out_type = DType(cmd.in_type), DType(cmd.out_type)
    x = preparer.tensor(Buffer(cmd.src_buf), "src_addr", cmd.src_addr, (cmd.count,), in_type)
    out_dtype = DTYPE_NUMPY[out_type]
    direct = cmd.mode == LutMode.DIRECT8
    if direct:
        if cmd.table_log2 or cmd.index_shift or cmd.input_min or cmd.qmin or cmd.qmax:
            raise ExecutionError(f"{preparer.where}: DIRECT8 takes no table_log2/index_shift/input_min/qmin/qmax "
                                 "(they must be 0)")
        table = preparer.tensor(Buffer.LUT, "table_addr", cmd.table_addr, (LUT8_ENTRIES,), LUT_ENTRY_DTYPE)
    else:
        table = preparer.tensor(Buffer.LUT, "table_addr", cmd.table_addr, ((1 << cmd.table_log2) + 1,),
                                LUT_ENTRY_DTYPE)
    # The LUT unit streams in one pass: a destination overlapping the source must not run ahead of it.
    out_bytes, in_bytes = cmd.count * out_dtype.itemsize, cmd.count * DTYPE_BYTES[in_type]
    overlaps = (cmd.src_buf == Buffer.OUT and cmd.src_addr < cmd.dst_addr + out_bytes
                and cmd.dst_addr < cmd.src_addr + in_bytes)
    if overlaps and (cmd.dst_addr > cmd.src_addr or out_bytes > in_bytes):
        raise ExecutionError(f"{preparer.where}: field dst_addr = {cmd.dst_addr:#x} overlaps the source at "
                             f"{cmd.src_addr:#x} ahead of it or with wider elements (docs/rtl-lut.md)")
    out = preparer.tensor(Buffer.OUT, "dst_addr", cmd.dst_addr, (cmd.count,), out_dtype, written=True)
    info = np.iinfo(out_dtype)
    where, label = preparer.where, preparer.label

    def execute(state: RunState) -> None:
        values = view(state, x).copy()
        entries = view(state, table)
        if direct:
            if entries.min() < info.min or entries.max() > info.max:
                raise ExecutionError(f"{where}: table entries {int(entries.min())}..{int(entries.max())} "
                                     f"do not fit out_type {out_type.name}")
            view(state, out)[...] = golden.lut8(values, entries.astype(out_dtype))
        else:
            view(state, out)[...], state.stats.lut_out_of_range[label] = golden.lut16(
                values, entries.copy(), index_shift=cmd.index_shift, input_min=cmd.input_min, out_dtype=out_dtype,
                qmin=cmd.qmin, qmax=cmd.qmax, return_clipped=True)
    return execute


def softmax(preparer: Preparer, cmd: Command):
    in_dtype, out_dtype = DTYPE_NUMPY[DType(cmd.in_type)], DTYPE_NUMPY[DType(cmd.out_type)]
    x = preparer.tensor(Buffer(cmd.src_buf), "src_addr", cmd.src_addr, (cmd.rows, cmd.length), in_dtype)
    table = preparer.tensor(Buffer.LUT, "table_addr", cmd.table_addr, (LUT8_ENTRIES,), SOFTMAX_TABLE_DTYPE)
    out = preparer.tensor(Buffer.OUT, "dst_addr", cmd.dst_addr, (cmd.rows, cmd.length), out_dtype, written=True)
    if cmd.src_buf == Buffer.OUT and x[1] < out[2] and out[1] < x[2]:    # a row is read whole before written
        raise ExecutionError(f"{preparer.where}: field dst_addr = {cmd.dst_addr:#x} overlaps the source at "
                             f"{cmd.src_addr:#x}")
    stage = dict(multiplier=cmd.multiplier, shift=cmd.shift, out_zero_point=cmd.out_zero_point, qmin=cmd.qmin,
                 qmax=cmd.qmax, out_dtype=out_dtype)
    golden.softmax(np.zeros((1, 1), in_dtype), np.ones(LUT8_ENTRIES, SOFTMAX_TABLE_DTYPE), **stage)  # the fields

    def execute(state: RunState) -> None:     # the table's entries are data: golden checks them as the command runs
        view(state, out)[...] = golden.softmax(view(state, x), view(state, table), **stage)
    return execute
