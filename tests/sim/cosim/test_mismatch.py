"""The first-mismatch report: RTL results fabricated from the interpreter's memory with chosen bytes flipped,
so that the command, element, values and cycles it must name are known (no RTL runs here)."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.app.sample_layers import random_layer
from aipu.compiler.lowering.conv_layers import lower_conv_layer
from aipu.sim.cosim.result import RtlResult, first_mismatch
from aipu.sim.interpreter import run as interpret
from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.isa import Opcode, Unit
from tests.rtl.configs import SMALL


@pytest.fixture(scope="module")
def layer():
    """A layer of four tiles: two ACC halves each written twice, four strided STOREs into DRAM."""
    lowered = lower_conv_layer(random_layer(np.random.default_rng(0), max_channels=6, max_size=5), SMALL,
                               tile_k=6, tile_rows=3)
    return lowered, interpret(lowered.program, lowered.memory())


def _cycles(program) -> dict[Unit, list[tuple[int, int]]]:
    """Made-up (start, retire) cycles, distinct for every command."""
    return {unit: [(1000 * int(unit) + 10 * i, 1000 * int(unit) + 10 * i + 7) for i in range(len(queue))]
            for unit, queue in program.queues.items()}


def _rtl(expected, flips: list[tuple[str, int]], cycles) -> RtlResult:
    """The interpreter's memory with the byte at each (space, address) inverted."""
    memory = expected.memory.copy()
    for space, address in flips:
        image = memory.dram if space == "DRAM" else memory.buffers[Buffer[space]]
        image[address] ^= 0xFF
    return RtlResult(memory, cycles, total_cycles=10_000, done=True)


def _write_of(expected, unit: Unit, index: int):
    (write,) = [w for w in expected.writes if (w.unit, w.index) == (unit, index)]
    return write


def _value(image: np.ndarray, addresses: np.ndarray, dtype) -> int:
    return int(np.frombuffer(image[addresses].tobytes(), np.dtype(dtype).newbyteorder("<"))[0])


def test_agreeing_memories_report_nothing(layer):
    lowered, expected = layer
    assert first_mismatch(lowered.program, expected, _rtl(expected, [], _cycles(lowered.program))) is None


def test_a_mid_program_store_is_named_with_its_element_values_and_cycles(layer):
    lowered, expected = layer
    store = _write_of(expected, Unit.STORE, 1)
    order = store.bytes()                         # strided: element 4 of its int16 output is bytes 8 and 9
    cycles = _cycles(lowered.program)
    got = _rtl(expected, [("DRAM", int(order[9]))], cycles)
    mismatch = first_mismatch(lowered.program, expected, got)
    assert (mismatch.unit, mismatch.index, mismatch.space) == (Unit.STORE, 1, "DRAM")
    assert (mismatch.element, mismatch.dtype, mismatch.address) == (4, np.dtype(np.int16), int(order[8]))
    assert mismatch.golden == _value(expected.memory.dram, order[8:10], np.int16)
    assert mismatch.rtl == _value(got.memory.dram, order[8:10], np.int16) != mismatch.golden
    assert mismatch.cycles == cycles[Unit.STORE][1]
    assert (mismatch.differing_bytes, mismatch.unwritten_bytes) == (1, 0)
    assert mismatch.command.startswith("STORE")
    report = str(mismatch)
    assert f"STORE[1] wrote DRAM int16 element 4 at byte {int(order[8]):#x}" in report
    assert f"RTL cycles {cycles[Unit.STORE][1][0]}..{cycles[Unit.STORE][1][1]}" in report


def test_the_command_first_in_execution_order_is_named_whatever_the_space(layer):
    lowered, expected = layer
    conv = _write_of(expected, Unit.CONV, 3)      # runs before every STORE; ACC comes after DRAM in space order
    last_store = _write_of(expected, Unit.STORE, 3)
    got = _rtl(expected, [("DRAM", int(last_store.bytes()[0])), ("ACC", conv.low + 4 * 5 + 2)],
               _cycles(lowered.program))
    mismatch = first_mismatch(lowered.program, expected, got)
    assert (mismatch.unit, mismatch.index, mismatch.space) == (Unit.CONV, 3, "ACC")
    assert (mismatch.element, mismatch.dtype, mismatch.differing_bytes) == (5, np.dtype(np.int32), 2)
    entry = np.arange(conv.low + 20, conv.low + 24)
    assert mismatch.golden == _value(expected.memory.buffers[Buffer.ACC], entry, np.int32)
    assert mismatch.rtl == _value(got.memory.buffers[Buffer.ACC], entry, np.int32)


def test_a_byte_is_blamed_on_its_last_writer(layer):
    lowered, expected = layer
    first, last = _write_of(expected, Unit.CONV, 0), _write_of(expected, Unit.CONV, 2)
    assert (first.space, first.low, first.high) == (last.space, last.low, last.high)
    mismatch = first_mismatch(lowered.program, expected, _rtl(expected, [("ACC", first.low)], _cycles(lowered.program)))
    assert (mismatch.unit, mismatch.index, mismatch.element) == (Unit.CONV, 2, 0)


def test_a_command_the_rtl_never_retired_says_so(layer):
    lowered, expected = layer
    cycles = _cycles(lowered.program)
    cycles[Unit.STORE] = cycles[Unit.STORE][:1]
    got = _rtl(expected, [("DRAM", int(_write_of(expected, Unit.STORE, 1).low))], cycles)
    mismatch = first_mismatch(lowered.program, expected, got)
    assert (mismatch.unit, mismatch.index, mismatch.cycles) == (Unit.STORE, 1, None)
    assert "the RTL never retired it" in str(mismatch)


def test_bytes_no_command_writes_are_reported_as_such(layer):
    lowered, expected = layer
    input_address = lowered.regions["input"][0] + 5             # read by LOADs, written by nobody
    acc_tail = expected.memory.buffers[Buffer.ACC].size - 7     # beyond both ACC halves the tiles use
    assert not any(w.low <= acc_tail < w.high for w in expected.writes if w.space == "ACC")
    got = _rtl(expected, [("DRAM", input_address), ("ACC", acc_tail)], _cycles(lowered.program))
    mismatch = first_mismatch(lowered.program, expected, got)
    assert (mismatch.unit, mismatch.space, mismatch.element, mismatch.dtype) == (None, "DRAM", input_address,
                                                                                  np.dtype(np.uint8))
    assert (mismatch.golden, mismatch.rtl) == (expected.memory.dram[input_address], got.memory.dram[input_address])
    assert (mismatch.differing_bytes, mismatch.unwritten_bytes) == (2, 2)
    assert "written by no command" in str(mismatch)

    only_acc = first_mismatch(lowered.program, expected, _rtl(expected, [("ACC", acc_tail)], _cycles(lowered.program)))
    assert (only_acc.space, only_acc.element, only_acc.dtype) == ("ACC", acc_tail // 4, np.dtype(np.int32))


def test_a_written_mismatch_outranks_unwritten_bytes_and_counts_them(layer):
    lowered, expected = layer
    store = _write_of(expected, Unit.STORE, 2)
    got = _rtl(expected, [("DRAM", lowered.regions["input"][0]), ("DRAM", int(store.low))], _cycles(lowered.program))
    mismatch = first_mismatch(lowered.program, expected, got)
    assert (mismatch.unit, mismatch.index, mismatch.element) == (Unit.STORE, 2, 0)
    assert (mismatch.differing_bytes, mismatch.unwritten_bytes) == (2, 1)


def test_the_write_log_follows_the_trace_with_or_without_hazard_checks(layer):
    lowered, expected = layer
    unchecked = interpret(lowered.program, lowered.memory(), check_hazards=False)
    assert unchecked.writes == expected.writes
    steps = {command: step for step, command in enumerate(expected.trace)}
    order = [steps[(w.unit, w.index)] for w in expected.writes]
    assert order == sorted(order)
    assert {(w.unit, w.index) for w in expected.writes} == {
        (unit, index) for unit, index in expected.trace if lowered.program.queues[unit][index].opcode != Opcode.FINISH}
