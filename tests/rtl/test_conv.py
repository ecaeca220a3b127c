"""The CONV unit against the interpreter: every ACC byte and every command's cycle count, on all three configurations.

Programs chain many random CONVs (regular, strided, dilated, grouped, depthwise, 1x1, accumulate chains, channel
counts off the array's multiples, unaligned addresses) over buffers preloaded with random bytes, one simulation
per program."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.back import verilog

from aipu.rtl.conv import ConvUnit, command_cycles, groups_per_block, useful_macs
from aipu.sim.cosim.amaranth_run import run_amaranth
from aipu.sim.cosim.result import RtlError, first_difference
from aipu.sim.interpreter import ExecutionError, run
from aipu.sim.machine.arch import ACC_DTYPE, DEFAULT, DTYPE_NUMPY, Buffer, DType
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from tests.rtl.configs import CONFIGS, EVERY_CONFIG, SMALL

KINDS = ("regular", "strided", "dilated", "grouped", "depthwise", "matmul")


def _out_size(size: int, kernel: int, stride: int, dilation: int) -> int:
    return (size - dilation * (kernel - 1) - 1) // stride + 1


def _random_memory(config, rng) -> Memory:
    memory = Memory.create(config, 16)
    for buffer in (Buffer.ACT, Buffer.WEIGHT, Buffer.ACC):
        memory.buffers[buffer][:] = rng.integers(0, 256, memory.buffers[buffer].size, dtype=np.uint8)
    return memory


def _operands(rng) -> dict:
    in_type = DType(rng.choice([DType.INT8, DType.UINT8]))
    info = np.iinfo(DTYPE_NUMPY[in_type])
    return dict(in_type=in_type, in_zero_point=int(rng.integers(info.min, info.max + 1)),
                w_zero_point=int(rng.integers(-128, 128)))


def _place(config, rng, fields: dict, **keep) -> dict | None:
    """Random addresses for the tile's three regions, or None if one does not fit its buffer."""
    out_h = _out_size(fields["in_h"], fields["k_h"], fields["stride_h"], fields["dilation_h"])
    out_w = _out_size(fields["in_w"], fields["k_w"], fields["stride_w"], fields["dilation_w"])
    sizes = {"in_addr": (Buffer.ACT, fields["in_h"] * fields["in_w"] * fields["in_c"]),
             "wgt_addr": (Buffer.WEIGHT, fields["out_c"] * fields["k_h"] * fields["k_w"]
                          * fields["in_c"] // fields["groups"]),
             "acc_addr": (Buffer.ACC, out_h * out_w * fields["out_c"])}
    placed = dict(fields)
    for name, (buffer, size) in sizes.items():
        room = config.buffer_units(buffer) - size
        if room < 0:
            return None
        placed[name] = keep.get(name, int(rng.integers(0, room + 1)))
    return placed


def random_conv(config, rng, previous: Command | None = None) -> Command:
    """A legal CONV of a random kind; with ``previous``, sometimes one accumulating onto its result."""
    rows, cols = config.mac.rows, config.mac.cols
    if previous is not None and rng.random() < 0.3:   # another input-channel slice onto the same outputs
        fields = dict(previous.args)
        group_in = int(rng.integers(1, rows + 3))
        fields.update(in_c=group_in * fields["groups"], accumulate=1, **_operands(rng))
        placed = _place(config, rng, fields, acc_addr=fields["acc_addr"])
        if placed is not None:
            return Command.make(Opcode.CONV, **placed)
    while True:
        kind = KINDS[rng.integers(len(KINDS))]
        groups, group_in, group_out = 1, int(rng.integers(1, 2 * rows + 3)), int(rng.integers(1, 2 * cols + 3))
        if kind == "grouped":
            groups, group_in, group_out = int(rng.integers(2, 5)), int(rng.integers(1, rows + 2)), \
                int(rng.integers(1, cols + 2))
        elif kind == "depthwise":
            groups, group_in, group_out = int(rng.integers(1, 2 * rows + 1)), 1, int(rng.integers(1, 3))
        kernel = (1, 1) if kind == "matmul" else tuple(int(k) for k in rng.integers(1, 4, 2))
        stride = tuple(int(s) for s in rng.integers(2, 4, 2)) if kind == "strided" else (1, 1)
        dilation = tuple(int(d) for d in rng.integers(2, 4, 2)) if kind == "dilated" else (1, 1)
        out = rng.integers(1, 6, 2)
        in_h, in_w = (int(o - 1) * s + d * (k - 1) + 1 + int(rng.integers(0, s))
                      for o, s, d, k in zip(out, stride, dilation, kernel))
        fields = dict(in_h=in_h, in_w=in_w, in_c=groups * group_in, out_c=groups * group_out, groups=groups,
                      k_h=kernel[0], k_w=kernel[1], stride_h=stride[0], stride_w=stride[1],
                      dilation_h=dilation[0], dilation_w=dilation[1], accumulate=int(rng.integers(0, 2)),
                      **_operands(rng))
        placed = _place(config, rng, fields)
        if placed is not None:
            return Command.make(Opcode.CONV, **placed)


def random_program(config, rng, commands: int, max_command_cycles: int) -> Program:
    """``commands`` random CONVs, each at most ``max_command_cycles`` long (keeps a simulation's time bounded)."""
    program = Program(config)
    previous = None
    while len(program) < commands:
        conv = random_conv(config, rng, previous)
        if command_cycles(config, conv) <= max_command_cycles:
            previous = program.append(conv)
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    return program


def check_program(program: Program, memory: Memory) -> int:
    """Run on the RTL and the interpreter; assert equal memories and the documented cycles. Returns the cycles."""
    config = program.config
    convs = program.queues[Unit.CONV][:-1]
    expected = [command_cycles(config, command) for command in convs]
    result = run_amaranth(program, memory, [ConvUnit], max_cycles=sum(expected) + 10 * len(convs) + 100)
    assert result.done and not result.errors, result.errors
    assert first_difference(run(program, memory).memory, result.memory) is None, \
        first_difference(run(program, memory).memory, result.memory)
    assert result.command_cycles(Unit.CONV)[:-1] == expected
    return sum(expected)


@EVERY_CONFIG
def test_random_convs_match_the_interpreter(config):
    rng = np.random.default_rng(config.mac.rows * 1000 + config.mac.cols)
    commands = 4 if config.mac.rows * config.mac.cols > 64 else 10
    check_program(random_program(config, rng, commands, 300), _random_memory(config, rng))


def _conv(**fields) -> Command:
    base = dict(in_addr=0, in_h=3, in_w=3, in_c=4, in_type=DType.INT8, in_zero_point=0, wgt_addr=0, w_zero_point=0,
                out_c=4, k_h=3, k_w=3, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1, groups=1, acc_addr=0,
                accumulate=0)
    return Command.make(Opcode.CONV, **{**base, **fields})


ACT_BYTES, WEIGHT_BYTES, ACC_ENTRIES = (SMALL.buffer_units(b) for b in (Buffer.ACT, Buffer.WEIGHT, Buffer.ACC))
FAULTS = {   # field the RTL names -> a command the interpreter refuses for that field
    "groups": _conv(in_c=6, groups=4),
    "in_addr": _conv(in_addr=ACT_BYTES - 35),
    "wgt_addr": _conv(wgt_addr=WEIGHT_BYTES - 143),
    "k_h": _conv(in_h=4, dilation_h=2),
    "k_w": _conv(in_w=2),
    "in_zero_point": _conv(in_type=DType.UINT8, in_zero_point=-1),
    "acc_addr": _conv(acc_addr=ACC_ENTRIES - 3, accumulate=1),
}


@pytest.mark.parametrize("field", list(FAULTS))
def test_refused_conv_stops_the_unit_naming_the_field_before_writing(field):
    rng = np.random.default_rng(7)
    memory = _random_memory(SMALL, rng)
    legal = random_conv(SMALL, rng)
    program = Program(SMALL)
    program.append(legal)
    program.append(FAULTS[field])
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    with pytest.raises(ExecutionError):
        run(program, memory)
    before = Program(SMALL)
    before.append(legal)
    before.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    result = run_amaranth(program, memory, [ConvUnit], max_cycles=command_cycles(SMALL, legal) + 200)
    assert result.errors == [RtlError(Unit.CONV, 1, field)]
    assert first_difference(run(before, memory).memory, result.memory) is None


def test_int8_zero_point_outside_int8_is_refused():
    memory = _random_memory(SMALL, np.random.default_rng(3))
    program = Program(SMALL)
    program.append(_conv(in_type=DType.INT8, in_zero_point=200))
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    with pytest.raises(ExecutionError):
        run(program, memory)
    result = run_amaranth(program, memory, [ConvUnit], max_cycles=100)
    assert result.errors == [RtlError(Unit.CONV, 0, "in_zero_point")]
    assert first_difference(memory, result.memory) is None


def test_accumulators_wrap_like_the_register():
    """Sums beyond int32 wrap in ACC exactly as the interpreter writes them (docs/arithmetic.md D6)."""
    memory = Memory.create(SMALL, 16)
    memory.buffers[Buffer.ACT][:64] = 255                        # uint8 255 - 0 = 255
    memory.buffers[Buffer.WEIGHT][:64] = np.uint8(0x81)          # int8 -127 - 127 = -254
    memory.buffers[Buffer.ACC][:16] = np.full(4, np.iinfo(ACC_DTYPE).min + 5, ACC_DTYPE).view(np.uint8)
    program = Program(SMALL)
    program.append(_conv(in_h=1, in_w=1, in_c=16, k_h=1, k_w=1, in_type=DType.UINT8, w_zero_point=127, accumulate=1))
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    check_program(program, memory)


def test_utilisation_of_a_large_tile_on_the_default_array():
    """3x3 kernel, 16 -> 16 channels, 16x16 output pixels, unaligned addresses: >= 95 % of the MACs busy."""
    rng = np.random.default_rng(11)
    conv = _conv(in_addr=3, in_h=18, in_w=18, in_c=16, wgt_addr=5, out_c=16, acc_addr=7, in_type=DType.UINT8,
                 in_zero_point=9, w_zero_point=-3)
    program = Program(DEFAULT)
    program.append(conv)
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    cycles = check_program(program, _random_memory(DEFAULT, rng))
    utilisation = useful_macs(conv) / (DEFAULT.mac.rows * DEFAULT.mac.cols * cycles)
    print(f"\nCONV utilisation {utilisation:.4f} ({useful_macs(conv)} MACs in {cycles} cycles)")
    assert utilisation >= 0.95


@EVERY_CONFIG
def test_converts_to_verilog(config):
    assert "module conv" in verilog.convert(ConvUnit(config), name="conv")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_many_random_convs(name):
    """Over 1000 CONV commands across the three configurations (350 per configuration)."""
    config = CONFIGS[name]
    rng = np.random.default_rng(list(CONFIGS).index(name))
    for _ in range(7):
        check_program(random_program(config, rng, 50, 3000), _random_memory(config, rng))


def test_depthwise_groups_fill_the_diagonal():
    """A depthwise 3x3 (64 channels, channel multiplier 1, 8x8 pixels) runs 16 groups per block on the
    default array's diagonal: >= 95 % of those 16 multipliers busy, 16 times fewer blocks than group by group."""
    rng = np.random.default_rng(12)
    conv = _conv(in_addr=1, in_h=10, in_w=10, in_c=64, wgt_addr=3, out_c=64, groups=64, acc_addr=5,
                 in_type=DType.INT8, in_zero_point=-2, w_zero_point=1)
    program = Program(DEFAULT)
    program.append(conv)
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    cycles = check_program(program, _random_memory(DEFAULT, rng))
    diagonal = groups_per_block(DEFAULT, 1, 1)
    assert diagonal == min(DEFAULT.mac.rows, DEFAULT.mac.cols)
    utilisation = useful_macs(conv) / (diagonal * cycles)
    print(f"\ndepthwise: {useful_macs(conv)} MACs in {cycles} cycles, {utilisation:.4f} of the diagonal")
    assert utilisation >= 0.95
