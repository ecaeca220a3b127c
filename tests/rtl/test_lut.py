"""The LUT unit against the interpreter: every OUT byte and the cycles of every command, on every configuration.

Programs hold many random LUT commands (aipu.sim.cosim.stimulus.lut; one simulation each). Sources in OUT chain
one command's results into the next and include in-place runs.
"""
from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import UnusedElaboratable

from aipu.rtl.lut import LutUnit
from aipu.sim.cosim.amaranth_run import run_amaranth
from aipu.sim.cosim.result import first_difference
from aipu.sim.cosim.stimulus import Stimulus, unit_program
from aipu.sim.cosim.stimulus.base import dtype_limits
from aipu.sim.cosim.stimulus.lut import (INTERP16_INPUT, ONE_BYTE_TYPES, Workload, random_memory,
                                        random_softmax_stimulus)
from aipu.sim.golden.softmax import EXP_MAX, build_softmax_table
from aipu.sim.interpreter import ExecutionError, run
from aipu.sim.machine.arch import (BYTE_TYPES, DEFAULT, LUT8_ENTRIES, LUT16_INPUT_BITS, LUT_ENTRY_DTYPE, MULTIPLIER_MAX,
                                   SOFTMAX_LENGTH_MAX, SOFTMAX_SHIFT_MAX, SOFTMAX_TABLE_DTYPE, Buffer, DType,
                                   hardware_config_from_dict)
from aipu.sim.machine.isa import LutMode, Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing.lut import command_cycles
from tests.rtl.checks import assert_matches
from tests.rtl.configs import CONFIGS, EVERY_CONFIG, SMALL

WIDE_LUT = hardware_config_from_dict({"buffers": {"lut": {"port_bytes": 16}}})

def _program(config, commands) -> Program:
    return unit_program(config, commands, Unit.LUT)


def _assert_matches(config, memory: Memory, commands) -> None:
    assert_matches(Stimulus(_program(config, commands), memory, (LutUnit,)))


@EVERY_CONFIG
def test_random_commands_match_the_interpreter(config):
    workload = Workload(config, np.random.default_rng(7), max_count=80)
    _assert_matches(config, workload.memory, [workload.command() for _ in range(14)])


@EVERY_CONFIG
def test_in_place_and_behind_the_source(config):
    """Destination on the source, or before it with equal or narrower elements: each byte is read first."""
    workload = Workload(config, np.random.default_rng(11), max_count=70)
    full_table = dict(mode=LutMode.INTERP16, table_addr=0, table_log2=1, index_shift=LUT16_INPUT_BITS,
                      input_min=dtype_limits(INTERP16_INPUT)[0])
    direct8 = dict(mode=LutMode.DIRECT8, table_addr=workload.direct8_addr, table_log2=0, index_shift=0,
                   input_min=0, qmin=0, qmax=0)
    commands = []
    for back in (0, 1, 3, 17):
        place = dict(src_buf=Buffer.OUT, src_addr=21 + back, dst_addr=21, count=61)
        for in_type in ONE_BYTE_TYPES:
            commands.append(workload.command(**place, **direct8, in_type=in_type, out_type=workload.direct8_type))
        for out_type in BYTE_TYPES:
            low, high = dtype_limits(out_type)
            commands.append(workload.command(**place, **full_table, in_type=INTERP16_INPUT, out_type=out_type,
                                             qmin=low, qmax=high))
    _assert_matches(config, workload.memory, commands)


def test_cycles_formula_counts_the_table_load_lanes_and_the_spill():
    """DEFAULT: the 4-byte LUT port loads 2 entries a cycle; the 16-byte OUT port gives 16 lanes, which the
    32-byte ACT port feeds with int8 and int16 inputs alike."""
    def lut(**fields):
        return Command.make(Opcode.LUT, src_buf=Buffer.ACT, mode=LutMode.DIRECT8, in_type=DType.INT8,
                            out_type=DType.INT8, **fields)
    assert command_cycles(DEFAULT, lut(count=16, dst_addr=0)) == 3 + 128 + 1
    assert command_cycles(DEFAULT, lut(count=16, dst_addr=1)) == 3 + 128 + 1 + 1
    assert command_cycles(DEFAULT, lut(count=17, dst_addr=0)) == 3 + 128 + 2
    interp = Command.make(Opcode.LUT, src_buf=Buffer.ACT, mode=LutMode.INTERP16, in_type=DType.INT16,
                          out_type=DType.INT8, count=64, table_log2=10, qmax=1)
    assert command_cycles(DEFAULT, interp) == 3 + 513 + 4


def _fault_cases():
    """(command fields over a legal DIRECT8 / INTERP16 command, the field the interpreter and RTL must name)."""
    lut_bytes = SMALL.buffer(Buffer.LUT).bytes
    out_bytes = SMALL.buffer(Buffer.OUT).bytes
    direct = dict(mode=LutMode.DIRECT8, in_type=DType.INT8, out_type=DType.INT16, table_addr=0)
    interp = dict(mode=LutMode.INTERP16, in_type=DType.INT16, out_type=DType.INT16, table_addr=0, table_log2=4,
                  index_shift=3, input_min=-100, qmin=-1000, qmax=1000)
    cases = [(dict(direct, src_addr=SMALL.buffer(Buffer.ACT).bytes - 7), "src_addr"),
             (dict(interp, src_buf=Buffer.OUT, src_addr=out_bytes - 15), "src_addr"),
             *[(dict(direct, **{name: 1}), name) for name in ("table_log2", "index_shift", "input_min", "qmin",
                                                               "qmax")],
             (dict(direct, qmin=-1, qmax=0), "qmin"),
             (dict(direct, table_addr=lut_bytes - LUT8_ENTRIES * 2 + 1), "table_addr"),
             (dict(interp, table_addr=lut_bytes - 33), "table_addr"),
             (dict(direct, out_type=DType.INT8), "out_type"),          # the random table does not fit int8
             (dict(direct, out_type=DType.UINT8, in_type=DType.INT16), "out_type"),   # the data check comes first
             (dict(direct, in_type=DType.INT16), "in_type"),
             (dict(interp, in_type=DType.UINT8), "in_type"),
             (dict(interp, in_type=DType.INT8, table_log2=0), "in_type"),
             (dict(interp, table_log2=0), "table_log2"),
             (dict(interp, out_type=DType.INT8, qmin=-129, qmax=0), "qmin"),
             (dict(interp, out_type=DType.UINT8, qmin=0, qmax=256), "qmax"),
             (dict(interp, qmin=5, qmax=4), "qmin"),
             (dict(direct, dst_addr=out_bytes - 9), "dst_addr"),
             (dict(interp, out_type=DType.INT8, qmin=-5, qmax=5, dst_addr=out_bytes - 7), "dst_addr"),
             (dict(direct, src_buf=Buffer.OUT, src_addr=40, dst_addr=41), "dst_addr"),     # ahead of the source
             (dict(direct, src_buf=Buffer.OUT, src_addr=40, dst_addr=40), "dst_addr"),     # in place, wider
             (dict(interp, src_buf=Buffer.OUT, src_addr=40, dst_addr=42), "dst_addr")]
    return [pytest.param(fields, name, id=f"{name}-{i}") for i, (fields, name) in enumerate(cases)]


@pytest.mark.parametrize("fields, field_name", _fault_cases())
def test_faults_name_the_field_and_write_nothing(fields, field_name):
    """After a legal command, the refused one stops the unit naming the field; the interpreter refuses it too.
    The LUT memory starts with a DIRECT8 table of 300s at 0 (fits INT16 only), random bytes after it."""
    memory = random_memory(SMALL, np.random.default_rng(3))
    memory.buffers[Buffer.LUT][:LUT8_ENTRIES * 2] = np.full(LUT8_ENTRIES, 300, LUT_ENTRY_DTYPE).view(np.uint8)
    legal = Command.make(Opcode.LUT, src_buf=Buffer.ACT, src_addr=5, dst_addr=100, count=9, mode=LutMode.INTERP16,
                         in_type=INTERP16_INPUT, out_type=DType.INT16, table_addr=0x101, table_log2=3,
                         index_shift=13, input_min=-32768, qmin=-32768, qmax=32767)
    refused = Command.make(Opcode.LUT, **{"src_buf": Buffer.ACT, "src_addr": 0, "dst_addr": 0, "count": 8, **fields})
    _assert_refused_after(SMALL, memory, legal, refused, field_name)


def _assert_refused_after(config, memory: Memory, legal: Command, refused: Command, field_name: str) -> None:
    """The interpreter refuses ``refused``; the RTL runs ``legal``, then stops on ``refused`` naming
    ``field_name``, having written what ``legal`` alone writes."""
    with pytest.raises(ExecutionError):
        run(_program(config, [legal, refused]), memory)
    before = run(_program(config, [legal]), memory)
    got = run_amaranth(_program(config, [legal, refused]), memory, [LutUnit], max_cycles=4000)
    assert [(error.index, error.field) for error in got.errors] == [(1, field_name)]
    assert first_difference(before.memory, got.memory) is None


@pytest.mark.parametrize("config", [*CONFIGS.values(), WIDE_LUT], ids=[*CONFIGS, "wide_lut"])
def test_random_softmax_commands_match_the_interpreter(config):
    """SOFTMAX (docs/arithmetic.md §6.4) on the LUT unit: random rows, types, multipliers and shifts; the wide
    LUT port puts several exp entries in one table row."""
    assert_matches(random_softmax_stimulus(config, np.random.default_rng(17), 8))


def test_softmax_at_the_widths_limits():
    """The longest row (equal inputs: the 32-bit sum at 4095 · 2^20) with the largest multiplier at shift 0 and
    30, rows of one element (the largest quotient), and a row whose other element reads the entry 1."""
    memory = Memory.create(DEFAULT, 64)
    table = np.zeros(LUT8_ENTRIES, SOFTMAX_TABLE_DTYPE)
    table[:3] = [EXP_MAX, EXP_MAX, 1]
    memory.buffers[Buffer.LUT][:table.nbytes] = table.view(np.uint8)
    memory.buffers[Buffer.ACT][:SOFTMAX_LENGTH_MAX] = 7
    memory.buffers[Buffer.ACT][SOFTMAX_LENGTH_MAX] = 9              # the short row: 9, 7 (E[2] = 1)
    int16 = dict(src_buf=Buffer.ACT, table_addr=0, in_type=DType.INT8, out_type=DType.INT16, out_zero_point=-32768,
                 qmin=-32768, qmax=32767, multiplier=MULTIPLIER_MAX)
    long_row = dict(int16, src_addr=0, rows=1, length=SOFTMAX_LENGTH_MAX)
    commands = [Command.make(Opcode.SOFTMAX, **long_row, dst_addr=0, shift=0),
                Command.make(Opcode.SOFTMAX, **long_row, dst_addr=8192, shift=SOFTMAX_SHIFT_MAX),
                Command.make(Opcode.SOFTMAX, **int16, src_addr=0, rows=3, length=1, dst_addr=16384, shift=0),
                Command.make(Opcode.SOFTMAX, **int16, src_addr=SOFTMAX_LENGTH_MAX, rows=1, length=2, dst_addr=16400,
                             shift=0)]
    comparison = assert_matches(Stimulus(_program(DEFAULT, commands), memory, (LutUnit,)))
    out = comparison.expected.memory.buffers[Buffer.OUT].view(np.int16)
    assert out[0] == -32768 + round(MULTIPLIER_MAX / SOFTMAX_LENGTH_MAX) and out[4096] == -32768
    assert list(out[8192:8195]) == [32767] * 3 and list(out[8200:8202]) == [32767, -32768]


def test_softmax_cycles_formula():
    """DEFAULT: the 4-byte LUT port loads the 1 KiB exp table in 256 cycles; three passes of one element per
    cycle; the divider's results leave 19 cycles after an element's last read; an int16 result at a word's last
    byte spills."""
    def softmax(**fields):
        return Command.make(Opcode.SOFTMAX, src_buf=Buffer.ACT, in_type=DType.INT8, **fields)
    assert command_cycles(DEFAULT, softmax(rows=2, length=10, out_type=DType.UINT8)) == 3 + 256 + 60 + 19
    assert command_cycles(DEFAULT, softmax(rows=1, length=1, out_type=DType.INT16, dst_addr=15)) == 3 + 256 + 3 + 19 + 1
    assert command_cycles(WIDE_LUT, softmax(rows=1, length=1, out_type=DType.INT16, dst_addr=14)) == 3 + 64 + 3 + 19


SOFTMAX_FAULTS = hardware_config_from_dict({**SMALL.to_dict(), "buffers": {
    **SMALL.to_dict()["buffers"], "lut": {"bytes": 4096, "port_bytes": 4}}})    # room for three exp tables


def _softmax_fault_cases():
    out_bytes = SOFTMAX_FAULTS.buffer(Buffer.OUT).bytes
    legal = dict(src_buf=Buffer.ACT, src_addr=0, dst_addr=0, rows=2, length=5, in_type=DType.INT8,
                 out_type=DType.UINT8, table_addr=0, multiplier=255, shift=0, qmin=0, qmax=255)
    cases = [(dict(legal, src_addr=SOFTMAX_FAULTS.buffer(Buffer.ACT).bytes - 9), "src_addr"),
             (dict(legal, table_addr=4096 - 1023), "table_addr"),
             (dict(legal, dst_addr=out_bytes - 9), "dst_addr"),
             (dict(legal, src_buf=Buffer.OUT, src_addr=100, dst_addr=109), "dst_addr"),
             (dict(legal, out_zero_point=-1), "out_zero_point"),
             (dict(legal, out_type=DType.INT8, qmin=-129, qmax=0), "qmin"),
             (dict(legal, qmin=4, qmax=3), "qmax"),
             (dict(legal, table_addr=1024), "table_addr"),     # E[0] = 0
             (dict(legal, table_addr=2048), "table_addr")]     # an entry above 2^20
    return [pytest.param(fields, name, id=f"{name}-{i}") for i, (fields, name) in enumerate(cases)]


@pytest.mark.parametrize("fields, field_name", _softmax_fault_cases())
def test_softmax_faults_name_the_field_and_write_nothing(fields, field_name):
    """The LUT memory holds exp tables at 0 (legal), 1024 (E[0] = 0) and 2048 (E[5] = 2^20 + 1): the last two
    are refused as the command runs, naming table_addr."""
    config = SOFTMAX_FAULTS
    memory = Memory.create(config, 64)
    memory.buffers[Buffer.ACT][:] = np.random.default_rng(4).integers(0, 256, config.buffer(Buffer.ACT).bytes)
    tables = np.tile(build_softmax_table(0.1), 3)
    tables[LUT8_ENTRIES], tables[2 * LUT8_ENTRIES + 5] = 0, EXP_MAX + 1
    memory.buffers[Buffer.LUT][:tables.nbytes] = tables.view(np.uint8)
    legal = Command.make(Opcode.SOFTMAX, src_buf=Buffer.ACT, src_addr=3, dst_addr=200, rows=1, length=6,
                         in_type=DType.UINT8, out_type=DType.INT16, multiplier=1000, shift=2, qmin=-5, qmax=900)
    _assert_refused_after(config, memory, legal, Command.make(Opcode.SOFTMAX, **fields), field_name)


def test_the_lut_port_must_carry_a_whole_exp_entry():
    narrow = hardware_config_from_dict({"buffers": {"lut": {"port_bytes": 2}}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)      # the refused unit is never elaborated
        with pytest.raises(ValueError, match="buffers.lut.port_bytes >= 4") as refused:
            LutUnit(narrow)
        del refused                     # its traceback holds the half-built unit: collected here, not later
        gc.collect()


def test_interpreter_refuses_what_the_unit_cannot_stream():
    """The rule is the interpreter's too (docs/rtl-lut.md): ahead of the source, or wider in place."""
    memory = Memory.create(SMALL, 64)
    lut = dict(src_buf=Buffer.OUT, count=4, mode=LutMode.DIRECT8, in_type=DType.INT8, out_type=DType.INT16)
    for src_addr, dst_addr in [(8, 8), (8, 9), (8, 2)]:
        with pytest.raises(ExecutionError, match="field dst_addr"):
            run(_program(SMALL, [Command.make(Opcode.LUT, src_addr=src_addr, dst_addr=dst_addr, **lut)]), memory)
    run(_program(SMALL, [Command.make(Opcode.LUT, src_addr=8, dst_addr=0, **{**lut, "count": 3})]), memory)
    narrow = {**lut, "out_type": DType.INT8}
    run(_program(SMALL, [Command.make(Opcode.LUT, src_addr=8, dst_addr=8, **narrow)]), memory)
    with pytest.raises(ExecutionError, match="field dst_addr"):
        run(_program(SMALL, [Command.make(Opcode.LUT, src_addr=8, dst_addr=11, **narrow)]), memory)


def test_converts_to_verilog():
    assert "module lut_unit" in verilog.convert(LutUnit(DEFAULT), name="lut_unit")


@pytest.mark.slow
@EVERY_CONFIG
def test_many_random_commands(config):
    """400 random LUT commands per configuration (1200 in all), counts up to 300, in programs of 40."""
    rng = np.random.default_rng(2024)
    for _ in range(10):
        workload = Workload(config, rng, max_count=300)
        _assert_matches(config, workload.memory, [workload.command() for _ in range(40)])
