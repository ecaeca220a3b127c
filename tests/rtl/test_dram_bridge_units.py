"""The DMA units behind the DRAM bridge (rtl/dram_bridge.py) and on DRAM ports that refuse and answer late: WDEC's
fetcher takes refusals and any latency in its stride; STORE writes what the interpreter writes, in its formula's
cycles, alone or beside busy readers, and holds a refused word; LOAD matches the interpreter (and its formula)
alone on the bridge, and the interpreter among busy readers and under random refusals and latencies."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from aipu.rtl.dma import LoadUnit, StoreUnit
from aipu.rtl.dram_bridge import DramBridge
from aipu.rtl.ports import word_bytes
from aipu.rtl.wdec_parts.fetcher import WordFetcher
from aipu.sim.cosim.dram.amaranth_dram import add_dram
from aipu.sim.cosim.dram.model import DramParams
from aipu.sim.cosim.stimulus.dma import chained_program, random_load, random_memory, random_store
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import DEFAULT, Buffer, DType
from aipu.sim.machine.isa import LOADABLE_BUFFERS, Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command
from aipu.sim.machine.registers import FETCHER
from aipu.sim.timing.dma import command_cycles
from tests.rtl.configs import SMALL

READERS = (FETCHER, Unit.LOAD, Unit.WDEC)
CONFIG = SMALL          # DRAM latency 7 = the testbench DRAM's 5 + the bridge's 2
PARAMS = DramParams(size=4096, data_bytes=CONFIG.dram.bytes_per_cycle, read_latency=CONFIG.dram.latency_cycles - 2)
ALL = (1 << len(Unit)) - 1


class Rig(Elaboratable):
    """``unit``'s ``port`` on the bridge's reader ``slot`` (None: on its write port); the testbench drives the
    other readers."""

    def __init__(self, unit, port, slot: int | None):
        self.unit, self.port, self.slot = unit, port, slot
        self.bridge = DramBridge(CONFIG, READERS)

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.unit, m.submodules.bridge = self.unit, self.bridge
        wiring.connect(m, self.port, self.bridge.write if self.slot is None else self.bridge.read[self.slot])
        return m


def simulate(rig: Rig, dram: bytes, bench, rate: float, seed: int = 0) -> bytes:
    """``bench(ctx)`` while the readers other than the rig's request random words at ``rate`` (held until
    taken), against the DRAM preloaded with ``dram``; the DRAM's bytes at the end."""
    sim = Simulator(rig)
    sim.add_clock(1e-9)
    model = add_dram(sim, rig.bridge.m_axi, PARAMS)
    model.write(0, dram)
    rng = np.random.default_rng(seed)

    async def rivals(ctx):
        ctx.set(rig.bridge.dram_bytes, PARAMS.size)
        others = [port for index, port in enumerate(rig.bridge.read) if index != rig.slot]
        idle = [True] * len(others)
        while True:
            for index, port in enumerate(others):
                if idle[index]:
                    ctx.set(port.valid, rng.random() < rate)
                    ctx.set(port.addr, int(rng.integers(PARAMS.size // PARAMS.data_bytes)))
                idle[index] = not ctx.get(port.valid) or ctx.get(port.ready)
            await ctx.tick()

    sim.add_testbench(rivals, background=True)
    sim.add_testbench(bench)
    sim.run()
    return model.read(0, PARAMS.size)


def on_bridge(rate: float):
    """LOAD on the bridge's LOAD slot, the other readers requesting at ``rate``."""
    def attach(load, dram: bytes, bench, seed: int) -> None:
        simulate(Rig(load, load.dram_read, READERS.index(Unit.LOAD)), dram, bench, rate, seed)
    return attach


def served(refuse: float, late: float, earliest: int, latest: int):
    """LOAD's port served directly: a request refused with probability ``refuse``; each response
    ``latency_cycles`` after its request or, with probability ``late``, ``earliest``..``latest`` cycles after
    it, in order, one a cycle (so a late one bunches those behind it)."""
    def attach(load, dram: bytes, bench, seed: int) -> None:
        port, nbytes, rng = load.dram_read, load.config.dram.bytes_per_cycle, np.random.default_rng(seed)
        sim = Simulator(load)
        sim.add_clock(1e-9)

        async def serve(ctx):
            due, last, cycle = {}, -1, 0
            while True:
                ctx.set(port.ready, rng.random() >= refuse)
                word = due.pop(cycle, None)
                ctx.set(port.data_valid, word is not None)
                if word is not None:
                    ctx.set(port.data, int.from_bytes(dram[word * nbytes:(word + 1) * nbytes], "little"))
                if ctx.get(port.valid) and ctx.get(port.ready):
                    delay = load.config.dram.latency_cycles
                    if rng.random() < late:
                        delay = int(rng.integers(earliest, latest + 1))
                    last = max(cycle + delay, last + 1)
                    due[last] = ctx.get(port.addr)
                await ctx.tick()
                cycle += 1

        sim.add_testbench(serve, background=True)
        sim.add_testbench(bench)
        sim.run()
    return attach


def run_load(command: Command, seed: int, attach, config=CONFIG) -> tuple[bool, int | None]:
    """(the buffer equals the interpreter's, cycles from start to retire or None: never retired)."""
    memory, target = random_memory(config, np.random.default_rng(seed)), Buffer(command.buffer)
    expected = run(chained_program(config, [command]), memory).memory.buffers[target]
    load = LoadUnit(config)
    buffer = bytearray(memory.buffers[target].tobytes())
    port = getattr(load, f"{target.name.lower()}_write")
    nbytes = len(port.mask)
    outcome = {}

    async def bench(ctx):
        for name, value in (("pop_available", ALL), ("push_room", ALL), ("others_drained", 1)):
            ctx.set(getattr(load, name), value)
        ctx.set(load.command.payload, int.from_bytes(command.encode(config), "little"))
        ctx.set(load.command.valid, 1)
        await ctx.tick()                        # the unit takes the word in its first cycle
        ctx.set(load.command.valid, 0)
        for cycle in range(1, 8 * command_cycles(config, command) + 50):
            if ctx.get(load.start):
                outcome["start"] = cycle
            if ctx.get(port.en):
                address, data, mask = ctx.get(port.addr), ctx.get(port.data), ctx.get(port.mask)
                for lane in range(nbytes):
                    if mask >> lane & 1:
                        buffer[address * nbytes + lane] = data >> 8 * lane & 0xFF
            if ctx.get(load.retire):
                outcome["cycles"] = cycle - outcome["start"]
                break
            await ctx.tick()

    attach(load, memory.dram.tobytes(), bench, seed)
    return bytes(buffer) == expected.tobytes(), outcome.get("cycles")


def loads(count: int, seed: int, config=CONFIG) -> list[Command]:
    rng = np.random.default_rng(seed)
    return [random_load(config, rng, size=6) for _ in range(count)]


@pytest.mark.parametrize("index, command", list(enumerate(loads(4, 1))))
def test_load_alone_on_the_bridge_matches_the_interpreter_and_its_formula(index, command):
    assert run_load(command, index, on_bridge(0.0)) == (True, command_cycles(CONFIG, command))


LONG_LOAD = Command.make(Opcode.LOAD, buffer=Buffer.ACT, sram_addr=3, dram_addr=7, elem_type=DType.INT8,
                         y_size=4, x_size=3, run=9, dram_y_stride=64, dram_x_stride=13, pad_left=1)


def test_load_among_other_readers_matches_the_interpreter():
    """Refused requests wait for their grant: the tile is right, later than the formula."""
    correct, cycles = run_load(LONG_LOAD, 3, on_bridge(0.6))
    assert correct and cycles > command_cycles(CONFIG, LONG_LOAD)


def test_load_with_late_responses_matches_the_interpreter():
    """Responses 1..4 cycles late bunch behind each other: the response queue holds them."""
    latency = CONFIG.dram.latency_cycles
    for index, command in enumerate(loads(10, 9)):
        assert run_load(command, index, served(0.0, 0.4, latency + 1, latency + 4))[0], command


@pytest.mark.parametrize("config, count", [(SMALL, 12), (DEFAULT, 2)], ids=["small", "default"])
def test_load_under_random_refusals_and_latencies_matches_the_interpreter(config, count):
    """Half the requests refused, half the responses anywhere from 1 to twice the latency after their request."""
    latency = config.dram.latency_cycles
    for index, command in enumerate(loads(count, 11, config)):
        correct, cycles = run_load(command, index, served(0.5, 0.5, 1, 2 * latency), config)
        assert correct and cycles is not None, command


def test_the_fetcher_takes_refusals_and_variable_latency_in_its_stride():
    """WDEC's fetcher as reader 2 among two busy readers: every word of the span, in order, each once."""
    fetcher = WordFetcher(CONFIG)
    rig = Rig(fetcher, fetcher.dram_read, READERS.index(Unit.WDEC))
    dram = np.random.default_rng(5).integers(0, 256, PARAMS.size, dtype=np.uint8).tobytes()
    nbytes = CONFIG.dram.bytes_per_cycle
    dram_addr, length = 1001, 301
    first, last = dram_addr // nbytes, (dram_addr + length - 1) // nbytes
    handed = []
    rng = np.random.default_rng(6)

    async def bench(ctx):
        ctx.set(fetcher.span.dram_addr, dram_addr)
        ctx.set(fetcher.span.length, length)
        ctx.set(fetcher.span.begin, 1)
        await ctx.tick()
        ctx.set(fetcher.span.begin, 0)
        for _ in range(3000):
            ctx.set(fetcher.words.ready, rng.random() < 0.7)
            if ctx.get(fetcher.words.valid) and ctx.get(fetcher.words.ready):
                handed.append(ctx.get(fetcher.words.payload))
            if ctx.get(fetcher.drained):
                break
            await ctx.tick()

    simulate(rig, dram, bench, rate=0.8)
    assert handed == [int.from_bytes(dram[word * nbytes:(word + 1) * nbytes], "little")
                      for word in range(first, last + 1)]


@pytest.mark.parametrize("buffer", LOADABLE_BUFFERS)
def test_every_loadable_buffer_alone_on_the_bridge(buffer):
    command = Command.make(Opcode.LOAD, buffer=buffer, sram_addr=5, dram_addr=33, elem_type=DType.INT16,
                           y_size=2, x_size=2, run=3, dram_y_stride=40, dram_x_stride=9, pad_top=1, pad_right=1)
    assert run_load(command, 2, on_bridge(0.0)) == (True, command_cycles(CONFIG, command))


def store_bench(store: StoreUnit, commands: list[Command], out: bytes, cycles: list[int]):
    """A testbench running ``commands`` on ``store`` one after the other, serving its OUT reads from ``out``;
    each command's cycles from start to retire go to ``cycles``."""
    config = store.config
    nbytes = word_bytes(config, Buffer.OUT)

    async def bench(ctx):
        for name, value in (("pop_available", ALL), ("push_room", ALL), ("others_drained", 1)):
            ctx.set(getattr(store, name), value)
        for command in commands:
            ctx.set(store.command.payload, int.from_bytes(command.encode(config), "little"))
            ctx.set(store.command.valid, 1)
            while not ctx.get(store.command.ready):        # the retire cycle of the command before
                await ctx.tick()
            await ctx.tick()
            ctx.set(store.command.valid, 0)
            start = None
            for cycle in range(1, 8 * command_cycles(config, command) + 50):
                start = cycle if ctx.get(store.start) else start
                if ctx.get(store.retire):
                    cycles.append(cycle - start)
                    break
                read = ctx.get(store.out_read.en), ctx.get(store.out_read.addr)
                await ctx.tick()
                if read[0]:
                    ctx.set(store.out_read.data, int.from_bytes(out[read[1] * nbytes:(read[1] + 1) * nbytes], "little"))
        await ctx.tick()            # the last word is taken in the retire cycle
    return bench


def stores(seed: int) -> tuple[Memory, list[Command], bytes]:
    """A random memory, three STOREs, and the DRAM the interpreter leaves."""
    rng = np.random.default_rng(seed)
    memory = random_memory(CONFIG, rng)
    commands = [random_store(CONFIG, rng, size=6) for _ in range(3)]
    return memory, commands, run(chained_program(CONFIG, commands), memory).memory.dram.tobytes()


@pytest.mark.parametrize("rate", [0.0, 0.9], ids=["alone", "among-readers"])
def test_store_through_the_bridge_writes_what_the_interpreter_writes(rate):
    """STORE, the writer, with the readers idle or busy (reads and writes use separate channels): DRAM equals the
    interpreter's once ``write_idle`` rises after the retire, and the cycles are the formula's."""
    memory, commands, expected = stores(4)
    store = StoreUnit(CONFIG)
    rig = Rig(store, store.dram_write, None)
    cycles = []
    run_commands = store_bench(store, commands, memory.buffers[Buffer.OUT].tobytes(), cycles)

    async def bench(ctx):
        await run_commands(ctx)
        await ctx.tick().until(rig.bridge.write_idle)

    assert simulate(rig, memory.dram.tobytes(), bench, rate) == expected
    assert cycles == [command_cycles(CONFIG, command) for command in commands]


def test_store_holds_a_refused_word_until_it_is_taken():
    """STORE's port ready half the cycles: DRAM equals the interpreter's; commands take longer than their formula."""
    memory, commands, expected = stores(8)
    store = StoreUnit(CONFIG)
    dram, nbytes, rng = bytearray(memory.dram.tobytes()), CONFIG.dram.bytes_per_cycle, np.random.default_rng(8)
    port = store.dram_write
    sim = Simulator(store)
    sim.add_clock(1e-9)
    cycles = []

    async def serve(ctx):          # samples at the edge: the OUT data the bench drives after it is in
        ctx.set(port.ready, 1)
        async for _, _, valid, ready, address, data, mask in ctx.tick().sample(
                port.valid, port.ready, port.addr, port.data, port.mask):
            if valid and ready:
                for lane in range(nbytes):
                    if mask >> lane & 1:
                        dram[address * nbytes + lane] = data >> 8 * lane & 0xFF
            ctx.set(port.ready, rng.random() < 0.5)

    sim.add_testbench(serve, background=True)
    sim.add_testbench(store_bench(store, commands, memory.buffers[Buffer.OUT].tobytes(), cycles))
    sim.run()
    assert bytes(dram) == expected
    formula = [command_cycles(CONFIG, command) for command in commands]
    assert len(cycles) == len(commands) and sum(cycles) > sum(formula)
    assert all(spent >= least for spent, least in zip(cycles, formula))
