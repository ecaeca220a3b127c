"""Random CONVs: regular, strided, dilated, grouped, depthwise and 1x1 (matmul), accumulate chains, channel
counts off the array's multiples, unaligned addresses, over buffers of random bytes; random DWCONVs, and
programs mixing both."""
from __future__ import annotations

import numpy as np

from aipu.rtl.conv import ConvUnit
from aipu.sim.cosim.stimulus.base import Stimulus, unit_program
from aipu.sim.machine.arch import Buffer, DType, HardwareConfig, dtype_bounds, elements_bytes, mac_lanes
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing.conv import MAC_OPCODES, command_cycles

KINDS = ("regular", "strided", "dilated", "grouped", "depthwise", "matmul")
MAX_COMMAND_CYCLES = 3000     # keeps one command, and so a simulation, short on the default array
DEPTHWISE_SHARE = 0.25        # of a random program's commands, DWCONVs


def _out_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    return (size - dilation * (kernel - 1) - 1) // stride + 1


def random_memory(config: HardwareConfig, rng: np.random.Generator) -> Memory:
    memory = Memory.create(config, 16)
    for buffer in (Buffer.ACT, Buffer.WEIGHT, Buffer.ACC):
        memory.buffers[buffer][:] = rng.integers(0, 256, memory.buffers[buffer].size, dtype=np.uint8)
    return memory


def _zero_point(rng: np.random.Generator, low: int, high: int) -> int:
    """Half the time a corner of the type (its minimum, zero or its maximum), else any value of it."""
    if rng.random() < 0.5:
        return int(rng.choice([low, 0, high]))
    return int(rng.integers(low, high + 1))


def _operands(rng: np.random.Generator, w_type: DType = DType.INT8) -> dict:
    """Operand types and zero points: int8 or uint8 inputs against int8 weights; against INT4 weights, inputs
    of any of the three types (INT4 the most often)."""
    if w_type == DType.INT8:
        in_type = DType(rng.choice([DType.INT8, DType.UINT8]))
        return dict(in_type=in_type, in_zero_point=_zero_point(rng, *dtype_bounds(in_type)),
                    w_zero_point=_zero_point(rng, *dtype_bounds(DType.INT8)))
    in_type = DType(rng.choice([DType.INT8, DType.UINT8, DType.INT4, DType.INT4]))
    return dict(in_type=in_type, in_zero_point=_zero_point(rng, *dtype_bounds(in_type)),
                w_zero_point=_zero_point(rng, *dtype_bounds(w_type)), w_type=w_type)


def _regions(fields: dict) -> dict[str, tuple[Buffer, int]]:
    """The buffer and size (in the buffer's units) of each region a CONV's or DWCONV's address field names."""
    out_h = _out_size(fields["in_h"], fields["k_h"], fields["stride_h"], fields["dilation_h"])
    out_w = _out_size(fields["in_w"], fields["k_w"], fields["stride_w"], fields["dilation_w"])
    taps = fields["k_h"] * fields["k_w"]
    if "channels" in fields:      # DWCONV: the input by phase in WEIGHT, the tap-major kernel in ACT
        channels, row_phases, column_phases = fields["channels"], fields["stride_h"], fields["stride_w"]
        planes = row_phases * column_phases * -(-fields["in_h"] // row_phases) * -(-fields["in_w"] // column_phases)
        return {"in_addr": (Buffer.WEIGHT, planes * channels),
                "wgt_addr": (Buffer.ACT, taps * channels), "acc_addr": (Buffer.ACC, out_h * out_w * channels)}
    in_type, w_type = fields["in_type"], fields.get("w_type", DType.INT8)
    return {"in_addr": (Buffer.ACT, elements_bytes(fields["in_h"] * fields["in_w"] * fields["in_c"], in_type)),
            "wgt_addr": (Buffer.WEIGHT, elements_bytes(fields["out_c"] * taps * fields["in_c"] // fields["groups"],
                                                      w_type)),
            "acc_addr": (Buffer.ACC, out_h * out_w * fields["out_c"])}


def _place(config: HardwareConfig, rng: np.random.Generator, fields: dict, **keep) -> dict | None:
    """Random addresses for the tile's three regions, or None if one does not fit its buffer."""
    placed = dict(fields)
    for name, (buffer, size) in _regions(fields).items():
        room = config.buffer_units(buffer) - size
        if room < 0:
            return None
        placed[name] = keep.get(name, int(rng.integers(0, room + 1)))
    return placed


# Strides or dilations (h, w) of 1 to 3, not 1 on both; the first three reach every value on each axis, with the
# two axes different
AXES = [(2, 3), (3, 1), (1, 2), (3, 2), (1, 3), (2, 1), (3, 3), (2, 2)]


def random_conv(config: HardwareConfig, rng: np.random.Generator, previous: Command | None = None,
                kind: str | None = None, axes: tuple[int, int] | None = None, w_type: DType = DType.INT8) -> Command:
    """A legal CONV of ``kind`` (one of KINDS; default: a random one) whose strides or dilations, if it is
    strided or dilated, are ``axes`` (default: a random pair of AXES); with ``previous``, sometimes one
    accumulating onto its result instead. With INT4 weights (``w_type``) the input-channel counts are doubled,
    as the array takes twice as many a pass, and even (D23); a depthwise kind has two channels a group."""
    lanes = mac_lanes(w_type)
    rows, cols = lanes * config.mac.rows, config.mac.cols
    if previous is not None and rng.random() < 0.3:   # another input-channel slice onto the same outputs
        fields = dict(previous.args)
        group_in = lanes * int(rng.integers(1, config.mac.rows + 3))
        fields.update(in_c=group_in * fields["groups"], accumulate=1, **_operands(rng, w_type))
        placed = _place(config, rng, fields, acc_addr=fields["acc_addr"])
        if placed is not None:
            return Command.make(Opcode.CONV, **placed)
    drawn = kind
    while True:
        kind = drawn or KINDS[rng.integers(len(KINDS))]
        group_in = rows if rng.random() < 0.25 else int(rng.integers(1, 2 * rows + 3))    # a corner: one pass
        groups, group_out = 1, int(rng.integers(1, 2 * cols + 3))
        if kind == "grouped":
            groups, group_in, group_out = int(rng.integers(2, 5)), int(rng.integers(1, rows + 2)), \
                int(rng.integers(1, cols + 2))
        elif kind == "depthwise":
            groups, group_in, group_out = int(rng.integers(1, 2 * rows + 1)), lanes, int(rng.integers(1, 3))
        group_in += group_in % lanes
        # a dilated kernel spans at least two taps on both axes, so neither dilation goes unused
        smallest_kernel = 2 if kind == "dilated" else 1
        kernel = (1, 1) if kind == "matmul" else tuple(int(k) for k in rng.integers(smallest_kernel, 4, 2))
        pair = axes or AXES[rng.integers(len(AXES))]
        stride = pair if kind == "strided" else (1, 1)
        dilation = pair if kind == "dilated" else (1, 1)
        out = rng.integers(1, 6, 2)
        in_h, in_w = (int(o - 1) * s + d * (k - 1) + 1 + int(rng.integers(0, s))
                      for o, s, d, k in zip(out, stride, dilation, kernel))
        fields = dict(in_h=in_h, in_w=in_w, in_c=groups * group_in, out_c=groups * group_out, groups=groups,
                      k_h=kernel[0], k_w=kernel[1], stride_h=stride[0], stride_w=stride[1],
                      dilation_h=dilation[0], dilation_w=dilation[1], accumulate=int(rng.integers(0, 2)),
                      **_operands(rng, w_type))
        placed = _place(config, rng, fields)
        if placed is not None:
            return Command.make(Opcode.CONV, **placed)


def random_dwconv(config: HardwareConfig, rng: np.random.Generator) -> Command:
    """A legal DWCONV: 1 .. mac.rows channels, kernels up to 5x5, strides up to 3 (as many row and column
    phases), dilations up to 2, rows narrower and wider than the array's ``cols`` pixels, unaligned addresses."""
    while True:
        kernel, stride, dilation = rng.integers(1, 6, 2), rng.integers(1, 4, 2), rng.integers(1, 3, 2)
        out = (int(rng.integers(1, 6)), int(rng.integers(1, 2 * config.mac.cols + 3)))
        in_h, in_w = (int(o - 1) * int(s) + int(d) * (int(k) - 1) + 1 + int(rng.integers(0, s))
                      for o, s, d, k in zip(out, stride, dilation, kernel))
        fields = dict(in_h=in_h, in_w=in_w, channels=int(rng.integers(1, config.mac.rows + 1)), k_h=int(kernel[0]),
                      k_w=int(kernel[1]), stride_h=int(stride[0]), stride_w=int(stride[1]),
                      dilation_h=int(dilation[0]), dilation_w=int(dilation[1]), accumulate=int(rng.integers(0, 2)),
                      **_operands(rng))
        placed = _place(config, rng, fields)
        if placed is not None:
            return Command.make(Opcode.DWCONV, **placed)


def random_program(config: HardwareConfig, rng: np.random.Generator, commands: int,
                   max_command_cycles: int = MAX_COMMAND_CYCLES, depthwise: float = DEPTHWISE_SHARE,
                   int4: float = 0.0) -> Program:
    """``commands`` random commands, each at most ``max_command_cycles`` long (keeps a simulation's time
    bounded): DWCONVs with probability ``depthwise``, CONVs otherwise (on INT4 weights with probability
    ``int4``), their kinds in turn from a random one on and, kind after kind, the strided and dilated ones
    through every pair of AXES (so that a short program has every kind and every stride and dilation on each
    axis)."""
    program = Program(config)
    previous, turn = None, int(rng.integers(len(KINDS)))
    while len(program) < commands:
        if rng.random() < depthwise:
            command = random_dwconv(config, rng)
        else:
            w_type = DType.INT4 if int4 and rng.random() < int4 else DType.INT8
            if previous is not None and previous.args.get("w_type", DType.INT8) != w_type:
                previous = None       # an accumulating slice keeps its chain's weight type
            command = random_conv(config, rng, previous, KINDS[turn % len(KINDS)],
                                  AXES[turn // len(KINDS) % len(AXES)], w_type)
        if command_cycles(config, command) <= max_command_cycles:
            program.append(command)
            turn += command.opcode == Opcode.CONV
            previous = command if command.opcode == Opcode.CONV else None
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    return program


def random_stimulus(config: HardwareConfig, rng: np.random.Generator, commands: int,
                    max_command_cycles: int = MAX_COMMAND_CYCLES, depthwise: float = DEPTHWISE_SHARE,
                    int4: float = 0.0) -> Stimulus:
    return Stimulus(random_program(config, rng, commands, max_command_cycles, depthwise, int4),
                    random_memory(config, rng), (ConvUnit,))


def tiles_alone(program: Program, rng: np.random.Generator) -> Stimulus:
    """The CONV and DWCONV commands of a lowered program by themselves (their tokens dropped: no other unit runs) over
    random ACT, WEIGHT and ACC: the MAC array on a real layer's tiles, at the array's own speed."""
    convs = [Command(command.opcode, command.args) for command in program.queues[Unit.CONV]
             if command.opcode in MAC_OPCODES]
    return Stimulus(unit_program(program.config, convs, Unit.CONV), random_memory(program.config, rng),
                    (ConvUnit,))
