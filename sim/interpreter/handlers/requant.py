"""The REQUANT unit's handler: accumulator entries to quantized outputs through per-channel parameter records,
refusing sums that did not fit the wrapping ACC register (docs/arithmetic.md D6); two accumulator planes a
channel with ``dual`` and INT4 outputs two a byte (§4.7, §4.8)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from aipu.sim import golden
from aipu.sim.interpreter.run_loop import requant_row
from aipu.sim.interpreter.state import RunState, view
from aipu.sim.machine.arch import ACC_BITS, ACC_DTYPE, DTYPE_NUMPY, PARAM_DTYPE, Buffer, DType
from aipu.sim.machine.isa import RequantMode, Rounding
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.machine.program import Command

if TYPE_CHECKING:
    from aipu.sim.interpreter.preparer import Preparer


def requant(preparer: Preparer, cmd: Command):
    """REQUANT: golden's requantize_records on the ACC tile and the records. Faults in the order the hardware
    checks: acc_addr, param_index, leaky (in FLOAT32), dual (in FLOAT32 or with leaky), channels (odd for INT4),
    out_addr, golden's output checks, then in the run the wrapped sums and the records."""
    planes = (2,) if cmd.dual else ()
    acc = preparer.tensor(Buffer.ACC, "acc_addr", cmd.acc_addr, (cmd.pixels, cmd.channels, *planes), ACC_DTYPE)
    params = preparer.tensor(Buffer.PARAM, "param_index", cmd.param_index, (cmd.channels,), PARAM_DTYPE)
    float32_scale, out_type = cmd.mode == RequantMode.FLOAT32, DType(cmd.out_type)
    int4 = out_type == DType.INT4
    if float32_scale and cmd.leaky:
        raise ExecutionError(f"{preparer.where}: field leaky = 1 is not supported in FLOAT32 mode")
    if cmd.dual and (float32_scale or cmd.leaky):
        raise ExecutionError(f"{preparer.where}: field dual = 1 is not supported "
                             f"{'in FLOAT32 mode' if float32_scale else 'with leaky = 1'}")
    if int4 and cmd.channels % 2:
        raise ExecutionError(f"{preparer.where}: field channels = {cmd.channels}: INT4 outputs need an even count")
    out = (preparer.tensor(Buffer.OUT, "out_addr", cmd.out_addr, (cmd.pixels, cmd.channels // 2), np.uint8,
                           written=True) if int4 else
           preparer.tensor(Buffer.OUT, "out_addr", cmd.out_addr, (cmd.pixels, cmd.channels), out_type, written=True))
    first, last = cmd.acc_addr, cmd.acc_addr + cmd.pixels * cmd.channels * len(planes or (1,))
    stage = golden.requant_stage(float32_scale=float32_scale, leaky=bool(cmd.leaky),
                                 rounding=Rounding(cmd.rounding).name.lower(), out_zero_point=cmd.out_zero_point,
                                 qmin=cmd.qmin, qmax=cmd.qmax, out_dtype=np.int8 if int4 else DTYPE_NUMPY[out_type],
                                 dual=bool(cmd.dual), int4=int4)
    where, label = preparer.where, preparer.label
    if not (cmd.dual or int4):      # the compiled run loop takes one accumulator a channel and whole-byte outputs
        preparer.row = requant_row(first, cmd.pixels, cmd.channels, cmd.param_index, out[1], out_type, stage)

    def execute(state: RunState) -> None:
        worst = state.unfit_sum(first, last)
        if worst is not None:
            raise ExecutionError(f"{where}: accumulator sum {worst} does not fit int{ACC_BITS}; the register "
                                 f"wrapped (docs/arithmetic.md D6: the compiler must prove the bound)")
        records = view(state, params)
        reserved = records["reserved"]
        if np.count_nonzero(reserved):
            raise ExecutionError(f"{where}: parameter record {cmd.param_index + int(np.argmax(reserved != 0))} "
                                 "has non-zero reserved bits")
        view(state, out)[...], state.stats.saturations[label] = golden.requantize_records(
            view(state, acc), records, stage)
    return execute
