"""HostRegisters under Amaranth's simulator: every register's reset value is the table's, RW registers keep what
the byte strobes write, IRQ_STATUS clears by writing 1, START pulses once, a write while busy is refused and
stops the NPU, read-only and unmapped offsets answer SLVERR, the core's error and done end the run with the
interrupt, counters count while busy and saturate, CYCLES reads consistently in two halves; and random traffic
agrees with the model of the table (tests/rtl/host_model.py) cycle by cycle."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.host import HostRegisters
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.registers import (BY_NAME, BY_OFFSET, REGISTERS, UNIT_COUNTERS, Access, ErrorCause, Response,
                                        counter_name)
from tests.rtl.configs import WIDE_DRAM
from tests.rtl.host_bus import Traffic, read, run, set_core, write
from tests.rtl.host_model import CoreInputs, HostModel, place, strobe_bits

CONFIGS = pytest.mark.parametrize("config", [DEFAULT, WIDE_DRAM], ids=["default", "wide-dram"])
UNMAPPED = [offset for offset in (0x024, 0x03C, 0x054, 0x0FC, 0x170, 0xFFC) if offset not in BY_OFFSET]
OFFSET = {register.name: register.offset for register in REGISTERS}


def pulse_monitor(dut, seen: dict):
    """A background testbench recording the cycles ``start`` and ``abort`` pulse and the cycles ``busy`` is high."""
    async def monitor(ctx):
        cycle = 0
        async for _, _, start, abort, busy in ctx.tick().sample(dut.start, dut.abort, dut.busy):
            for name, value in (("start", start), ("abort", abort), ("busy", busy)):
                if value:
                    seen.setdefault(name, []).append(cycle)
            cycle += 1
    return monitor


def simulate(config, body, seen: dict | None = None) -> dict:
    """Run ``body(ctx, dut)``; returns the pulses and busy cycles the monitor saw (into ``seen`` as they come)."""
    dut, seen = HostRegisters(config), {} if seen is None else seen

    async def testbench(ctx):
        await body(ctx, dut)

    run(dut, testbench, pulse_monitor(dut, seen))
    return seen


async def start(ctx, dut) -> None:
    assert await write(ctx, dut, OFFSET["CONTROL"], 1) == Response.OKAY


async def status(ctx, dut) -> dict[str, int]:
    _, word = await read(ctx, dut, OFFSET["STATUS"])
    return {fld.name: (word >> fld.lsb) & 1 for fld in BY_NAME["STATUS"].fields}


@CONFIGS
def test_every_register_resets_to_the_table_and_unmapped_reads_answer_slverr(config):
    async def body(ctx, dut):
        for register in REGISTERS:
            assert await read(ctx, dut, register.offset) == (Response.OKAY, register.reset_value(config)), register.name
        for offset in UNMAPPED:
            assert await read(ctx, dut, offset) == (Response.SLVERR, 0)
    simulate(config, body)


@CONFIGS
def test_rw_registers_keep_the_strobed_bytes_of_their_fields(config):
    rng = np.random.default_rng(1)
    writable = [r for r in REGISTERS if r.access is Access.RW]

    async def body(ctx, dut):
        for register in writable:
            held = register.reset_value(config)
            for strobe in [0b1111, 0b0000, *rng.integers(0, 16, 6)]:
                data = int(rng.integers(0, 1 << 32))
                assert await write(ctx, dut, register.offset + int(rng.integers(0, 4)), data, int(strobe)) == 0
                keep = strobe_bits(int(strobe)) & register.mask(config)
                held = (held & ~keep) | (data & keep)
                assert await read(ctx, dut, register.offset) == (Response.OKAY, held), register.name
        for name, output in (("PROGRAM_BASE", dut.program_base), ("DRAM_BYTES", dut.dram_bytes)):
            value = await read_pair(ctx, dut, name)
            assert ctx.get(output) == value
    simulate(config, body)


async def read_pair(ctx, dut, name: str) -> int:
    _, low = await read(ctx, dut, OFFSET[f"{name}_LO"])
    _, high = await read(ctx, dut, OFFSET[f"{name}_HI"])
    return low | high << 32


def test_start_pulses_once_per_start_and_only_for_a_one_in_its_byte():
    async def body(ctx, dut):
        assert await write(ctx, dut, OFFSET["CONTROL"], 0) == Response.OKAY
        assert await write(ctx, dut, OFFSET["CONTROL"], 1, strobe=0b1110) == Response.OKAY
        assert await status(ctx, dut) == {"BUSY": 0, "DONE": 0, "ERROR": 0}
        await start(ctx, dut)
        assert await status(ctx, dut) == {"BUSY": 1, "DONE": 0, "ERROR": 0}
        assert await read(ctx, dut, OFFSET["CONTROL"]) == (Response.OKAY, 0)
    seen = simulate(DEFAULT, body)
    assert len(seen["start"]) == 1 and "abort" not in seen
    assert seen["busy"][0] == seen["start"][0] + 1


def test_done_ends_the_run_and_raises_the_enabled_interrupt_until_cleared():
    done = place("IRQ_STATUS", "DONE", 1)

    async def body(ctx, dut):
        await start(ctx, dut)
        set_core(ctx, dut, CoreInputs(done=True))
        await ctx.tick()
        set_core(ctx, dut, CoreInputs())
        assert await status(ctx, dut) == {"BUSY": 0, "DONE": 1, "ERROR": 0}
        assert await read(ctx, dut, OFFSET["IRQ_STATUS"]) == (Response.OKAY, done)
        assert not ctx.get(dut.irq)                                   # not enabled yet
        assert await write(ctx, dut, OFFSET["IRQ_ENABLE"], done) == Response.OKAY
        assert ctx.get(dut.irq)
        assert await write(ctx, dut, OFFSET["IRQ_STATUS"], ~done & 0xFFFF_FFFF) == Response.OKAY   # 0 keeps
        assert ctx.get(dut.irq)
        assert await write(ctx, dut, OFFSET["IRQ_STATUS"], done) == Response.OKAY
        assert not ctx.get(dut.irq)
        assert await read(ctx, dut, OFFSET["IRQ_STATUS"]) == (Response.OKAY, 0)
        await start(ctx, dut)                                         # a new run clears DONE
        assert await status(ctx, dut) == {"BUSY": 1, "DONE": 0, "ERROR": 0}
    simulate(DEFAULT, body)


def test_an_event_in_the_cycle_a_write_clears_its_bit_leaves_it_set():
    """The write takes effect in the cycle after its address and data handshakes (no response pending)."""
    done = place("IRQ_STATUS", "DONE", 1)

    async def body(ctx, dut):
        await start(ctx, dut)
        bus = dut.s_axil
        for name, value in (("awaddr", OFFSET["IRQ_STATUS"]), ("wdata", done), ("wstrb", 0b1111), ("awvalid", 1),
                            ("wvalid", 1), ("bready", 1)):
            ctx.set(getattr(bus, name), value)
        await ctx.tick()                                             # both handshakes
        ctx.set(bus.awvalid, 0)
        ctx.set(bus.wvalid, 0)
        set_core(ctx, dut, CoreInputs(done=True))                    # the cycle the write takes effect
        await ctx.tick()
        set_core(ctx, dut, CoreInputs())
        assert ctx.get(bus.bvalid) and ctx.get(bus.bresp) == Response.OKAY
        await ctx.tick()
        assert await read(ctx, dut, OFFSET["IRQ_STATUS"]) == (Response.OKAY, done)
    simulate(DEFAULT, body)


@pytest.mark.parametrize("name", ["PROGRAM_BASE_LO", "DRAM_BYTES_HI", "CONTROL"])
def test_a_write_while_busy_is_refused_and_stops_the_npu_by_name(name):
    async def body(ctx, dut):
        before = await read(ctx, dut, OFFSET[name])
        await start(ctx, dut)
        assert await write(ctx, dut, OFFSET["IRQ_ENABLE"], 0b11) == Response.OKAY      # allowed while busy
        assert await write(ctx, dut, OFFSET[name] + 2, 0xFFFF_FFFF) == Response.SLVERR
        assert await read(ctx, dut, OFFSET[name]) == before
        assert await status(ctx, dut) == {"BUSY": 0, "DONE": 0, "ERROR": 1}
        assert await read(ctx, dut, OFFSET["ERROR"]) == (
            Response.OKAY, place("ERROR", "CAUSE", ErrorCause.REGISTER_WRITE_WHILE_BUSY) | place("ERROR", "FIELD",
                                                                                                OFFSET[name]))
        assert ctx.get(dut.irq)
    seen = simulate(DEFAULT, body)
    assert len(seen["abort"]) == 1 and len(seen["start"]) == 1


def test_read_only_and_unmapped_writes_answer_slverr_and_change_nothing_even_while_busy():
    read_only = [r for r in REGISTERS if r.access is Access.RO]

    async def body(ctx, dut):
        await start(ctx, dut)
        for offset in [r.offset for r in read_only] + UNMAPPED:
            assert await write(ctx, dut, offset, 0xFFFF_FFFF) == Response.SLVERR
        assert (await status(ctx, dut))["BUSY"] == 1
        for register in read_only:
            if register.constant:
                assert await read(ctx, dut, register.offset) == (Response.OKAY, register.reset_value(DEFAULT))
    seen = simulate(DEFAULT, body)
    assert "abort" not in seen


def test_the_first_core_error_is_latched_and_later_reports_are_ignored():
    first = (ErrorCause.ILLEGAL_COMMAND, Unit.CONV, 5)

    async def body(ctx, dut):
        await start(ctx, dut)
        for inputs in (CoreInputs(error=first), CoreInputs(error=(ErrorCause.DRAM_RANGE, Unit.STORE, 0)),
                       CoreInputs(done=True), CoreInputs()):
            set_core(ctx, dut, inputs)
            await ctx.tick()
        assert await status(ctx, dut) == {"BUSY": 0, "DONE": 0, "ERROR": 1}
        latched = place("ERROR", "CAUSE", first[0]) | place("ERROR", "UNIT", first[1]) | place("ERROR", "FIELD", 5)
        assert await read(ctx, dut, OFFSET["ERROR"]) == (Response.OKAY, latched)
        assert await read(ctx, dut, OFFSET["IRQ_STATUS"]) == (Response.OKAY, place("IRQ_STATUS", "ERROR", 1))
        await start(ctx, dut)                                         # a new run clears ERROR
        assert await read(ctx, dut, OFFSET["ERROR"]) == (Response.OKAY, 0)
    simulate(DEFAULT, body)


def test_counters_count_their_inputs_while_busy_and_cycles_the_busy_cycles():
    pattern = {"busy": 1 << Unit.CONV | 1 << Unit.LOAD, "dram_stall": 1 << Unit.LOAD, "wait": 1 << Unit.STORE,
               "retire": 1 << Unit.POOL}
    seen = {}

    async def body(ctx, dut):
        set_core(ctx, dut, CoreInputs(units=pattern))
        await ctx.tick().repeat(3)                     # not running: not counted
        await start(ctx, dut)                          # counted from the cycle after the START commits
        set_core(ctx, dut, CoreInputs(units=pattern, done=True))
        await ctx.tick()
        set_core(ctx, dut, CoreInputs(units=pattern))
        await ctx.tick().repeat(3)                     # done: not counted
        values = {r.name: (await read(ctx, dut, r.offset))[1] for r in REGISTERS if not r.constant}
        busy = len(seen["busy"])
        assert busy == 2                               # the cycle the START answers, the done cycle
        assert values["CYCLES_LO"] == busy and values["CYCLES_HI"] == 0
        for unit in Unit:
            for counter in UNIT_COUNTERS:
                expected = busy if pattern.get(counter.input, 0) >> unit & 1 else 0
                assert values[counter_name(unit, counter)] == expected, counter_name(unit, counter)

    simulate(DEFAULT, body, seen)


def test_cycles_lo_latches_the_high_word_and_counters_saturate():
    saturated = (1 << 32) - 1

    async def body(ctx, dut):
        await start(ctx, dut)
        ctx.set(dut.cycles, (5 << 32) | 0xFFFF_FFF0)
        ctx.set(dut.counters["CONV_BUSY"], saturated - 1)
        set_core(ctx, dut, CoreInputs(units={"busy": 1 << Unit.CONV}))
        _, low = await read(ctx, dut, OFFSET["CYCLES_LO"])
        await ctx.tick().repeat(40)                               # the low word wraps into 6 << 32
        assert await read(ctx, dut, OFFSET["CYCLES_HI"]) == (Response.OKAY, 5)
        _, low_again = await read(ctx, dut, OFFSET["CYCLES_LO"])
        assert low >= 0xFFFF_FFF0 and low_again < 0x100
        assert await read(ctx, dut, OFFSET["CYCLES_HI"]) == (Response.OKAY, 6)
        assert await read(ctx, dut, OFFSET["CONV_BUSY"]) == (Response.OKAY, saturated)
    simulate(DEFAULT, body)


def _random_writes(rng, count: int) -> list[tuple[int, int, int]]:
    """Mostly CONTROL (a run is started again and again) and the registers writable while busy; the other
    writable ones, read-only and unmapped offsets less often; some unaligned."""
    offsets = [r.offset for r in REGISTERS] + UNMAPPED
    register = {o: BY_OFFSET.get(o) for o in offsets}
    weights = np.array([30.0 if o == OFFSET["CONTROL"] else 10.0 if register[o] and register[o].writable_while_busy
                        else 3.0 if register[o] and register[o].writable else 0.5 for o in offsets])
    chosen = rng.choice(offsets, size=count, p=weights / weights.sum())
    return [(int(o) + int(rng.integers(0, 4)), int(rng.integers(0, 1 << 32)) | (1 if rng.random() < 0.5 else 0),
             int(rng.integers(0, 16))) for o in chosen]


def _random_core(rng, model: HostModel):
    def core(cycle: int) -> CoreInputs:
        units = {name: int(rng.integers(0, 1 << len(Unit))) for name in ("busy", "dram_stall", "wait", "retire")}
        if rng.random() >= 0.05:
            return CoreInputs(units=units)
        if rng.random() < 0.5:
            return CoreInputs(units=units, done=True)
        return CoreInputs(units=units, error=(int(rng.choice(list(ErrorCause))), int(rng.integers(0, len(Unit))),
                                              int(rng.integers(0, 1 << 16))))
    return core


@pytest.mark.parametrize("seed, stall", [(0, 0.0), (1, 0.3), (2, 0.6)])
def test_random_traffic_agrees_with_the_model_of_the_table(seed, stall):
    """~300 transactions per seed: back to back (stall 0) or with random valid delays and ready stalls."""
    rng = np.random.default_rng(seed)
    config = WIDE_DRAM if seed % 2 else DEFAULT
    dut, model = HostRegisters(config), HostModel(config)
    writes = _random_writes(rng, 150)
    reads = [int(rng.choice([r.offset for r in REGISTERS] + UNMAPPED)) + int(rng.integers(0, 4)) for _ in range(150)]
    traffic = Traffic(dut, model, rng, stall=stall, core=_random_core(rng, model))

    async def testbench(ctx):
        await traffic.run(ctx, writes, reads, max_cycles=20_000)

    run(dut, testbench)
    assert not traffic.mismatches, "\n".join(traffic.mismatches)
    assert {Response.OKAY, Response.SLVERR} <= set(traffic.responses["write"])
    assert model.pulses.count("start") > 3 and "abort" in model.pulses, model.pulses
