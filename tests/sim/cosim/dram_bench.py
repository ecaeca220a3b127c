"""A free-running random AXI4 master and the set-ups that run it against each form of the testbench DRAM.

:class:`TrafficMaster` issues ``reads`` and ``writes`` INCR bursts (lengths 0..15, one in 16 of 255 beats;
start addresses in ``region`` bytes, reads unaligned within a beat, never across 4 KiB), reads and writes
interleaved over the same bytes, AW and W independent (W may come with or before its AW), random partial
strobes, and random ``rready``/``bready`` backpressure; ``stream`` instead issues single-beat or long reads
back to back with every ready high. All randomness is two xorshift64 registers: one seed, one run.
``cycle`` counts the edges with ``enable`` high, the traces' cycle numbers.
"""
from __future__ import annotations

from amaranth.back import verilog as amaranth_verilog
from amaranth.hdl import Cat, ClockDomain, ClockSignal, Elaboratable, Fragment, Module, Mux, Signal
from amaranth.hdl._ir import PortDirection
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from aipu.rtl.axi import AxiSignature
from aipu.sim.cosim.dram.amaranth_dram import add_dram
from aipu.sim.cosim.dram.model import DramParams
from aipu.sim.cosim.dram.rtl import AxiDram
from aipu.sim.cosim.dram.trace import trace_cycle

ADDRESS_BITS, ID_BITS, CYCLE_BITS = 32, 4, 32
PREFIX = "m_axi"


def xorshift(m: Module, seed: int, name: str) -> Signal:
    state = Signal(64, init=seed, name=name)
    a = state ^ (state << 13)[:64]
    b = a ^ (a >> 7)
    m.d.sync += state.eq(b ^ (b << 17)[:64])
    return state


class TrafficMaster(wiring.Component):
    def __init__(self, params: DramParams, *, reads: int, writes: int, region: int, seed: int = 1,
                 backpressure: bool = True, stream: int | None = None):
        self.params, self.reads, self.writes, self.region = params, reads, writes, region
        self.seed, self.backpressure, self.stream = seed, backpressure, stream
        super().__init__({"enable": In(1), "done": Out(1), "cycle": Out(CYCLE_BITS),
                          "m_axi": Out(AxiSignature(ADDRESS_BITS, 8 * params.data_bytes, ID_BITS))})

    def _burst(self, random: Signal, aligned: bool):
        """(address, len) of a random burst: len 0..15 or (one in 16) 255, inside one 4 KiB page of the region."""
        width = self.params.data_bytes
        per_page = 4096 // width
        if self.stream is not None:
            return 0, self.stream
        m_len = Mux((random[4:8] == 0) & (per_page >= 256), 255, random[:4])
        offset = random[8:20] % per_page
        pages = self.region // 4096
        page = random[20:40] % pages
        start = Mux(offset + m_len + 1 > per_page, per_page - 1 - m_len, offset)
        low = 0 if aligned else random[40:40 + self.params.size_code]
        return (page * 4096 + start * width + low)[:ADDRESS_BITS], m_len

    def elaborate(self, platform):
        m = Module()
        bus = self.m_axi
        with m.If(self.enable):       # nothing moves before, the random registers neither
            reads_random = xorshift(m, 0x9E3779B97F4A7C15 ^ self.seed, "reads_random")
            writes_random = xorshift(m, 0xD1B54A32D192ED03 ^ self.seed, "writes_random")
            m.d.sync += self.cycle.eq(self.cycle + 1)
            self._read_side(m, reads_random)
            self._write_side(m, writes_random)
        m.d.comb += self.done.eq(self.enable & (self._reads_done == self.reads) & (self._writes_done == self.writes))
        return m

    def _go(self, random: Signal):
        """Whether to offer a new burst this cycle: three times in four, always when streaming."""
        return 1 if self.stream is not None else random[60:62] != 0

    def _read_side(self, m, random) -> None:
        bus = self.m_axi
        issued, self._reads_done = Signal(32), Signal(32)
        taken = bus.arvalid & bus.arready
        address, length = self._burst(random, aligned=False)
        with m.If(~bus.arvalid | bus.arready):
            m.d.sync += [bus.arvalid.eq(self._go(random) & (issued + taken < self.reads)),
                         bus.araddr.eq(address), bus.arlen.eq(length), bus.arid.eq(issued + taken)]
        m.d.comb += [bus.arsize.eq(self.params.size_code), bus.arburst.eq(1)]
        m.d.sync += [issued.eq(issued + taken), self._reads_done.eq(self._reads_done + (bus.rvalid & bus.rready
                                                                                       & bus.rlast)),
                     bus.rready.eq(random[62:64] != 0 if self.backpressure else 1)]

    def _write_side(self, m, random) -> None:
        bus, width = self.m_axi, self.params.data_bytes
        m.submodules.lengths = lengths = SyncFIFO(width=8, depth=2)
        issued, burst, beat, self._writes_done = Signal(32), Signal(32), Signal(8), Signal(32)
        taken = bus.awvalid & bus.awready
        address, length = self._burst(random, aligned=True)
        load = (~bus.awvalid | bus.awready) & self._go(random) \
            & (issued < self.writes) & lengths.w_rdy
        with m.If(~bus.awvalid | bus.awready):
            m.d.sync += [bus.awvalid.eq(load), bus.awaddr.eq(address), bus.awlen.eq(length), bus.awid.eq(issued)]
        m.d.comb += [lengths.w_en.eq(load), lengths.w_data.eq(length),
                     bus.awsize.eq(self.params.size_code), bus.awburst.eq(1)]
        m.d.sync += issued.eq(issued + load)
        held = Signal()
        word = ((burst << 8 | beat) * 0x9E3779B97F4A7C15)[:64]
        m.d.comb += [bus.wvalid.eq(lengths.r_rdy & (held | (random[54:57] != 0))),
                     bus.wdata.eq(Cat(*(word ^ lane for lane in range(8 * width // 64 + 1)))),
                     bus.wstrb.eq(Mux(word[63] & word[62], word[:width], (1 << width) - 1)),
                     bus.wlast.eq(beat == lengths.r_data),
                     lengths.r_en.eq(bus.wvalid & bus.wready & bus.wlast)]
        m.d.sync += held.eq(bus.wvalid & ~bus.wready)
        with m.If(bus.wvalid & bus.wready):
            m.d.sync += [beat.eq(Mux(bus.wlast, 0, beat + 1)), burst.eq(burst + bus.wlast)]
        m.d.sync += [self._writes_done.eq(self._writes_done + (bus.bvalid & bus.bready)),
                     bus.bready.eq(random[57:59] != 0 if self.backpressure else 1)]


class MasterWithDram(Elaboratable):
    """The master and the Amaranth DRAM in one design, its bus visible (as outputs) for the trace."""

    def __init__(self, master: TrafficMaster):
        self.master = master
        self.dram = AxiDram(master.params, ADDRESS_BITS, ID_BITS)

    def elaborate(self, platform):
        m = Module()
        m.submodules.master, m.submodules.dram = self.master, self.dram
        wiring.connect(m, self.master.m_axi, self.dram.bus)
        return m


def bus_signals(bus) -> dict[str, Signal]:
    return {name: getattr(bus, name) for name in bus.signature.members}


def verilog(top, master: TrafficMaster, name: str) -> str:
    """Verilog of ``top`` (the master alone, or :class:`MasterWithDram`) without a reset: ``clk``, ``enable``,
    ``done``, ``cycle`` and the bus as ``m_axi_<signal>`` (outputs, but the slave's inputs of the master alone)."""
    alone = top is master
    ports = {"clk": (ClockSignal("sync"), PortDirection.Input), "enable": (master.enable, PortDirection.Input),
             "done": (master.done, PortDirection.Output), "cycle": (master.cycle, PortDirection.Output)}
    for member, signal in bus_signals(master.m_axi).items():
        inward = alone and master.m_axi.signature.members[member].flow == In
        ports[f"{PREFIX}_{member}"] = (signal, PortDirection.Input if inward else PortDirection.Output)
    if not alone:
        ports["protocol_error"] = (top.dram.protocol_error, PortDirection.Output)
    fragment = Fragment.get(top, None)
    fragment.add_domains(ClockDomain("sync", reset_less=True))
    return amaranth_verilog.convert(fragment, name=name, ports=ports)


def run_amaranth(master: TrafficMaster, *, python_model: bool, max_cycles: int, preload: bytes = b""):
    """The master against the Python core (``python_model``) or the Amaranth DRAM in Amaranth's simulator:
    (trace, memory after the run, protocol error seen)."""
    if python_model:
        top, model = master, None
    else:
        top = MasterWithDram(master)
    sim = Simulator(top)
    sim.add_clock(1e-8)
    if python_model:
        model = add_dram(sim, master.m_axi, master.params)
        model.write(0, preload)
    signals = bus_signals(master.m_axi)
    names = list(signals)
    events, outcome = [], {}

    async def bench(ctx):
        if not python_model:
            width = master.params.data_bytes
            for index in range(len(preload) // width):
                ctx.set(top.dram.memory.data[index], int.from_bytes(preload[index * width:(index + 1) * width],
                                                                    "little"))
        ctx.set(master.enable, 1)
        async for _, _, cycle, done, *values in ctx.tick().sample(master.cycle, master.done, *signals.values()):
            sampled = dict(zip(names, values))
            events.extend(trace_cycle(cycle, sampled.__getitem__))
            if done or cycle >= max_cycles:
                break
        if python_model:
            outcome["memory"] = bytes(model.memory)
        else:
            width = master.params.data_bytes
            outcome["memory"] = b"".join(ctx.get(top.dram.memory.data[i]).to_bytes(width, "little")
                                         for i in range(top.dram.memory.depth))
            outcome["protocol_error"] = ctx.get(top.dram.protocol_error)

    sim.add_testbench(bench)
    sim.run()
    return events, outcome["memory"], outcome.get("protocol_error", 0)
