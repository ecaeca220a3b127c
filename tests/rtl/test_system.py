"""The shared sequencer and the System around it: token handshake, FINISH, cycle log, error stop."""
from __future__ import annotations

from aipu.sim.cosim.amaranth_run import run_amaranth, run_words_amaranth
from aipu.sim.machine.arch import DEFAULT, DType
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing.sequencer import FIRST_START, NEXT_START
from tests.sim.cosim.toy_units import ENGINE_CYCLES, timed_unit


def _store(**tokens) -> Command:
    return Command.make(Opcode.STORE, sram_addr=0, dram_addr=0, elem_type=DType.INT8, y_size=1, x_size=1, run=1,
                        dram_y_stride=0, dram_x_stride=0, **tokens)


def _load(**tokens) -> Command:
    return Command.make(Opcode.LOAD, buffer=0, sram_addr=0, dram_addr=0, elem_type=DType.INT8, y_size=1,
                        x_size=1, run=1, dram_y_stride=0, dram_x_stride=0, pad_top=0, pad_bottom=0,
                        pad_left=0, pad_right=0, pad_value=0, **tokens)


def test_tokens_order_two_units_and_finish_waits_for_both():
    program = Program(DEFAULT)
    program.append(_load(push={Unit.STORE}))
    program.append(_load(push={Unit.STORE}))
    program.append(_store(pop={Unit.LOAD}))
    program.append(_store(pop={Unit.LOAD}))
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    result = run_amaranth(program, Memory.create(DEFAULT, 64), [timed_unit(Unit.LOAD), timed_unit(Unit.STORE)],
                          max_cycles=200)
    assert result.done and not result.errors and not result.token_error
    assert result.command_cycles(Unit.LOAD) == [ENGINE_CYCLES] * 2
    assert result.command_cycles(Unit.STORE) == [ENGINE_CYCLES] * 2 + [0]
    loads, stores = result.cycles[Unit.LOAD], result.cycles[Unit.STORE]
    for (_, load_retire), (store_start, _) in zip(loads, stores[:2]):
        assert store_start > load_retire       # each STORE starts only after the LOAD that feeds it retired
    assert stores[2][0] >= max(end for _, end in loads + stores[:2])


def test_a_unit_starts_its_commands_after_the_sequencer_s_fixed_steps():
    """Take, check, start: the first command starts in cycle FIRST_START, the next NEXT_START cycles after the
    previous one retired (what the cycle model assumes)."""
    program = Program(DEFAULT)
    for _ in range(3):
        program.append(_load())
    program.append(Command.make(Opcode.FINISH, unit=Unit.LOAD))
    result = run_amaranth(program, Memory.create(DEFAULT, 64), [timed_unit(Unit.LOAD)], max_cycles=100)
    assert result.done and not result.errors
    spans = result.cycles[Unit.LOAD]
    assert spans[0][0] == FIRST_START
    assert [start for start, _ in spans[1:3]] == [retire + NEXT_START for _, retire in spans[:2]]


def test_finish_with_a_token_left_reports_it():
    program = Program(DEFAULT)
    program.append(_load(push={Unit.STORE}))
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    result = run_amaranth(program, Memory.create(DEFAULT, 64), [timed_unit(Unit.LOAD), timed_unit(Unit.STORE)],
                          max_cycles=200)
    assert result.done and result.token_error


def test_an_illegal_word_stops_its_unit_by_field_name_before_executing():
    good = _load(push={Unit.STORE})
    placed = {fld.name: (offset, width) for fld, offset, width in good.spec.layout(DEFAULT)}
    offset, _ = placed["y_size"]
    word = int.from_bytes(good.encode(DEFAULT), "little") & ~(((1 << 16) - 1) << offset)   # y_size = 0: illegal
    queues = {Unit.LOAD: [_load().encode(DEFAULT), word.to_bytes(32, "little")],
              Unit.STORE: [Command.make(Opcode.FINISH, unit=Unit.STORE, pop={Unit.LOAD}).encode(DEFAULT)]}
    result = run_words_amaranth(queues, Memory.create(DEFAULT, 64), [timed_unit(Unit.LOAD), timed_unit(Unit.STORE)],
                                max_cycles=100)
    assert not result.done
    assert [str(error) for error in result.errors] == ["LOAD[1] stopped on field y_size"]
    assert result.command_cycles(Unit.LOAD) == [ENGINE_CYCLES]     # the first LOAD ran, the illegal one never started
