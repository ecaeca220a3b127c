"""The DRAM bridge against the testbench DRAM (sim/cosim/dram, exact AXI timing) in Amaranth's simulator: random
requests from three readers and the writer, every word read equal to the DRAM's content when its beat left
(writes included), per-reader order, the grant of every cycle equal to the Python model of the policy
(aipu.sim.timing.dram_bridge), the AXI trace within the DRAM's rules, the write acknowledgement count, each error
path, and Verilator's lint of its Verilog."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.sim import Simulator

from aipu.rtl.dram_bridge import DramBridge
from aipu.sim.cosim.dram.amaranth_dram import add_dram
from aipu.sim.cosim.dram.model import DramParams, ErrorRange, Resp
from aipu.sim.cosim.dram.trace import check_trace, trace_cycle
from aipu.sim.cosim.verilog import flat_ports
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.registers import FETCHER, ErrorCause
from aipu.sim.timing.dram_bridge import ReadArbiter
from tests.rtl.configs import SMALL
from tests.rtl.lint import assert_lint_clean

READERS = (FETCHER, Unit.LOAD, Unit.WDEC)
SIZE = 2048
PRELOAD = bytes((index * 37 + 11) & 0xFF for index in range(SIZE))


def dram_params(config, **options) -> DramParams:
    return DramParams(size=SIZE, data_bytes=config.dram.bytes_per_cycle, **{"read_latency": 5, **options})


@dataclass
class Traffic:
    """Random requests: each reader (and the writer) starts one with probability ``rate`` when idle and holds it
    until it is taken, as the WDEC fetcher does; ``script`` (cycle -> {port: word}) adds requests at set cycles.
    Words lie in the first ``words`` of DRAM, so reads meet earlier writes."""

    rng: np.random.Generator
    words: int
    rate: float = 0.5
    cycles: int = 300
    script: dict = field(default_factory=dict)

    def pick(self, port, cycle: int):
        if cycle in self.script and port in self.script[cycle]:
            return self.script[cycle][port]
        if self.cycles <= cycle or self.rng.random() >= self.rate:
            return None
        return int(self.rng.integers(self.words))


@dataclass
class Outcome:
    requests: list = field(default_factory=list)      # per cycle: bit i = reader i requests
    grants: list = field(default_factory=list)        # per cycle: reader granted or None
    events: list = field(default_factory=list)        # AXI handshakes and stalls
    received: dict = field(default_factory=dict)      # reader -> words delivered by data_valid
    arrivals: list = field(default_factory=list)      # (cycle, reader) of every data_valid
    expected: dict = field(default_factory=dict)      # reader -> the DRAM's word at each of its R beats
    written: list = field(default_factory=list)       # cycles in which a write word with a mask was taken
    write_stalls: int = 0                             # cycles with a write word offered and not taken
    idle: list = field(default_factory=list)          # write_idle per cycle
    error: tuple = ()                                 # (error, cause, unit, field) at the end
    memory: bytes = b""


class Bench:
    """One run's testbench: the requests waiting per port, the reads granted and the words written in order, and
    ``shadow``, the DRAM as the W handshakes leave it, which each R beat must carry."""

    def __init__(self, bridge: DramBridge, traffic: Traffic, params: DramParams, out: Outcome):
        self.bridge, self.traffic, self.params, self.out = bridge, traffic, params, out
        self.nbytes = params.data_bytes
        self.pending = {port: None for port in (*range(len(READERS)), "write")}
        self.granted, self.issued, self.beats, self.shadow = [], [], {"R": 0, "W": 0}, bytearray(PRELOAD)

    def offer(self, ctx, cycle: int) -> None:
        bridge, pending = self.bridge, self.pending
        for port, word in pending.items():
            pending[port] = word if word is not None else self.traffic.pick(port, cycle)
        for index, reader in enumerate(bridge.read):
            ctx.set(reader.valid, pending[index] is not None)
            ctx.set(reader.addr, pending[index] or 0)
        word = pending["write"]
        ctx.set(bridge.write.valid, word is not None)
        if word is not None:
            ctx.set(bridge.write.addr, word)
            ctx.set(bridge.write.data, int(self.traffic.rng.integers(1 << 62)) % (1 << 8 * self.nbytes))
            ctx.set(bridge.write.mask, 0 if word % 7 == 0 else int(self.traffic.rng.integers(1, 1 << self.nbytes)))

    def take(self, ctx, cycle: int) -> None:
        """What the bridge took and delivered in this cycle."""
        bridge, out, pending = self.bridge, self.out, self.pending
        out.requests.append(sum(1 << i for i in range(len(READERS)) if pending[i] is not None))
        grant = next((i for i, port in enumerate(bridge.read) if ctx.get(port.valid) and ctx.get(port.ready)), None)
        out.grants.append(grant)
        if grant is not None:
            self.granted.append((grant, pending[grant]))
            pending[grant] = None
        if pending["write"] is not None:
            taken = ctx.get(bridge.write.ready)
            out.write_stalls += not taken
            if taken and ctx.get(bridge.write.mask):
                self.issued.append((pending["write"], ctx.get(bridge.write.data), ctx.get(bridge.write.mask)))
                out.written.append(cycle)
            pending["write"] = None if taken else pending["write"]
        for index, port in enumerate(bridge.read):
            if ctx.get(port.data_valid):
                out.received[index].append(ctx.get(port.data))
                out.arrivals.append((cycle, index))
        out.idle.append(ctx.get(bridge.write_idle))

    def follow_axi(self, ctx, cycle: int) -> list[str]:
        """This cycle's AXI events; an R beat's expected word, then a W beat into ``shadow``."""
        bus, nbytes = self.bridge.m_axi, self.nbytes
        events = trace_cycle(cycle, lambda name: ctx.get(getattr(bus, name)))
        kinds = [event.split()[1] for event in events]
        if "R" in kinds:
            reader, word = self.granted[self.beats["R"]]
            self.beats["R"] += 1
            assert ctx.get(bus.rid) == reader
            self.out.expected[reader].append(int.from_bytes(self.shadow[word * nbytes:(word + 1) * nbytes], "little"))
        if "W" in kinds:
            word, data, mask = self.issued[self.beats["W"]]
            self.beats["W"] += 1
            for lane in range(nbytes if self.params.response(word * nbytes, 1) == Resp.OKAY else 0):
                if mask >> lane & 1:
                    self.shadow[word * nbytes + lane] = data >> 8 * lane & 0xFF
        self.out.events += events
        return events

    def waiting(self, ctx) -> bool:
        """Requests wait that the bridge will take (none does while it holds an error)."""
        return any(word is not None for word in self.pending.values()) and not ctx.get(self.bridge.error)


def run(config, traffic: Traffic, params: DramParams, *, dram_bytes: int = SIZE, settle: int = 40, **options):
    """The bridge of READERS under ``traffic`` until it has been quiet for ``settle`` cycles."""
    bridge = DramBridge(config, READERS, **options)
    sim = Simulator(bridge)
    sim.add_clock(1e-9)
    model = add_dram(sim, bridge.m_axi, params)
    model.write(0, PRELOAD)
    out = Outcome(received={i: [] for i in range(len(READERS))}, expected={i: [] for i in range(len(READERS))})
    bench = Bench(bridge, traffic, params, out)

    async def testbench(ctx):
        ctx.set(bridge.dram_bytes, dram_bytes)
        quiet, cycle = 0, 0
        while quiet < settle:
            bench.offer(ctx, cycle)
            bench.take(ctx, cycle)
            events = bench.follow_axi(ctx, cycle)
            quiet = 0 if bench.waiting(ctx) or cycle < traffic.cycles or events else quiet + 1
            await ctx.tick()
            cycle += 1
        out.error = tuple(ctx.get(signal) for signal in (bridge.error, bridge.error_cause, bridge.error_unit,
                                                          bridge.error_field))
        out.memory = model.read(0, SIZE)

    sim.add_testbench(testbench)
    sim.run()
    assert out.memory == bytes(bench.shadow)
    return out


def assert_follows_the_model(out: Outcome, params: DramParams, max_reads: int) -> None:
    """Every cycle's grant and every data_valid's cycle as the Python model of the policy gives them."""
    model = ReadArbiter(len(READERS), max_reads, params.read_latency, params.read_depth)
    assert out.grants == [model.step(vector) for vector in out.requests]
    assert out.arrivals == model.returns


def assert_writes_accounted(out: Outcome) -> None:
    """One AW and one B per word written, and ``write_idle`` high exactly while every word taken before the
    cycle has had its B."""
    assert count(out.events, "AW") == count(out.events, "B") == len(out.written) > 0
    answers = [int(event.split()[0]) for event in out.events if event.split()[1] == "B"]
    assert out.idle == [int(np.searchsorted(out.written, cycle) == np.searchsorted(answers, cycle))
                        for cycle in range(len(out.idle))]
    assert 0 in out.idle


def count(events, kind: str) -> int:
    return sum(event.split()[1] == kind for event in events)


@pytest.mark.parametrize("rate, options, dram", [(0.5, {}, {}), (0.9, {}, {}),
                                                 (0.9, {"max_reads": 3}, {}), (0.9, {}, {"read_depth": 2})],
                         ids=["half", "busy", "three-outstanding", "dram-depth-2"])
def test_random_traffic_reads_what_dram_holds_in_order_as_the_model_grants(rate, options, dram):
    config = SMALL
    params = dram_params(config, **dram)
    out = run(config, Traffic(np.random.default_rng(len(options) + int(rate * 10)), words=64, rate=rate), params,
              **options)
    assert out.error[0] == 0
    assert out.received == out.expected and sum(map(len, out.received.values())) == count(out.events, "AR")
    assert_follows_the_model(out, params, options.get("max_reads", config.dram.latency_cycles))
    assert check_trace(out.events, params) == []
    assert_writes_accounted(out)


def test_full_load_moves_a_read_and_a_write_every_cycle():
    """All three readers and the writer request every cycle: grants rotate 0, 1, 2, AR carries one read a cycle,
    and every write word is taken at once (the empty-mask ones dropped), its AW one cycle later, its W two."""
    out = run(SMALL, Traffic(np.random.default_rng(1), words=64, rate=1.0, cycles=60), dram_params(SMALL))
    granted = [grant for grant in out.grants if grant is not None]
    assert granted[:30] == [0, 1, 2] * 10
    ars = [int(event.split()[0]) for event in out.events if event.split()[1] == "AR"]
    assert ars[:40] == list(range(ars[0], ars[0] + 40))
    for kind, delay in (("AW", 1), ("W", 2)):
        assert [int(event.split()[0]) for event in out.events if event.split()[1] == kind] == \
            [cycle + delay for cycle in out.written]
    assert out.write_stalls == 0 and len(out.written) > 45


def single(script, params=None, **options):
    traffic = Traffic(np.random.default_rng(0), words=64, rate=0.0, cycles=0, script=script)
    return run(SMALL, traffic, params or dram_params(SMALL), **options)


def test_read_latency_is_the_drams_plus_two():
    """One read alone: granted in cycle 3, AR in 4, R in 4 + L, data_valid in 3 + L + 2."""
    params = dram_params(SMALL, read_latency=9)
    out = single({3: {1: 10}}, params)
    assert out.grants.index(1) == 3 and [event.split()[:2] for event in out.events] == [["4", "AR"], ["13", "R"]]
    assert out.arrivals == [(14, 1)]
    assert out.received[1] == out.expected[1] == [int.from_bytes(PRELOAD[40:44], "little")]


def test_slverr_on_a_read_names_the_reader_and_delivers_nothing():
    """The failed beat reaches nobody, nor does the next reader's beat, which arrives after the error."""
    params = dram_params(SMALL, errors=(ErrorRange(0x100, 0x104, Resp.SLVERR),))
    out = single({2: {2: 0x40}, 3: {0: 5}}, params)
    assert out.error == (1, ErrorCause.AXI_RESPONSE, Unit.WDEC, Resp.SLVERR)
    assert count(out.events, "R") == 2 and out.received == {0: [], 1: [], 2: []}


def test_decerr_on_a_write_names_the_writer():
    params = dram_params(SMALL, errors=(ErrorRange(0x200, 0x280, Resp.DECERR),))
    out = single({2: {"write": 0x81}}, params)
    assert out.error == (1, ErrorCause.AXI_RESPONSE, Unit.STORE, Resp.DECERR)
    assert out.idle[-1] == 1


@pytest.mark.parametrize("port, unit", [(0, FETCHER), (1, Unit.LOAD), ("write", Unit.STORE)])
def test_a_word_beyond_dram_bytes_never_reaches_axi(port, unit):
    out = single({2: {port: 256}, 6: {port: 255}}, dram_bytes=1024)    # 1024 bytes: words 0..255
    assert out.error == (1, ErrorCause.DRAM_RANGE, unit, 0)
    assert not any(event.split()[1] in ("AR", "AW") for event in out.events)


def test_the_first_error_is_kept_and_the_bridge_stops():
    """A read beyond dram_bytes, then an SLVERR read and a write: nothing more is granted or taken."""
    params = dram_params(SMALL, errors=(ErrorRange(0, 4, Resp.SLVERR),))
    out = single({2: {1: 300}, 3: {0: 0, "write": 1}}, params, dram_bytes=1024)
    assert out.error == (1, ErrorCause.DRAM_RANGE, Unit.LOAD, 0)
    assert out.grants.count(None) == len(out.grants) and out.written == []


def test_clear_forgets_the_error_and_resumes():
    bridge = DramBridge(SMALL, READERS)
    sim = Simulator(bridge)
    sim.add_clock(1e-9)
    add_dram(sim, bridge.m_axi, dram_params(SMALL))
    seen = []

    async def bench(ctx):
        ctx.set(bridge.dram_bytes, 64)
        reader = bridge.read[0]
        ctx.set(reader.valid, 1)
        ctx.set(reader.addr, 16)
        await ctx.tick()
        ctx.set(reader.addr, 3)
        seen.append((ctx.get(bridge.error), ctx.get(reader.ready)))
        ctx.set(bridge.clear, 1)
        await ctx.tick()
        ctx.set(bridge.clear, 0)
        seen.append((ctx.get(bridge.error), ctx.get(reader.ready)))

    sim.add_testbench(bench)
    sim.run()
    assert seen == [(1, 0), (0, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_long_random_traffic(seed):
    rng = np.random.default_rng(100 + seed)
    config = SMALL
    params = dram_params(config, read_latency=int(rng.integers(1, 12)), write_latency=int(rng.integers(1, 6)),
                         read_depth=int(rng.integers(1, 8)), write_depth=int(rng.integers(1, 8)))
    max_reads = int(rng.integers(1, 16))
    out = run(config, Traffic(rng, words=128, rate=float(rng.uniform(0.2, 1.0)), cycles=3000), params,
              max_reads=max_reads, max_writes=int(rng.integers(1, 8)))
    assert out.error[0] == 0 and out.received == out.expected
    assert_follows_the_model(out, params, max_reads)
    assert check_trace(out.events, params) == []
    assert_writes_accounted(out)


# As tests/rtl/test_host_verilog.py explains, plus what Amaranth's output has beyond that block's: `x == 0` written
# `!x` on a multi-bit x and a word select as a shift of the concatenated words, both truncated to the result's width
# on purpose (WIDTHTRUNC), and the W queue's module in the top's file (DECLFILENAME).
ACCEPTED_LINT = ("PROCASSINIT", "WIDTHEXPAND", "UNUSEDSIGNAL", "WIDTHTRUNC", "DECLFILENAME")


@pytest.mark.parametrize("config", [DEFAULT, SMALL], ids=["default", "small"])
def test_verilator_lint_finds_nothing_else(config, tmp_path):
    bridge = DramBridge(config, READERS)
    ports = flat_ports(bridge, "_")
    assert {"m_axi_araddr", "m_axi_rready", "m_axi_wstrb", "read_2_data_valid", "write_mask"} <= set(ports)
    source = tmp_path / "aipu_dram_bridge.v"
    source.write_text(verilog.convert(bridge, name="aipu_dram_bridge", ports=ports))
    assert_lint_clean(source, "aipu_dram_bridge", ACCEPTED_LINT)
