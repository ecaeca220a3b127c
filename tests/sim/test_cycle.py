"""The cycle model (sim/cycle.py) against the RTL, cycle for cycle: every command's start and retire and the
program's total, on each unit alone, with token queues that fill, and (tests/sim/cosim/test_layers.py) on
every lowered layer the co-simulation runs; a program that cannot finish is named, not hung. The DRAM shared
between the DMA units (the RTL gives each its own port) against closed forms."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from aipu.sim.cosim.amaranth_run import run_amaranth
from aipu.sim.cosim.stimulus import RANDOM
from aipu.sim.cosim.stimulus.dma import random_load, random_memory, random_store
from aipu.sim.cycle import _fair_paces, simulate
from aipu.sim.machine.arch import DEFAULT, Buffer, DType, hardware_config_from_dict
from aipu.sim.machine.errors import DeadlockError
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing.conv import command_cycles as conv_cycles
from aipu.sim.timing.conv import useful_macs
from aipu.sim.timing.sequencer import FIRST_START, NEXT_START
from tests.rtl.configs import SMALL


def _assert_cycle_for_cycle(program: Program, memory: Memory, units) -> None:
    got = run_amaranth(program, memory, list(units), max_cycles=1_000_000)
    assert got.done and not got.errors
    model = simulate(program, memory, dram="ports")
    assert {unit: got.cycles.get(unit, []) for unit in Unit} == model.cycles
    assert got.total_cycles == model.total_cycles


@pytest.mark.parametrize("family", list(RANDOM))
def test_each_unit_alone_starts_and_retires_as_the_rtl(family):
    stimulus = RANDOM[family](SMALL, np.random.default_rng(1), 6)
    _assert_cycle_for_cycle(stimulus.program, stimulus.memory, stimulus.units)


def test_a_full_token_queue_stalls_its_producer_as_in_the_rtl():
    """Ten short LOADs each push a token to a long STORE: with two tokens of room, the third LOAD waits for
    the first STORE to start."""
    from aipu.rtl.dma import LoadUnit, StoreUnit

    config = hardware_config_from_dict({**SMALL.to_dict(), "queues": {**SMALL.to_dict()["queues"],
                                                                       "token_depth": 2}})
    rng = np.random.default_rng(4)
    program = Program(config)
    loads = [random_load(config, rng, size=1) for _ in range(10)]
    stores = [random_store(config, rng, size=12) for _ in range(10)]
    for load in loads:
        program.append(Command(load.opcode, load.args, push=frozenset({Unit.STORE})))
    for store in stores:
        program.append(Command(store.opcode, store.args, pop=frozenset({Unit.LOAD})))
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    _assert_cycle_for_cycle(program, random_memory(config, rng), (LoadUnit, StoreUnit))
    spans = simulate(program, random_memory(config, rng)).cycles[Unit.LOAD]
    assert any(start > previous_retire + NEXT_START for (_, previous_retire), (start, _) in zip(spans, spans[1:]))


def test_a_program_that_cannot_finish_names_the_waiting_commands():
    program = Program(SMALL)
    program.append(Command.make(Opcode.CONV, pop=[Unit.LOAD]))          # no LOAD ever pushes
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    with pytest.raises(DeadlockError, match=r"CONV\[0\] CONV waits for a token LOAD->CONV"):
        simulate(program, Memory.create(SMALL, 64))


def test_a_compute_bound_conv_runs_at_the_array_s_rate():
    """One 3x3 conv of 64 to 64 channels over a 28x28 tile on DEFAULT's 16x16 array: at least MACs / 256
    cycles, and within 5 % of it."""
    conv = Command.make(Opcode.CONV, in_h=30, in_w=30, in_c=64, out_c=64, k_h=3, k_w=3, stride_h=1, stride_w=1,
                        dilation_h=1, dilation_w=1, groups=1, in_type=DType.INT8)
    program = Program(DEFAULT)
    program.append(conv)
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    model = simulate(program, Memory.create(DEFAULT, 64), dram="ports")
    ideal = useful_macs(conv) / (DEFAULT.mac.rows * DEFAULT.mac.cols)
    (start, retire), _ = model.cycles[Unit.CONV]
    assert start == FIRST_START and retire - start == conv_cycles(DEFAULT, conv)
    assert ideal <= retire - start <= 1.05 * ideal
    assert model.busy[Unit.CONV] == retire - start and model.total_cycles == retire + NEXT_START + 1


def _dense_copies(config, loads: int, stores: int, rows: int) -> Program:
    """Independent dense LOADs (to ACT) and STOREs (from OUT) of ``rows`` x 1024 bytes: each wants one DRAM word
    every cycle of its transfer."""
    program = Program(config)
    shape = dict(y_size=rows, x_size=1, run=1024, elem_type=DType.INT8, dram_y_stride=1024, dram_x_stride=1024,
                 sram_addr=0)
    for index in range(loads):
        program.append(Command.make(Opcode.LOAD, buffer=Buffer.ACT, dram_addr=index * 1024 * rows, **shape))
    for index in range(stores):
        program.append(Command.make(Opcode.STORE, dram_addr=(loads + index) * 1024 * rows, **shape))
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    return program


def test_dma_units_that_share_the_dram_run_at_its_limit():
    """Eight 16 KiB LOADs beside eight 16 KiB STOREs on DEFAULT's 16-byte DRAM: with a DRAM of their own
    each, both finish in about half the cycles of their words; sharing one, the program takes at least one
    cycle per word moved and, bandwidth-bound, within 3 % of that. Each unit's stretch is its DRAM stall."""
    program = _dense_copies(DEFAULT, 8, 8, 16)
    memory = Memory.create(DEFAULT, 16 * 16 * 1024)
    words = 16 * 16 * 1024 // DEFAULT.dram.bytes_per_cycle
    ports, shared = simulate(program, memory, dram="ports"), simulate(program, memory, dram="shared")
    assert ports.total_cycles < 0.6 * words and all(t.dram_stall == 0 for t in ports.timings[Unit.LOAD])
    assert words <= shared.total_cycles <= 1.03 * words
    stalls = {unit: sum(t.dram_stall for t in shared.timings[unit]) for unit in (Unit.LOAD, Unit.STORE)}
    assert all(stall > 0.4 * words / 2 for stall in stalls.values())
    assert {unit: shared.dram_stall[unit] for unit in stalls} == stalls and sum(ports.dram_stall.values()) == 0
    assert shared.busy == ports.busy      # the formulas' work is the same; the stretch is counted apart


def test_one_dma_unit_alone_does_not_feel_the_sharing():
    program = _dense_copies(DEFAULT, 4, 0, 8)
    memory = Memory.create(DEFAULT, 4 * 8 * 1024)
    assert simulate(program, memory, dram="shared").cycles == simulate(program, memory, dram="ports").cycles


def test_the_dram_is_shared_max_min_fair():
    assert _fair_paces([Fraction(1), Fraction(1)]) == [Fraction(1, 2)] * 2
    assert _fair_paces([Fraction(1, 4), Fraction(1), Fraction(1)]) == [1, Fraction(3, 8), Fraction(3, 8)]
    assert _fair_paces([Fraction(1, 2), Fraction(1, 2)]) == [1, 1]        # demands that fit are all met
    assert _fair_paces([Fraction(1, 8), Fraction(1, 2), Fraction(1, 2)]) == [1, Fraction(7, 8), Fraction(7, 8)]


def test_an_unknown_dram_model_is_refused():
    with pytest.raises(ValueError, match="dram model 'wide'"):
        simulate(Program(SMALL), Memory.create(SMALL, 64), dram="wide")
