"""The POOL unit (POOL and ELTWISE) against the interpreter: every buffer byte, every command's cycles, faults."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.back import verilog

from aipu.rtl.pool import MAX_WINDOW, RECIPROCAL_SHIFT, WINDOW_SUM_BITS, PoolUnit, reciprocal_table
from aipu.sim import interpreter
from aipu.sim.cosim.amaranth_run import run_amaranth
from aipu.sim.cosim.result import RtlError, first_difference
from aipu.sim.cosim.stimulus import Stimulus, unit_program
from aipu.sim.cosim.stimulus.pool import random_eltwise, random_memory, random_pool
from aipu.sim.golden.eltwise import MAX_ALIGN
from aipu.sim.machine.arch import DEFAULT, DTYPE_BYTES, Buffer, DType, HardwareConfig
from aipu.sim.machine.isa import EltwiseOp, Opcode, PoolMode, Rounding, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing.pool import pool_lanes, pool_output_size
from tests.rtl.checks import assert_matches
from tests.rtl.configs import CONFIGS, EVERY_CONFIG, EVERY_CONFIG_DEFAULT_SLOW, SMALL


def pool_program(config: HardwareConfig, commands: list[Command]) -> Program:
    """The commands in the POOL queue, then FINISH."""
    return unit_program(config, commands, Unit.POOL)


def check_program(config: HardwareConfig, commands: list[Command], memory: Memory) -> None:
    """Every byte and every command's cycles as the interpreter and command_cycles say."""
    assert_matches(Stimulus(pool_program(config, commands), memory, (PoolUnit,)))


# DEFAULT's case is slow: mac8x16 has the same buffers and ports, which are all that POOL and ELTWISE depend on
@EVERY_CONFIG_DEFAULT_SLOW
def test_random_pool_and_eltwise_match_the_interpreter(config):
    rng = np.random.default_rng(20261123 + list(CONFIGS.values()).index(config))
    commands = [random_pool(rng, config) if rng.random() < 0.5 else random_eltwise(rng, config)
                for _ in range(48)]
    check_program(config, commands, random_memory(rng, config))


def _channel_group_pools(config: HardwareConfig) -> list[Command]:
    """POOLs over groups of ``pool_lanes`` channels: a partly filled last group, a single group, whole groups,
    int16 runs from odd addresses (straddling words), MAX with padding and dilation, AVG with and without
    count_include_pad, a source in OUT; each placed after the previous one's source and destination."""
    width = pool_lanes(config)
    cases = [
        dict(mode=PoolMode.MAX, dtype=DType.INT8, channels=2 * width + 1, k_h=3, k_w=3, stride_h=2, stride_w=2,
             pad_top=1, pad_left=1, pad_bottom=1, pad_right=1),
        dict(mode=PoolMode.MAX, dtype=DType.UINT8, channels=max(1, width - 1), k_h=2, k_w=2, dilation_h=2,
             dilation_w=3, pad_top=1, pad_left=2, pad_right=1),
        dict(mode=PoolMode.MAX, dtype=DType.INT16, channels=width + 3, k_h=3, k_w=2, dilation_h=2, pad_top=2,
             pad_bottom=1, pad_right=1, src_buf=Buffer.OUT),
        dict(mode=PoolMode.AVG, dtype=DType.INT16, channels=2 * width - 1, k_h=3, k_w=3, count_include_pad=1,
             pad_top=1, pad_left=2, pad_bottom=2, pad_right=1, zero_point=-1000, rounding=Rounding.HALF_TO_EVEN),
        dict(mode=PoolMode.AVG, dtype=DType.INT8, channels=width + 1, k_h=2, k_w=3, stride_w=2, pad_top=1,
             pad_left=1, pad_right=2, zero_point=5, rounding=Rounding.HALF_AWAY_FROM_ZERO),
        dict(mode=PoolMode.AVG, dtype=DType.UINT8, channels=3 * width, k_h=2, k_w=2, zero_point=128,
             rounding=Rounding.FLOOR),
        dict(mode=PoolMode.AVG, dtype=DType.INT16, channels=1, k_h=3, k_w=3, stride_h=2, pad_top=1, pad_left=1,
             pad_bottom=1, pad_right=1, rounding=Rounding.HALF_UP),
    ]
    commands, free = [], {Buffer.ACT: 1, Buffer.OUT: 3}      # odd: groups start inside words
    for fields in cases:
        fields = {"src_buf": Buffer.ACT, "in_h": 5, "in_w": 4, **fields}
        size = DTYPE_BYTES[fields["dtype"]]
        out_h, out_w = pool_output_size(Command.make(Opcode.POOL, **fields))
        src_addr = free[fields["src_buf"]]
        free[fields["src_buf"]] += fields["in_h"] * fields["in_w"] * fields["channels"] * size + 1
        dst_addr = free[Buffer.OUT]
        free[Buffer.OUT] += out_h * out_w * fields["channels"] * size + 2
        commands.append(Command.make(Opcode.POOL, src_addr=src_addr, dst_addr=dst_addr, **fields))
    assert all(end <= config.buffer(buffer).bytes for buffer, end in free.items())
    return commands


@EVERY_CONFIG
def test_channel_groups_match_the_interpreter(config):
    check_program(config, _channel_group_pools(config), random_memory(np.random.default_rng(12), config))


def _widest_windows(stride: int, rounding: Rounding, value: int | None, rng) -> tuple[Command, Memory]:
    """AVG of a 15x15 int16 tile with 15x15 windows sliding off every edge (padding 14): windows hold every
    count r x c that the stride reaches; ``value`` fills the tile (with the opposite extreme as zero point, the
    window sums reach both ends of their range), None fills it at random."""
    command = Command.make(Opcode.POOL, src_buf=Buffer.ACT, src_addr=0, dst_addr=0, in_h=15, in_w=15, channels=1,
                           dtype=DType.INT16, mode=PoolMode.AVG, k_h=15, k_w=15, stride_h=stride, stride_w=stride,
                           pad_top=14, pad_left=14, pad_bottom=14, pad_right=14, rounding=rounding,
                           zero_point=0 if value is None else -1 - value)
    memory = Memory.create(SMALL, 64)
    values = rng.integers(-32768, 32768, 225) if value is None else np.full(225, value)
    memory.buffers[Buffer.ACT][:450] = values.astype("<i2").view(np.uint8)
    return command, memory


def test_widest_windows_divide_exactly():
    """Counts 1, 8, 15 per side (1 .. 225 taps), sums at the top of their range."""
    command, memory = _widest_windows(7, Rounding.HALF_TO_EVEN, 32767, np.random.default_rng(7))
    check_program(SMALL, [command], memory)


@pytest.mark.slow
def test_every_window_count_divides_exactly():
    """Stride 2 reaches every count r x c (r, c in 1 .. 15) in one command."""
    rng = np.random.default_rng(8)
    for rounding, value in ((Rounding.HALF_AWAY_FROM_ZERO, -32768), (Rounding.HALF_UP, None)):
        command, memory = _widest_windows(2, rounding, value, rng)
        check_program(SMALL, [command], memory)


def test_reciprocals_divide_exactly_where_an_error_would_show_first():
    """The product overshoots n/d most for the largest n, just below a multiple of d: check the top of the
    range for every divisor (the proof is in reciprocal_table's docstring)."""
    table = reciprocal_table()
    top = 1 << WINDOW_SUM_BITS
    for divisor in range(1, MAX_WINDOW + 1):
        numerators = np.concatenate([np.arange(top - 4 * divisor, top), np.arange(0, 4 * divisor)])
        quotients = [n * table[divisor] >> RECIPROCAL_SHIFT for n in numerators.tolist()]
        assert quotients == (numerators // divisor).tolist()


def test_in_place_and_straddling_int16_output():
    """int16 results at odd addresses cross word boundaries (and here OUT's banks: b lies in the other one, so
    that no bank holds both operands and the result); dst == a in OUT is read before it is written."""
    config = SMALL
    rng = np.random.default_rng(3)
    commands = [Command.make(Opcode.ELTWISE, op=EltwiseOp.ADD, a_buf=Buffer.OUT, a_addr=100, b_buf=Buffer.OUT,
                             b_addr=600, dst_addr=501, count=13, out_type=DType.INT16, a_multiplier=1 << 14,
                             b_multiplier=3 << 12, a_shift=10, b_shift=8, qmin=-32768, qmax=32767),
                Command.make(Opcode.ELTWISE, op=EltwiseOp.SUB, a_buf=Buffer.OUT, a_addr=100, b_buf=Buffer.ACT,
                             b_addr=300, dst_addr=100, count=21, a_type=DType.UINT8, out_type=DType.UINT8,
                             a_multiplier=1 << 14, b_multiplier=3 << 12, a_shift=14, b_shift=12, qmin=0, qmax=255),
                Command.make(Opcode.POOL, src_buf=Buffer.OUT, src_addr=501, dst_addr=3, in_h=3, in_w=3,
                             channels=1, dtype=DType.INT16, mode=PoolMode.MAX, k_h=2, k_w=2)]
    check_program(config, commands, random_memory(rng, config))


def _fault_cases(config: HardwareConfig):
    """(command, field the interpreter's refusal names) for each way POOL and ELTWISE refuse to execute."""
    out_bytes = config.buffer(Buffer.OUT).bytes
    pool = dict(src_buf=Buffer.ACT, in_h=4, in_w=4, channels=2, dtype=DType.INT8, mode=PoolMode.AVG, k_h=2, k_w=2,
                stride_h=2, stride_w=2)
    eltwise = dict(op=EltwiseOp.ADD, count=8, a_buf=Buffer.ACT, b_buf=Buffer.OUT, qmin=-128, qmax=127)
    yield Command.make(Opcode.POOL, **{**pool, "src_buf": Buffer.OUT, "src_addr": out_bytes - 31}), "src_addr"
    yield Command.make(Opcode.POOL, **pool, dst_addr=out_bytes - 7), "dst_addr"
    yield Command.make(Opcode.POOL, **{**pool, "dtype": DType.INT16}, dst_addr=out_bytes - 15), "dst_addr"
    yield Command.make(Opcode.POOL, **{**pool, "mode": PoolMode.MAX}, count_include_pad=1), "count_include_pad"
    yield Command.make(Opcode.POOL, **{**pool, "mode": PoolMode.MAX}, zero_point=3), "zero_point"
    yield Command.make(Opcode.POOL, **pool, dilation_h=2), "dilation_h"
    yield Command.make(Opcode.POOL, **pool, dilation_w=3), "dilation_w"
    yield Command.make(Opcode.POOL, **pool, zero_point=128), "zero_point"
    yield Command.make(Opcode.POOL, **{**pool, "dtype": DType.UINT8}, zero_point=-1), "zero_point"
    for name in ("pad_top", "pad_left", "pad_bottom", "pad_right"):
        yield Command.make(Opcode.POOL, **pool, **{name: 2}), name
    yield Command.make(Opcode.POOL, **{**pool, "k_h": 5}), "k_h"
    yield Command.make(Opcode.POOL, **{**pool, "mode": PoolMode.MAX, "k_w": 3}, dilation_w=2), "k_w"
    yield Command.make(Opcode.ELTWISE, **eltwise, a_addr=config.buffer(Buffer.ACT).bytes - 7), "a_addr"
    yield Command.make(Opcode.ELTWISE, **eltwise, b_addr=out_bytes - 7), "b_addr"
    yield Command.make(Opcode.ELTWISE, **eltwise, dst_addr=out_bytes - 7), "dst_addr"
    yield Command.make(Opcode.ELTWISE, **eltwise, out_type=DType.INT16, dst_addr=out_bytes - 15), "dst_addr"
    for name in ("b_multiplier", "b_shift"):
        yield Command.make(Opcode.ELTWISE, **{**eltwise, "op": EltwiseOp.MUL}, **{name: 1}), name
    for name in ("b_buf", "b_addr", "b_type", "b_zero_point", "b_multiplier", "b_shift"):
        yield Command.make(Opcode.ELTWISE, **{**eltwise, "op": EltwiseOp.RESCALE, "b_buf": Buffer.ACT,
                                              name: Buffer.OUT if name == "b_buf" else 1}), name
    yield Command.make(Opcode.ELTWISE, **eltwise, a_zero_point=128), "a_zero_point"
    yield Command.make(Opcode.ELTWISE, **eltwise, a_type=DType.UINT8, a_zero_point=-1), "a_zero_point"
    yield Command.make(Opcode.ELTWISE, **eltwise, b_zero_point=-129), "b_zero_point"
    yield Command.make(Opcode.ELTWISE, **eltwise, a_shift=MAX_ALIGN + 1), "b_shift"
    yield Command.make(Opcode.ELTWISE, **{**eltwise, "op": EltwiseOp.MIN}, b_shift=MAX_ALIGN + 5), "a_shift"
    yield Command.make(Opcode.ELTWISE, **{**eltwise, "qmin": -129}), "qmin"
    yield Command.make(Opcode.ELTWISE, **{**eltwise, "qmax": 128}), "qmax"
    yield Command.make(Opcode.ELTWISE, **{**eltwise, "qmin": 5, "qmax": 4}), "qmin"
    yield Command.make(Opcode.ELTWISE, **{**eltwise, "out_type": DType.UINT8, "qmin": 0, "qmax": 255},
                       out_zero_point=-3), "out_zero_point"


@pytest.mark.parametrize("config", [SMALL], ids=["small"])
def test_faults_name_the_field_and_write_nothing(config):
    memory = random_memory(np.random.default_rng(5), config)
    for command, name in _fault_cases(config):
        program = pool_program(config, [command])
        with pytest.raises(interpreter.ExecutionError):
            interpreter.run(program, memory)
        rtl = run_amaranth(program, memory, [PoolUnit], max_cycles=100)
        assert rtl.errors == [RtlError(Unit.POOL, 0, name)], (command, name)
        assert first_difference(memory, rtl.memory) is None


def test_verilog_conversion():
    assert "module pool_unit" in verilog.convert(PoolUnit(DEFAULT), name="pool_unit")


@pytest.mark.slow
@EVERY_CONFIG
def test_many_random_commands(config):
    """Over the three configurations, 1002 POOL and 1002 ELTWISE commands (kernels up to 15 x 15)."""
    rng = np.random.default_rng(99 + list(CONFIGS.values()).index(config))
    for _ in range(6):
        commands = [random_pool(rng, config, largest_kernel=15 if rng.random() < 0.1 else 4) for _ in range(56)]
        commands += [random_eltwise(rng, config, largest_count=100) for _ in range(56)]
        rng.shuffle(commands)
        check_program(config, commands, random_memory(rng, config))
