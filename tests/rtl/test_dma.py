"""LOAD and STORE on the RTL against the interpreter: every byte of every buffer and of DRAM, the cycles of
every command against ``command_cycles``, the faults by field name, and Verilog export."""
from __future__ import annotations

import re

import numpy as np
import pytest
from amaranth.back import verilog

from aipu.rtl import dma as rtl_dma
from aipu.rtl.dma import LoadUnit, StoreUnit
from aipu.sim.cosim.amaranth_run import run_amaranth
from aipu.sim.cosim.result import first_difference
from aipu.sim.cosim.stimulus import Stimulus
from aipu.sim.cosim.stimulus.dma import UNITS, chained_program, random_commands, random_memory
from aipu.sim.interpreter import ExecutionError, run
from aipu.sim.machine.arch import DEFAULT, Buffer, DType, HardwareConfig
from aipu.sim.machine.isa import CODEBOOK_SLOT_BYTES, IndexBits, Opcode
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing.dma import command_cycles
from tests.rtl.checks import assert_matches
from tests.rtl.configs import EVERY_CONFIG, SMALL

def compare(config: HardwareConfig, commands: list[Command], memory: Memory) -> None:
    """Run on the RTL and the interpreter: same bytes everywhere, each command's cycles as the formula."""
    assert_matches(Stimulus(chained_program(config, commands), memory, UNITS))


@EVERY_CONFIG
def test_random_loads_and_stores_match_the_interpreter(config):
    rng = np.random.default_rng(7)
    compare(config, random_commands(config, rng, 40), random_memory(config, rng))


def codebook_stimulus(config: HardwareConfig) -> Stimulus:
    """LOADs of 1-, 2- and 4-bit indices into WEIGHT among plain LOADs (of LUT memory too) and STOREs (the default
    suite's; tests/rtl/test_mutants.py plants bugs under it, so the units are those aipu.rtl.dma holds now)."""
    rng = np.random.default_rng(115)
    return Stimulus(chained_program(config, random_commands(config, rng, 24, codebook=True)),
                    random_memory(config, rng), (rtl_dma.LoadUnit, rtl_dma.StoreUnit))


@EVERY_CONFIG
def test_random_codebook_loads_match_the_interpreter(config):
    assert_matches(codebook_stimulus(config))


@EVERY_CONFIG
def test_random_circulant_loads_match_the_interpreter(config):
    """Circulant LOADs (docs/rtl-dma.md, "Block-circulant rows") among plain LOADs and STOREs: every byte, and
    each command's cycles as the formula."""
    rng = np.random.default_rng(52)
    assert_matches(Stimulus(chained_program(config, random_commands(config, rng, 24, circulant=True)),
                            random_memory(config, rng), UNITS))


def test_store_then_load_round_trip_ordered_by_tokens():
    """A STORE's bytes come back through a LOAD of the same DRAM bytes, in another layout."""
    config = SMALL
    rng = np.random.default_rng(3)
    store = Command.make(Opcode.STORE, sram_addr=5, dram_addr=101, elem_type=DType.INT16, y_size=3, x_size=4,
                         run=3, dram_y_stride=70, dram_x_stride=13)
    load = Command.make(Opcode.LOAD, buffer=Buffer.ACT, sram_addr=17, dram_addr=101, elem_type=DType.INT8,
                        y_size=3, x_size=4, run=6, dram_y_stride=70, dram_x_stride=13, pad_top=1, pad_bottom=2,
                        pad_left=2, pad_right=1, pad_value=-7)
    compare(config, [store, load, store, load], random_memory(config, rng))


@pytest.mark.parametrize("config", [DEFAULT, SMALL], ids=["default", "small"])
def test_long_runs_approach_the_dram_bandwidth(config):
    """One long unaligned run each way: bytes per cycle within a few percent of dram.bytes_per_cycle."""
    rng = np.random.default_rng(5)
    size = 960
    load = Command.make(Opcode.LOAD, buffer=Buffer.ACT, sram_addr=3, dram_addr=7, elem_type=DType.INT8,
                        y_size=1, x_size=1, run=size)
    store = Command.make(Opcode.STORE, sram_addr=9, dram_addr=2001, elem_type=DType.INT8, y_size=1, x_size=1,
                         run=size)
    compare(config, [load, store], random_memory(config, rng))
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
    "codebook into ACT": dict(opcode=Opcode.LOAD, buffer=Buffer.ACT, index_bits=IndexBits.TWO, run=4),
    "codebook of INT16": dict(opcode=Opcode.LOAD, buffer=Buffer.WEIGHT, elem_type=DType.INT16, index_bits=IndexBits.TWO,
                              run=4),
    "codebook run": dict(opcode=Opcode.LOAD, buffer=Buffer.WEIGHT, index_bits=IndexBits.ONE, run=4),
    "codebook beyond LUT": dict(opcode=Opcode.LOAD, buffer=Buffer.WEIGHT, index_bits=IndexBits.FOUR, run=2,
                                codebook_addr=1024 // CODEBOOK_SLOT_BYTES),
    **{f"circulant {name}": {**dict(opcode=Opcode.LOAD, buffer=Buffer.WEIGHT, circ_log2=1, run=4), **fields}
       for name, fields in (("index_bits", dict(index_bits=IndexBits.FOUR)), ("buffer", dict(buffer=Buffer.ACT)),
                            ("elem_type", dict(elem_type=DType.INT16)), ("circ_size", dict(circ_log2=3)),
                            ("run", dict(run=3)), ("long run", dict(run=258)), ("dram_addr", dict(dram_addr=3)),
                            ("dram_x_stride", dict(x_size=2, dram_x_stride=5)), ("padding", dict(pad_left=1)),
                            ("signs beyond LUT", dict(codebook_addr=1023 // CODEBOOK_SLOT_BYTES, run=256)))},
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
    memory = random_memory(config, np.random.default_rng(11))
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
    compare(SMALL, [store], random_memory(SMALL, np.random.default_rng(2)))


@pytest.mark.parametrize("unit, config", [(StoreUnit, DEFAULT), (LoadUnit, DEFAULT), (LoadUnit, SMALL)],
                         ids=["store", "load", "load-small"])
def test_converts_to_verilog(unit, config):
    """LOAD with DEFAULT's 256-byte WEIGHT port too (its realigning shifters are rtl/lanes.py's, ~13 s)."""
    assert "module" in verilog.convert(unit(config), name=unit.__name__.lower())


@pytest.mark.slow
@EVERY_CONFIG
def test_many_random_codebook_loads(config):
    """At least 1000 random commands on each configuration, a third of them LOADs of codebook indices."""
    rng = np.random.default_rng(1151)
    for _ in range(10):
        compare(config, random_commands(config, rng, 100, codebook=True), random_memory(config, rng))


@pytest.mark.slow
@EVERY_CONFIG
def test_many_random_commands(config):
    """At least 1000 random commands over the three configurations (plus random overlap checks)."""
    rng = np.random.default_rng(2024)
    for _ in range(4):
        compare(config, random_commands(config, rng, 90), random_memory(config, rng))
