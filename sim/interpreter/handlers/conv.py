"""The CONV unit's handlers: a convolution tile of the activation and weight buffers into the accumulator (CONV),
and a depthwise tile read the other way round, its input from WEIGHT and its kernel from ACT (DWCONV)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from aipu.sim import golden
from aipu.sim.interpreter.run_loop import conv_row
from aipu.sim.interpreter.state import RunState, view
from aipu.sim.interpreter.tiles import takes_conv
from aipu.sim.machine.arch import ACC_DTYPE, DTYPE_NUMPY, Buffer, DType, dtype_bounds, unpack_int4
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.machine.program import Command

if TYPE_CHECKING:
    from aipu.sim.interpreter.preparer import Preparer


def conv(preparer: Preparer, cmd: Command):
    """CONV: golden's conv2d on the ACT and WEIGHT tiles. INT4 operands are read two a byte and unpacked
    (docs/arithmetic.md D23); faults in the order the hardware checks: groups, in_type, in_c, in_addr,
    wgt_addr, k_h, k_w, in_zero_point, w_zero_point, acc_addr."""
    if cmd.in_c % cmd.groups or cmd.out_c % cmd.groups:
        raise ExecutionError(f"{preparer.where}: field groups = {cmd.groups} must divide in_c = {cmd.in_c} "
                             f"and out_c = {cmd.out_c}")
    group_c = cmd.in_c // cmd.groups
    in_type, w_type = DType(cmd.in_type), DType(cmd.w_type)
    _check_int4(preparer, in_type, w_type, group_c)
    x = _operand(preparer, Buffer.ACT, "in_addr", cmd.in_addr, (cmd.in_h, cmd.in_w, cmd.in_c), in_type)
    w = _operand(preparer, Buffer.WEIGHT, "wgt_addr", cmd.wgt_addr, (cmd.out_c, cmd.k_h, cmd.k_w, group_c), w_type)
    values = {dtype: np.int8 if dtype == DType.INT4 else DTYPE_NUMPY[dtype] for dtype in (in_type, w_type)}

    def checked_geometry(in_zero_point: int, w_zero_point: int):
        return golden.conv_geometry((1, cmd.in_c, cmd.in_h, cmd.in_w), values[in_type],
                                    (cmd.out_c, group_c, cmd.k_h, cmd.k_w), values[w_type],
                                    x_zero_point=in_zero_point, w_zero_point=w_zero_point,
                                    stride=(cmd.stride_h, cmd.stride_w), dilation=(cmd.dilation_h, cmd.dilation_w),
                                    groups=cmd.groups)
    checked_geometry(0, 0)             # the kernel's fit, before the zero points
    for name, dtype in (("in_zero_point", in_type), ("w_zero_point", w_type)):
        low, high = dtype_bounds(dtype)
        if not low <= getattr(cmd, name) <= high:
            raise ExecutionError(f"{preparer.where}: field {name} = {getattr(cmd, name)}: outside {dtype.name}'s "
                                 f"{low}..{high}")
    geometry = checked_geometry(cmd.in_zero_point, cmd.w_zero_point)
    shape = (*geometry.out_hw, cmd.out_c)          # [out_h][out_w][out_c]
    entries = math.prod(shape)
    if cmd.accumulate:
        preparer.tensor(Buffer.ACC, "acc_addr", cmd.acc_addr, (entries,), ACC_DTYPE)
    preparer.tensor(Buffer.ACC, "acc_addr", cmd.acc_addr, (entries,), ACC_DTYPE, written=True)
    preparer.stats.macs += entries * group_c * cmd.k_h * cmd.k_w
    first, accumulate = cmd.acc_addr, cmd.accumulate
    packed = DType.INT4 in (in_type, w_type)
    if not packed and takes_conv(cmd.in_c, cmd.out_c, cmd.k_h, cmd.k_w, cmd.groups):
        preparer.row = conv_row(x[1], x[4], in_type, w[1], w[4], cmd.w_zero_point, cmd.in_zero_point,
                                geometry.stride, geometry.padding, geometry.dilation, geometry.out_hw,
                                first, bool(accumulate))
    x_values = unpack_int4 if in_type == DType.INT4 else np.asarray
    w_values = unpack_int4 if w_type == DType.INT4 else np.asarray

    def execute(state: RunState) -> None:
        sums = golden.conv_sums_channels_last(x_values(view(state, x))[None], w_values(view(state, w)), geometry,
                                              wide=True)[0]
        state.accumulate(first, sums, accumulate)
    return execute


def _check_int4(preparer: Preparer, in_type: DType, w_type: DType, group_c: int) -> None:
    """INT4 inputs run only against INT4 weights (both lanes of a MAC cell take the pair of input channels its
    weight byte holds), and a group's INT4 channels must fill whole bytes."""
    if in_type == DType.INT4 and w_type != DType.INT4:
        raise ExecutionError(f"{preparer.where}: field in_type = INT4 needs w_type = INT4, not {w_type.name}")
    if DType.INT4 in (in_type, w_type) and group_c % 2:
        raise ExecutionError(f"{preparer.where}: field in_c: {group_c} channels a group; INT4 operands need an even "
                             f"count")


def _operand(preparer: Preparer, buffer: Buffer, field_name: str, address: int, shape: tuple, dtype: DType):
    """A MAC operand's tile, read: INT4 as the bytes that hold its elements two a byte."""
    if dtype == DType.INT4:
        return preparer.tensor(buffer, field_name, address, (*shape[:-1], shape[-1] // 2), np.uint8)
    return preparer.tensor(buffer, field_name, address, shape, dtype)


def dwconv(preparer: Preparer, cmd: Command):
    """DWCONV: CONV's arithmetic with groups = channels (golden's conv2d); only where the operands lie differs:
    the padded input tile in WEIGHT by phase (row mod stride_h, column mod stride_w), the kernel tap-major in
    ACT (docs/isa.md, DWCONV). Faults in the order the hardware checks: channels, in_addr, wgt_addr, k_h, k_w,
    in_zero_point, acc_addr."""
    channels, rows = cmd.channels, preparer.config.mac.rows
    if channels > rows:
        raise ExecutionError(f"{preparer.where}: field channels = {channels} must be at most mac.rows = {rows}")
    in_dtype = DTYPE_NUMPY[DType(cmd.in_type)]
    row_phases, column_phases = cmd.stride_h, cmd.stride_w
    x = preparer.tensor(Buffer.WEIGHT, "in_addr", cmd.in_addr, (row_phases, column_phases, -(-cmd.in_h // row_phases),
                                                                  -(-cmd.in_w // column_phases), channels), in_dtype)
    w = preparer.tensor(Buffer.ACT, "wgt_addr", cmd.wgt_addr, (cmd.k_h, cmd.k_w, channels), np.int8)
    for name, size, kernel, dilation in (("k_h", cmd.in_h, cmd.k_h, cmd.dilation_h),
                                         ("k_w", cmd.in_w, cmd.k_w, cmd.dilation_w)):
        if dilation * (kernel - 1) + 1 > size:
            raise ExecutionError(f"{preparer.where}: field {name} = {kernel}: the kernel with dilation {dilation} "
                                 f"spans more than the tile's {size}")
    low, high = (int(bound) for bound in (np.iinfo(in_dtype).min, np.iinfo(in_dtype).max))
    if not low <= cmd.in_zero_point <= high:
        raise ExecutionError(f"{preparer.where}: field in_zero_point = {cmd.in_zero_point}: outside "
                             f"{DType(cmd.in_type).name}'s {low}..{high}")
    geometry = golden.conv_geometry((1, channels, cmd.in_h, cmd.in_w), in_dtype, (channels, 1, cmd.k_h, cmd.k_w),
                                    np.int8, x_zero_point=cmd.in_zero_point, w_zero_point=cmd.w_zero_point,
                                    stride=(cmd.stride_h, cmd.stride_w), dilation=(cmd.dilation_h, cmd.dilation_w),
                                    groups=channels)
    entries = math.prod(geometry.out_hw) * channels          # [out_h][out_w][channels]
    if cmd.accumulate:
        preparer.tensor(Buffer.ACC, "acc_addr", cmd.acc_addr, (entries,), ACC_DTYPE)
    preparer.tensor(Buffer.ACC, "acc_addr", cmd.acc_addr, (entries,), ACC_DTYPE, written=True)
    preparer.stats.macs += entries * cmd.k_h * cmd.k_w
    first, accumulate, in_h, in_w = cmd.acc_addr, cmd.accumulate, cmd.in_h, cmd.in_w

    def execute(state: RunState) -> None:
        planes = view(state, x)
        tile = np.empty((1, in_h, in_w, channels), in_dtype)
        for row in range(row_phases):
            for column in range(column_phases):
                phase = tile[0, row::row_phases, column::column_phases]
                phase[...] = planes[row, column, :phase.shape[0], :phase.shape[1]]
        kernel = np.ascontiguousarray(view(state, w).transpose(2, 0, 1)[..., None])   # [channels][k_h][k_w][1]
        sums = golden.conv_sums_channels_last(tile, kernel, geometry, wide=True)[0]
        state.accumulate(first, sums, accumulate)
    return execute
