"""The POOL unit (POOL and ELTWISE) against the interpreter: every buffer byte, every command's cycles, faults."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.back import verilog

from aipu.rtl.pool import (MAX_WINDOW, RECIPROCAL_SHIFT, WINDOW_SUM_BITS, PoolUnit, command_cycles,
                           pool_output_size, reciprocal_table)
from aipu.sim import interpreter
from aipu.sim.cosim.amaranth_run import run_amaranth
from aipu.sim.cosim.result import RtlError, first_difference
from aipu.sim.golden.eltwise import MAX_ALIGN
from aipu.sim.machine.arch import DEFAULT, DTYPE_BYTES, MULTIPLIER_MAX, SHIFT_MAX, Buffer, DType, HardwareConfig
from aipu.sim.machine.isa import EltwiseOp, Opcode, PoolMode, Rounding, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from tests.rtl.configs import CONFIGS, EVERY_CONFIG, SMALL

SEQUENCER_CYCLES = 3     # fetch, check and token wait of every command (docs/rtl.md)
SOURCES = (Buffer.ACT, Buffer.OUT)


def _range(dtype: DType) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype.name.lower()))
    return int(info.min), int(info.max)


def _place(rng, config: HardwareConfig, buffer: Buffer, nbytes: int, avoid=()) -> int:
    """A byte address for ``nbytes`` in ``buffer`` not overlapping the (buffer, address, nbytes) in ``avoid``."""
    size = config.buffer(buffer).bytes
    for _ in range(1000):
        address = int(rng.integers(0, size - nbytes + 1))
        if all(other != buffer or address + nbytes <= low or low + length <= address
               for other, low, length in avoid):
            return address
    raise AssertionError("no room for the region")


def random_pool(rng, config: HardwareConfig, largest_kernel: int = 4) -> Command:
    """A legal POOL command whose destination does not overlap its source."""
    mode = PoolMode(int(rng.integers(2)))
    dtype = DType(int(rng.integers(len(DType))))
    k_h, k_w = (int(k) for k in rng.integers(1, largest_kernel + 1, 2))
    large = k_h * k_w > 16        # one channel and long strides keep the tap count (= cycles) modest
    dilation_h, dilation_w = (1, 1) if mode == PoolMode.AVG or large else (int(d) for d in rng.integers(1, 4, 2))
    span_h, span_w = dilation_h * (k_h - 1) + 1, dilation_w * (k_w - 1) + 1
    pads = [int(rng.integers(0, min(span, 16))) if rng.random() < 0.6 else 0
            for span in (span_h, span_w, span_h, span_w)]
    in_h = max(1, span_h - pads[0] - pads[2]) + int(rng.integers(0, 4))
    in_w = max(1, span_w - pads[1] - pads[3]) + int(rng.integers(0, 4))
    channels = 1 if large else int(rng.integers(1, 5))
    low, high = _range(dtype)
    strides = rng.integers(4, 8, 2) if large else rng.integers(1, 4, 2)
    fields = dict(dtype=dtype, mode=mode, k_h=k_h, k_w=k_w, in_h=in_h, in_w=in_w, channels=channels,
                  stride_h=int(strides[0]), stride_w=int(strides[1]),
                  dilation_h=dilation_h, dilation_w=dilation_w, pad_top=pads[0], pad_left=pads[1],
                  pad_bottom=pads[2], pad_right=pads[3])
    if mode == PoolMode.AVG:
        fields.update(count_include_pad=int(rng.integers(2)), rounding=Rounding(int(rng.integers(len(Rounding)))),
                      zero_point=int(rng.integers(low, high + 1)) if rng.random() < 0.7 else 0)
    out_h, out_w = pool_output_size(Command.make(Opcode.POOL, **fields))
    in_bytes = in_h * in_w * channels * DTYPE_BYTES[dtype]
    if 2 * (in_bytes + out_h * out_w * channels * DTYPE_BYTES[dtype]) > config.buffer(Buffer.OUT).bytes:
        return random_pool(rng, config, largest_kernel)
    src_buf = SOURCES[int(rng.integers(2))]
    src_addr = _place(rng, config, src_buf, in_bytes)
    dst_addr = _place(rng, config, Buffer.OUT, out_h * out_w * channels * DTYPE_BYTES[dtype],
                      [(src_buf, src_addr, in_bytes)])
    return Command.make(Opcode.POOL, src_buf=src_buf, src_addr=src_addr, dst_addr=dst_addr, **fields)


def random_eltwise(rng, config: HardwareConfig, largest_count: int = 40) -> Command:
    """A legal ELTWISE command whose destination overlaps no operand (or is exactly operand a, in place)."""
    op = EltwiseOp(int(rng.integers(len(EltwiseOp))))
    count = int(rng.integers(1, largest_count + 1))
    types = [DType(int(t)) for t in rng.integers(0, 2, 2)]
    out_type = DType(int(rng.integers(len(DType))))
    out_low, out_high = _range(out_type)
    qmin, qmax = sorted(int(q) for q in rng.integers(out_low, out_high + 1, 2))
    if rng.random() < 0.5:
        qmin, qmax = out_low, out_high
    shift_a = int(rng.integers(0, SHIFT_MAX + 1)) if rng.random() < 0.2 else int(rng.integers(6, 28))
    fields = dict(op=op, count=count, a_type=types[0], out_type=out_type, qmin=qmin, qmax=qmax,
                  rounding=Rounding(int(rng.integers(len(Rounding)))), a_shift=shift_a,
                  a_multiplier=int(rng.integers(0, MULTIPLIER_MAX + 1)),
                  out_zero_point=int(rng.integers(out_low, out_high + 1)) if rng.random() < 0.5 else 0,
                  a_zero_point=int(rng.integers(*_range(types[0]))) if rng.random() < 0.7 else 0,
                  a_buf=SOURCES[int(rng.integers(2))])
    regions = []
    if op != EltwiseOp.RESCALE:
        fields.update(b_type=types[1], b_buf=SOURCES[int(rng.integers(2))],
                      b_zero_point=int(rng.integers(*_range(types[1]))) if rng.random() < 0.7 else 0)
        if op != EltwiseOp.MUL:
            fields.update(b_multiplier=int(rng.integers(0, MULTIPLIER_MAX + 1)),
                          b_shift=int(np.clip(shift_a + rng.integers(-MAX_ALIGN, MAX_ALIGN + 1), 0, SHIFT_MAX)))
        fields["b_addr"] = _place(rng, config, fields["b_buf"], count)
        regions.append((fields["b_buf"], fields["b_addr"], count))
    fields["a_addr"] = _place(rng, config, fields["a_buf"], count)
    regions.append((fields["a_buf"], fields["a_addr"], count))
    out_bytes = count * DTYPE_BYTES[out_type]
    in_place = fields["a_buf"] == Buffer.OUT and out_type != DType.INT16 and rng.random() < 0.3
    fields["dst_addr"] = (fields["a_addr"] if in_place and all(
        r[0] != Buffer.OUT or r[1] + r[2] <= fields["a_addr"] or fields["a_addr"] + out_bytes <= r[1]
        for r in regions[:-1]) else _place(rng, config, Buffer.OUT, out_bytes, regions))
    return Command.make(Opcode.ELTWISE, **fields)


def random_memory(rng, config: HardwareConfig) -> Memory:
    memory = Memory.create(config, 64)
    for buffer in SOURCES:
        memory.buffers[buffer][:] = rng.integers(0, 256, memory.buffers[buffer].size, dtype=np.uint8)
    return memory


def pool_program(config: HardwareConfig, commands: list[Command]) -> Program:
    """The commands in the POOL queue, then FINISH."""
    program = Program(config)
    for command in commands:
        program.append(command)
    program.append(Command.make(Opcode.FINISH, unit=Unit.POOL))
    return program


def check_program(config: HardwareConfig, commands: list[Command], memory: Memory) -> None:
    """Every byte and every command's cycles as the interpreter and command_cycles say."""
    program = pool_program(config, commands)
    golden = interpreter.run(program, memory)
    budget = sum(command_cycles(config, c) + SEQUENCER_CYCLES for c in commands) + 50
    rtl = run_amaranth(program, memory, [PoolUnit], max_cycles=budget)
    assert rtl.done and not rtl.errors, rtl.errors
    assert first_difference(golden.memory, rtl.memory) is None, first_difference(golden.memory, rtl.memory)
    assert rtl.command_cycles(Unit.POOL) == [command_cycles(config, c) for c in commands] + [0]


@EVERY_CONFIG
def test_random_pool_and_eltwise_match_the_interpreter(config):
    rng = np.random.default_rng(20261123 + list(CONFIGS.values()).index(config))
    commands = [random_pool(rng, config) if rng.random() < 0.5 else random_eltwise(rng, config)
                for _ in range(48)]
    check_program(config, commands, random_memory(rng, config))


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
    """int16 results at odd addresses cross word boundaries; dst == a in OUT is read before it is written."""
    config = SMALL
    rng = np.random.default_rng(3)
    commands = [Command.make(Opcode.ELTWISE, op=EltwiseOp.ADD, a_buf=Buffer.OUT, a_addr=100, b_buf=Buffer.OUT,
                             b_addr=300, dst_addr=501, count=13, out_type=DType.INT16, a_multiplier=1 << 14,
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
