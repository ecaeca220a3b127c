"""The CONV unit against the interpreter: every ACC byte and every command's cycle count, on all three configurations.

Programs chain many random CONVs (aipu.sim.cosim.stimulus.conv) over buffers preloaded with random bytes, one
simulation per program."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.back import verilog

from aipu.rtl.conv import ConvUnit
from aipu.sim.cosim.amaranth_run import run_amaranth
from aipu.sim.cosim.cocotb_run import verilog_backends
from aipu.sim.cosim.result import RtlError, first_difference
from aipu.sim.cosim.stimulus import Stimulus
from aipu.sim.cosim.stimulus.conv import random_conv, random_dwconv, random_memory, random_stimulus
from aipu.sim.interpreter import ExecutionError, run
from aipu.sim.machine.arch import ACC_DTYPE, DEFAULT, Buffer, DType
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing.conv import command_cycles, useful_macs
from tests.rtl.checks import assert_matches
from tests.rtl.configs import CONFIGS, EVERY_CONFIG, EVERY_CONFIG_DEFAULT_SLOW, SMALL

def check_program(program: Program, memory: Memory) -> int:
    """Run on the RTL and the interpreter: equal memories, the documented cycles. Returns the CONV cycles."""
    return sum(assert_matches(Stimulus(program, memory, (ConvUnit,))).result.command_cycles(Unit.CONV))


def mixed_stimulus(config) -> Stimulus:
    """The default suite's program of random CONVs with a quarter DWCONVs among them (tests/rtl/test_mutants.py
    runs its mutants on it too)."""
    rng = np.random.default_rng(config.mac.rows * 1000 + config.mac.cols)
    commands = 4 if config.mac.rows * config.mac.cols > 64 else 32
    return random_stimulus(config, rng, commands, max_command_cycles=300)


def depthwise_stimulus(config) -> Stimulus:
    """The default suite's program of DWCONVs alone: strides and dilations (phase planes), rows narrower and wider
    than a block, channels from 1 to rows, unaligned addresses."""
    rng = np.random.default_rng(config.mac.rows * 1000 + config.mac.cols + 1)
    commands = 4 if config.mac.rows * config.mac.cols > 64 else 12
    return random_stimulus(config, rng, commands, max_command_cycles=400, depthwise=1.0)


@EVERY_CONFIG
def test_random_convs_match_the_interpreter(config):
    assert_matches(mixed_stimulus(config))


@EVERY_CONFIG_DEFAULT_SLOW      # on DEFAULT the mixed program above has DWCONVs
def test_random_dwconvs_match_the_interpreter(config):
    assert_matches(depthwise_stimulus(config))


def _conv(**fields) -> Command:
    base = dict(in_addr=0, in_h=3, in_w=3, in_c=4, in_type=DType.INT8, in_zero_point=0, wgt_addr=0, w_zero_point=0,
                out_c=4, k_h=3, k_w=3, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1, groups=1, acc_addr=0,
                accumulate=0)
    return Command.make(Opcode.CONV, **{**base, **fields})


def _dwconv(**fields) -> Command:
    base = dict(in_addr=0, in_h=3, in_w=3, channels=4, in_type=DType.INT8, in_zero_point=0, wgt_addr=0,
                w_zero_point=0, k_h=3, k_w=3, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1, acc_addr=0,
                accumulate=0)
    return Command.make(Opcode.DWCONV, **{**base, **fields})


ACT_BYTES, WEIGHT_BYTES, ACC_ENTRIES = (SMALL.buffer_units(b) for b in (Buffer.ACT, Buffer.WEIGHT, Buffer.ACC))
FAULTS = {   # (opcode, field the RTL names) -> a command the interpreter refuses for that field
    ("CONV", "groups"): _conv(in_c=6, groups=4),
    ("CONV", "in_addr"): _conv(in_addr=ACT_BYTES - 35),
    ("CONV", "wgt_addr"): _conv(wgt_addr=WEIGHT_BYTES - 143),
    ("CONV", "k_h"): _conv(in_h=4, dilation_h=2),
    ("CONV", "k_w"): _conv(in_w=2),
    ("CONV", "in_zero_point"): _conv(in_type=DType.UINT8, in_zero_point=-1),
    ("CONV", "acc_addr"): _conv(acc_addr=ACC_ENTRIES - 3, accumulate=1),
    ("DWCONV", "channels"): _dwconv(channels=SMALL.mac.rows + 1),
    ("DWCONV", "in_addr"): _dwconv(in_h=4, stride_h=2, in_addr=WEIGHT_BYTES - 47),   # 2 planes of 2x3 pixels
    ("DWCONV", "wgt_addr"): _dwconv(wgt_addr=ACT_BYTES - 35),
    ("DWCONV", "k_h"): _dwconv(in_h=4, dilation_h=2),
    ("DWCONV", "k_w"): _dwconv(in_w=2),
    ("DWCONV", "in_zero_point"): _dwconv(in_type=DType.UINT8, in_zero_point=-1),
    ("DWCONV", "acc_addr"): _dwconv(acc_addr=ACC_ENTRIES - 3, accumulate=1),
}


@pytest.mark.parametrize("opcode, field", list(FAULTS), ids=[f"{op}-{field}" for op, field in FAULTS])
def test_refused_command_stops_the_unit_naming_the_field_before_writing(opcode, field):
    rng = np.random.default_rng(7)
    memory = random_memory(SMALL, rng)
    legal = random_dwconv(SMALL, rng) if opcode == "DWCONV" else random_conv(SMALL, rng)
    program = Program(SMALL)
    program.append(legal)
    program.append(FAULTS[opcode, field])
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
    memory = random_memory(SMALL, np.random.default_rng(3))
    program = Program(SMALL)
    program.append(_conv(in_type=DType.INT8, in_zero_point=200))
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    with pytest.raises(ExecutionError):
        run(program, memory)
    result = run_amaranth(program, memory, [ConvUnit], max_cycles=100)
    assert result.errors == [RtlError(Unit.CONV, 0, "in_zero_point")]
    assert first_difference(memory, result.memory) is None


@pytest.mark.parametrize("fields, field", [
    (dict(w_type=DType.INT8, in_type=DType.INT4), "in_type"),
    (dict(w_type=DType.INT4, in_type=DType.INT8, in_c=6, groups=2, out_c=2), "in_c"),
    (dict(w_type=DType.INT4, in_type=DType.INT4, in_zero_point=9), "in_zero_point"),
    (dict(w_type=DType.INT4, in_type=DType.UINT8, w_zero_point=-9), "w_zero_point")])
def test_int4_faults_name_the_interpreters_field(fields, field):
    memory = random_memory(SMALL, np.random.default_rng(4))
    program = Program(SMALL)
    program.append(_conv(**fields))
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    with pytest.raises(ExecutionError, match=f"field {field}"):
        run(program, memory)
    result = run_amaranth(program, memory, [ConvUnit], max_cycles=100)
    assert result.errors == [RtlError(Unit.CONV, 0, field)]
    assert first_difference(memory, result.memory) is None


def int4_stimulus(config) -> Stimulus:
    """The default suite's program of random CONVs, half of them on INT4 weights (against INT8, UINT8 or INT4
    inputs), accumulating onto each other's sums."""
    rng = np.random.default_rng(config.mac.rows * 1000 + config.mac.cols + 48)
    commands = 4 if config.mac.rows * config.mac.cols > 64 else 24
    return random_stimulus(config, rng, commands, max_command_cycles=300, depthwise=0.0, int4=0.5)


@EVERY_CONFIG
def test_random_int4_convs_match_the_interpreter(config):
    stimulus = int4_stimulus(config)
    assert any(command.args.get("w_type") == DType.INT4 for command in stimulus.program.queues[Unit.CONV])
    assert_matches(stimulus)


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


def _large_tiles() -> tuple[Command, Command]:
    """A CONV and a DWCONV tile of the sizes docs/rtl-conv.md quotes: 3x3 kernels, 16 channels, 16x16 outputs,
    unaligned addresses."""
    conv = _conv(in_addr=3, in_h=18, in_w=18, in_c=16, wgt_addr=5, out_c=16, acc_addr=7, in_type=DType.UINT8,
                 in_zero_point=9, w_zero_point=-3)
    dwconv = _dwconv(in_addr=3, in_h=18, in_w=18, channels=16, wgt_addr=5, acc_addr=7, in_type=DType.UINT8,
                     in_zero_point=9, w_zero_point=-3)
    return conv, dwconv


def _utilisation(command: Command, cycles: int) -> float:
    return useful_macs(command) / (DEFAULT.mac.rows * DEFAULT.mac.cols * cycles)


def test_large_tiles_keep_the_default_array_busy():
    """The schedule on the default array: >= 95 % of the MACs busy on the CONV tile, the documented 175 cycles
    (82 % of the array) on the DWCONV tile. That the RTL keeps this schedule on every configuration is what the
    random comparisons check; on these tiles at DEFAULT's size, the slow test below."""
    conv, dwconv = _large_tiles()
    assert _utilisation(conv, command_cycles(DEFAULT, conv)) >= 0.95
    assert command_cycles(DEFAULT, dwconv) == 175 and _utilisation(dwconv, 175) >= 0.82


@pytest.mark.slow     # the DEFAULT array under Amaranth's simulator: about three minutes
def test_large_tiles_run_on_the_default_array_in_the_scheduled_cycles():
    rng = np.random.default_rng(11)
    for tile in _large_tiles():
        program = Program(DEFAULT)
        program.append(tile)
        program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
        cycles = check_program(program, random_memory(DEFAULT, rng))
        print(f"\n{tile.opcode.name} utilisation {_utilisation(tile, cycles):.4f} ({useful_macs(tile)} MACs in "
              f"{cycles} cycles)")
        assert cycles == command_cycles(DEFAULT, tile)


@EVERY_CONFIG_DEFAULT_SLOW     # DEFAULT's conversion: about a minute
def test_converts_to_verilog(config):
    assert "module conv" in verilog.convert(ConvUnit(config), name="conv")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CONFIGS))
def test_many_random_convs(name):
    """Over 1000 commands across the three configurations (350 per configuration), a quarter of them DWCONVs."""
    config = CONFIGS[name]
    rng = np.random.default_rng(list(CONFIGS).index(name))
    for _ in range(7):
        assert_matches(random_stimulus(config, rng, 50))


@pytest.mark.slow     # on the Verilog model: DEFAULT's 44 programs take over 2.5 h under Amaranth's simulator
@pytest.mark.parametrize("name", list(CONFIGS))
def test_many_random_int4_convs(name):
    """Over 1000 commands of each INT4 mode on each configuration: INT4 weights against 8-bit inputs and
    against INT4 inputs, 44 programs of 50 commands per configuration."""
    backend = verilog_backends()[0]
    config = CONFIGS[name]
    rng = np.random.default_rng(list(CONFIGS).index(name) + 48)
    modes = {DType.INT4: 0, DType.INT8: 0}
    for _ in range(44):
        stimulus = random_stimulus(config, rng, 50, depthwise=0.0, int4=1.0)
        for command in stimulus.program.queues[Unit.CONV][:-1]:
            modes[DType.INT4 if command.args["in_type"] == DType.INT4 else DType.INT8] += 1
        assert_matches(stimulus, backend)
    assert min(modes.values()) >= 1000, modes


@pytest.mark.slow     # the DEFAULT array under Amaranth's simulator: about a minute; DWCONV is the depthwise path
def test_depthwise_groups_fill_the_diagonal():
    """A depthwise 3x3 (64 channels, channel multiplier 1, 8x8 pixels) runs 16 groups per block on the
    default array's diagonal: >= 95 % of those 16 multipliers busy, 16 times fewer blocks than group by group."""
    rng = np.random.default_rng(12)
    conv = _conv(in_addr=1, in_h=10, in_w=10, in_c=64, wgt_addr=3, out_c=64, groups=64, acc_addr=5,
                 in_type=DType.INT8, in_zero_point=-2, w_zero_point=1)
    program = Program(DEFAULT)
    program.append(conv)
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    cycles = check_program(program, random_memory(DEFAULT, rng))
    diagonal = DEFAULT.mac.groups_per_block(1, 1)
    assert diagonal == min(DEFAULT.mac.rows, DEFAULT.mac.cols)
    utilisation = useful_macs(conv) / (diagonal * cycles)
    print(f"\ndepthwise: {useful_macs(conv)} MACs in {cycles} cycles, {utilisation:.4f} of the diagonal")
    assert utilisation >= 0.95


@pytest.mark.parametrize("config", [SMALL, CONFIGS["mac8x16"]], ids=["small", "mac8x16"])
def test_a_block_of_groups_reads_all_its_groups_input_bytes(config):
    """A block of several groups multiplies one input byte per group a pixel: the pixel's ACT run spans all
    of them, past the block's per-group rows, and here across a word boundary (an unaligned ``in_addr``)."""
    rng = np.random.default_rng(13)
    program = Program(config)
    program.append(_conv(in_addr=3, in_h=3, in_w=4, in_c=12, wgt_addr=1, out_c=12, groups=12, k_h=1, k_w=3,
                         acc_addr=2, in_zero_point=5, w_zero_point=-3))
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    check_program(program, random_memory(config, rng))
