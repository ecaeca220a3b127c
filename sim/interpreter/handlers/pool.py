"""The POOL unit's handlers: POOL (max or average pooling) and ELTWISE (add, sub, mul of two tensors, or one
tensor's rescale)."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from aipu.sim import golden
from aipu.sim.interpreter.state import RunState, view
from aipu.sim.machine.arch import DTYPE_NUMPY, Buffer, DType
from aipu.sim.machine.isa import EltwiseOp, PoolMode, Rounding
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.machine.program import Command

if TYPE_CHECKING:
    from aipu.sim.interpreter.preparer import Preparer


def pool(preparer: Preparer, cmd: Command):
    dtype = DTYPE_NUMPY[DType(cmd.dtype)]
    x = preparer.tensor(Buffer(cmd.src_buf), "src_addr", cmd.src_addr, (cmd.in_h, cmd.in_w, cmd.channels), dtype)
    geometry = dict(kernel=(cmd.k_h, cmd.k_w), stride=(cmd.stride_h, cmd.stride_w),
                    padding=(cmd.pad_top, cmd.pad_left, cmd.pad_bottom, cmd.pad_right))
    if cmd.mode == PoolMode.MAX:
        if cmd.count_include_pad or cmd.zero_point:
            raise ExecutionError(f"{preparer.where}: MAX takes no count_include_pad/zero_point (they must be 0)")
        pooling = functools.partial(golden.max_pool2d, dilation=(cmd.dilation_h, cmd.dilation_w), **geometry)
    else:
        if (cmd.dilation_h, cmd.dilation_w) != (1, 1):
            raise ExecutionError(f"{preparer.where}: AVG pooling has no dilation (dilation_h/w must be 1)")
        pooling = functools.partial(golden.avg_pool2d, count_include_pad=bool(cmd.count_include_pad),
                                    x_zero_point=cmd.zero_point, rounding=Rounding(cmd.rounding).name.lower(),
                                    **geometry)
    # The geometry's checks and the output shape, from the golden model on zeros of the input's shape.
    shape = pooling(np.zeros((1, cmd.channels, cmd.in_h, cmd.in_w), dtype)).shape[1:]
    out = preparer.tensor(Buffer.OUT, "dst_addr", cmd.dst_addr, (shape[1], shape[2], shape[0]), dtype, written=True)

    def execute(state: RunState) -> None:
        view(state, out)[...] = pooling(view(state, x).transpose(2, 0, 1)[None])[0].transpose(1, 2, 0)
    return execute


def _two_ports_a_bank(preparer: Preparer, *views) -> None:
    """A bank's SRAMs have two ports: the two operands and the result may not all lie in one OUT bank."""
    shared = set.intersection(*(set(preparer.config.banks(Buffer.OUT, start, stop)) if space == Buffer.OUT else set()
                                for space, start, stop, *_ in views))
    if shared:
        raise ExecutionError(f"{preparer.where}: a_addr = {views[0][1]:#x}, b_addr = {views[1][1]:#x} and dst_addr = "
                             f"{views[2][1]:#x} all lie in OUT bank {min(shared)}: a bank serves two accesses a cycle")


_UNUSED_FIELDS = {EltwiseOp.MUL: ("b_multiplier", "b_shift"),
                  EltwiseOp.RESCALE: ("b_buf", "b_addr", "b_type", "b_zero_point", "b_multiplier", "b_shift")}


def eltwise(preparer: Preparer, cmd: Command):
    op = EltwiseOp(cmd.op)
    a = preparer.tensor(Buffer(cmd.a_buf), "a_addr", cmd.a_addr, (cmd.count,), DType(cmd.a_type))
    common = dict(out_zero_point=cmd.out_zero_point, qmin=cmd.qmin, qmax=cmd.qmax,
                  out_dtype=DTYPE_NUMPY[DType(cmd.out_type)], rounding=Rounding(cmd.rounding).name.lower())
    for name in _UNUSED_FIELDS.get(op, ()):
        if cmd.args[name]:
            raise ExecutionError(f"{preparer.where}: field {name} = {cmd.args[name]} must be 0 for {op.name}")
    label = preparer.label
    if op == EltwiseOp.RESCALE:
        out = preparer.tensor(Buffer.OUT, "dst_addr", cmd.dst_addr, (cmd.count,), common["out_dtype"], written=True)

        def execute(state: RunState) -> None:
            view(state, out)[...] = golden.concat(
                [view(state, a).copy()], axis=0, zero_points=[cmd.a_zero_point], multipliers=[cmd.a_multiplier],
                shifts=[cmd.a_shift], **common)
        return execute
    b = preparer.tensor(Buffer(cmd.b_buf), "b_addr", cmd.b_addr, (cmd.count,), DType(cmd.b_type))
    out = preparer.tensor(Buffer.OUT, "dst_addr", cmd.dst_addr, (cmd.count,), common["out_dtype"], written=True)
    _two_ports_a_bank(preparer, a, b, out)
    scale = (dict(multiplier=cmd.a_multiplier, shift=cmd.a_shift) if op == EltwiseOp.MUL else
             dict(multiplier=(cmd.a_multiplier, cmd.b_multiplier), shift=(cmd.a_shift, cmd.b_shift)))

    def execute(state: RunState) -> None:
        view(state, out)[...], state.stats.saturations[label] = golden.eltwise(
            view(state, a).copy(), view(state, b).copy(), op.name.lower(), a_zero_point=cmd.a_zero_point,
            b_zero_point=cmd.b_zero_point, return_saturated=True, **scale, **common)
    return execute
