"""LOAD and STORE on the RTL against the interpreter: every byte of every buffer and of DRAM, the cycles of
every command against ``command_cycles``, the faults by field name, and Verilog export."""
from __future__ import annotations

import re

import numpy as np
import pytest
from amaranth.back import verilog

from aipu.rtl.dma import LoadUnit, StoreUnit, command_cycles
from aipu.sim.cosim.amaranth_run import run_amaranth
from aipu.sim.cosim.result import first_difference
from aipu.sim.interpreter import ExecutionError, run
from aipu.sim.machine.arch import DEFAULT, DTYPE_BYTES, DTYPE_NUMPY, Buffer, DType, HardwareConfig
from aipu.sim.machine.isa import LOADABLE_BUFFERS, Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from tests.rtl.configs import EVERY_CONFIG, SMALL

UNITS = [LoadUnit, StoreUnit]
DRAM_BYTES = 4096


def _random_memory(config: HardwareConfig, rng: np.random.Generator) -> Memory:
    memory = Memory.create(config, rng.integers(0, 256, DRAM_BYTES, dtype=np.uint8).tobytes())
    for array in memory.buffers.values():
        array[:] = rng.integers(0, 256, array.size, dtype=np.uint8)
    return memory


def _pattern_end(fields: dict) -> int:
    run = fields["run"] * DTYPE_BYTES[fields["elem_type"]]
    return ((fields["y_size"] - 1) * fields["dram_y_stride"] + (fields["x_size"] - 1) * fields["dram_x_stride"]
            + run)


def _writes_a_byte_twice(fields: dict) -> bool:
    run = fields["run"] * DTYPE_BYTES[fields["elem_type"]]
    offsets = (np.arange(fields["y_size"])[:, None, None] * fields["dram_y_stride"]
               + np.arange(fields["x_size"])[None, :, None] * fields["dram_x_stride"] + np.arange(run))
    return np.unique(offsets).size != offsets.size


def _random_shape(rng: np.random.Generator, size: int) -> dict:
    """Element type, sizes and strides: strides below, at and above the run's bytes (and zero)."""
    elem = DType(int(rng.integers(len(DType))))
    fields = dict(elem_type=elem, y_size=int(rng.integers(1, size + 1)), x_size=int(rng.integers(1, size + 1)),
                  run=int(rng.integers(1, 2 * size + 1)))
    run = fields["run"] * DTYPE_BYTES[elem]
    for name, span in (("dram_x_stride", run), ("dram_y_stride", run * fields["x_size"])):
        fields[name] = int(rng.choice([0, span, int(rng.integers(0, span + 1)), int(rng.integers(span, 3 * span + 9))]))
    return fields


def random_load(config: HardwareConfig, rng: np.random.Generator, size: int = 4) -> Command:
    while True:
        fields = _random_shape(rng, size)
        buffer = LOADABLE_BUFFERS[int(rng.integers(len(LOADABLE_BUFFERS)))]
        pads = {name: int(rng.integers(0, 3)) for name in ("pad_top", "pad_bottom", "pad_left", "pad_right")}
        run = fields["run"] * DTYPE_BYTES[fields["elem_type"]]
        tile = ((fields["y_size"] + pads["pad_top"] + pads["pad_bottom"])
                * (fields["x_size"] + pads["pad_left"] + pads["pad_right"]) * run)
        end = _pattern_end(fields)
        if tile <= config.buffer(buffer).bytes and end <= DRAM_BYTES:
            break
    info = np.iinfo(DTYPE_NUMPY[fields["elem_type"]])
    return Command.make(Opcode.LOAD, buffer=buffer, sram_addr=int(rng.integers(0, config.buffer(buffer).bytes - tile + 1)),
                        dram_addr=int(rng.integers(0, DRAM_BYTES - end + 1)),
                        pad_value=int(rng.integers(info.min, int(info.max) + 1)), **pads, **fields)


def random_store(config: HardwareConfig, rng: np.random.Generator, size: int = 4) -> Command:
    while True:
        fields = _random_shape(rng, size)
        source = fields["y_size"] * fields["x_size"] * fields["run"] * DTYPE_BYTES[fields["elem_type"]]
        end = _pattern_end(fields)
        if source <= config.buffer(Buffer.OUT).bytes and end <= DRAM_BYTES and not _writes_a_byte_twice(fields):
            break
    return Command.make(Opcode.STORE, sram_addr=int(rng.integers(0, config.buffer(Buffer.OUT).bytes - source + 1)),
                        dram_addr=int(rng.integers(0, DRAM_BYTES - end + 1)), **fields)


def chained_program(config: HardwareConfig, commands: list[Command]) -> Program:
    """The commands in this order: each one that follows a command of the other unit pops its token."""
    program = Program(config)
    for index, command in enumerate(commands):
        unit = command.unit
        before = commands[index - 1].unit if index else unit
        after = commands[index + 1].unit if index + 1 < len(commands) else unit
        program.append(Command(command.opcode, command.args, pop=frozenset({before} - {unit}),
                               push=frozenset({after} - {unit})))
    last = commands[-1].unit
    program.append(Command.make(Opcode.FINISH, unit=last))
    return program


def compare(config: HardwareConfig, commands: list[Command], memory: Memory) -> None:
    """Run on the RTL and the interpreter: same bytes everywhere, each command's cycles as the formula."""
    program = chained_program(config, commands)
    expected = run(program, memory).memory
    budget = sum(command_cycles(config, command) + 8 for command in commands) + 100
    result = run_amaranth(program, memory, UNITS, max_cycles=budget)
    assert result.done and not result.errors and not result.dram_faults, (result.errors, result.dram_faults)
    assert first_difference(expected, result.memory) is None, first_difference(expected, result.memory)
    for unit in (Unit.LOAD, Unit.STORE):
        mine = [command for command in program.queues[unit] if command.opcode != Opcode.FINISH]
        cycles = result.command_cycles(unit)[:len(mine)]
        assert cycles == [command_cycles(config, command) for command in mine], (unit, mine)


def random_commands(config: HardwareConfig, rng: np.random.Generator, count: int) -> list[Command]:
    return [(random_load if rng.random() < 0.5 else random_store)(config, rng) for _ in range(count)]


@EVERY_CONFIG
def test_random_loads_and_stores_match_the_interpreter(config):
    rng = np.random.default_rng(7)
    compare(config, random_commands(config, rng, 40), _random_memory(config, rng))


def test_store_then_load_round_trip_ordered_by_tokens():
    """A STORE's bytes come back through a LOAD of the same DRAM bytes, in another layout."""
    config = SMALL
    rng = np.random.default_rng(3)
    store = Command.make(Opcode.STORE, sram_addr=5, dram_addr=101, elem_type=DType.INT16, y_size=3, x_size=4,
                         run=3, dram_y_stride=70, dram_x_stride=13)
    load = Command.make(Opcode.LOAD, buffer=Buffer.ACT, sram_addr=17, dram_addr=101, elem_type=DType.INT8,
                        y_size=3, x_size=4, run=6, dram_y_stride=70, dram_x_stride=13, pad_top=1, pad_bottom=2,
                        pad_left=2, pad_right=1, pad_value=-7)
    compare(config, [store, load, store, load], _random_memory(config, rng))


@pytest.mark.parametrize("config", [DEFAULT, SMALL], ids=["default", "small"])
def test_long_runs_approach_the_dram_bandwidth(config):
    """One long unaligned run each way: bytes per cycle within a few percent of dram.bytes_per_cycle."""
    rng = np.random.default_rng(5)
    size = 960
    load = Command.make(Opcode.LOAD, buffer=Buffer.ACT, sram_addr=3, dram_addr=7, elem_type=DType.INT8,
                        y_size=1, x_size=1, run=size)
    store = Command.make(Opcode.STORE, sram_addr=9, dram_addr=2001, elem_type=DType.INT8, y_size=1, x_size=1,
                         run=size)
    compare(config, [load, store], _random_memory(config, rng))
    latency = config.dram.latency_cycles
    for command, fixed in ((load, latency), (store, 0)):
        assert size / (command_cycles(config, command) - fixed) >= 0.9 * config.dram.bytes_per_cycle


def _interpreter_field(program: Program, memory: Memory) -> str:
    with pytest.raises(ExecutionError) as refusal:
        run(program, memory)
    return re.search(r"(?:field )?(\w+) = ", str(refusal.value).split(": ", 1)[1]).group(1)


FAULTS = {
    "pad_value": dict(opcode=Opcode.LOAD, buffer=Buffer.ACT, elem_type=DType.INT8, pad_value=128, pad_top=1),
    "uint8 pad_value": dict(opcode=Opcode.LOAD, buffer=Buffer.ACT, elem_type=DType.UINT8, pad_value=-1),
    "load sram_addr": dict(opcode=Opcode.LOAD, buffer=Buffer.LUT, sram_addr=1020, run=3, pad_right=1),
    "load beyond dram": dict(opcode=Opcode.LOAD, buffer=Buffer.PARAM, dram_addr=4000, y_size=2,
                             dram_y_stride=96, run=2),
    "load beyond the address space": dict(opcode=Opcode.LOAD, buffer=Buffer.ACT, dram_addr=(1 << 32) - 2,
                                          run=3),
    "store sram_addr": dict(opcode=Opcode.STORE, sram_addr=1000, run=30),
    "store beyond dram": dict(opcode=Opcode.STORE, dram_addr=4090, run=7),
    "store columns overlap": dict(opcode=Opcode.STORE, x_size=3, run=4, dram_x_stride=3, dram_y_stride=100),
    "store rows overlap": dict(opcode=Opcode.STORE, y_size=5, x_size=2, run=2, dram_x_stride=7,
                               dram_y_stride=6),
}


@pytest.mark.parametrize("case", list(FAULTS))
def test_faults_name_the_field_and_write_nothing(case):
    config = SMALL
    fields = dict(FAULTS[case])
    opcode = fields.pop("opcode")
    defaults = dict(elem_type=DType.INT8, y_size=1, x_size=1, run=1)
    command = Command.make(opcode, **{**defaults, **fields})
    memory = _random_memory(config, np.random.default_rng(11))
    program = chained_program(config, [command])
    expected = _interpreter_field(program, memory)
    result = run_amaranth(program, memory, UNITS, max_cycles=200)
    if not result.dram_faults:
        assert [(error.unit, error.field) for error in result.errors] == [(command.unit, expected)]
        assert first_difference(memory, result.memory) is None
        return
    # Beyond the DRAM model: the probe of the pattern's last word makes the System flag it before the
    # engine writes anything; a LOAD's first write comes latency_cycles later, so the buffers are intact.
    # (The System does not stop the unit: a STORE goes on writing DRAM until the testbench stops.)
    assert expected == "dram_addr" and result.dram_faults == [command.unit] and not result.errors
    for buffer in Buffer:
        assert np.array_equal(memory.buffers[buffer], result.memory.buffers[buffer])


def test_interleaved_rows_that_never_touch_are_legal():
    """Rows may interleave between each other's runs: the overlap check must not refuse that."""
    store = Command.make(Opcode.STORE, sram_addr=0, dram_addr=10, elem_type=DType.INT8, y_size=3, x_size=4,
                         run=2, dram_x_stride=6, dram_y_stride=2)
    compare(SMALL, [store], _random_memory(SMALL, np.random.default_rng(2)))


@pytest.mark.parametrize("unit, config", [(StoreUnit, DEFAULT), (LoadUnit, DEFAULT), (LoadUnit, SMALL)],
                         ids=["store", "load", "load-small"])
def test_converts_to_verilog(unit, config):
    """LOAD with DEFAULT's 256-byte WEIGHT port too (its realigning shifters are rtl/lanes.py's, ~10 s)."""
    assert "module" in verilog.convert(unit(config), name=unit.__name__.lower())


@pytest.mark.slow
@EVERY_CONFIG
def test_many_random_commands(config):
    """At least 1000 random commands over the three configurations (plus random overlap checks)."""
    rng = np.random.default_rng(2024)
    for _ in range(4):
        compare(config, random_commands(config, rng, 90), _random_memory(config, rng))
