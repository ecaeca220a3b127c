"""The testbench DRAM as Amaranth logic: :class:`AxiDram`, an AXI4 slave with the timing of
:mod:`aipu.sim.cosim.dram.model` to the cycle, for Verilator runs where a Python model per beat is too slow.

It lies outside the NPU (a testbench component, never part of ``aipu.rtl``): the testbench preloads and reads
back its ``memory`` by backdoor (Amaranth's ``ctx.set``/``ctx.get``, or ``$readmemh`` and VPI in Verilog). The
latency is a delay line (a small memory written and read at one rotating pointer) in front of a FIFO; a protocol
error (:class:`~aipu.sim.cosim.dram.model.AxiProtocolError`'s cases) raises the sticky ``protocol_error``, which
the testbench turns into the exception, and the burst answers SLVERR.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from aipu.rtl.axi import LEN_BITS, RESPONSE_BITS, AxiSignature
from aipu.sim.cosim.dram.model import BOUNDARY, INCR, DramParams, Resp


class LatencyQueue(wiring.Component):
    """A FIFO whose entries show at ``valid``/``data`` ``latency - 1`` edges after the edge that pushed them (in
    the same cycle for 1), so that a consumer registering them presents them ``latency`` edges after the push.
    ``pop`` takes the head; at most ``depth`` entries wait (the caller's outstanding limit keeps it so)."""

    def __init__(self, layout, latency: int, depth: int):
        self.layout, self.latency, self.depth = layout, latency, depth
        super().__init__({"push": In(1), "push_data": In(layout), "valid": Out(1), "data": Out(layout),
                          "pop": In(1)})

    def elaborate(self, platform):
        m = Module()
        width = len(self.push_data.as_value())
        m.submodules.fifo = fifo = SyncFIFO(width=width, depth=self.depth)
        entering, entering_data = self.push, self.push_data.as_value()
        if self.latency >= 3:
            stages = self.latency - 2
            m.submodules.line = line = Memory(shape=unsigned(width + 1), depth=stages, init=[])
            write, read = line.write_port(), line.read_port(domain="comb")
            pointer = Signal(range(stages))
            m.d.sync += pointer.eq(Mux(pointer == stages - 1, 0, pointer + 1))
            m.d.comb += [write.addr.eq(pointer), read.addr.eq(pointer), write.en.eq(1),
                         write.data.eq(Cat(entering_data, entering))]
            entering, entering_data = read.data[width], read.data[:width]
        bypass = Const(self.latency == 1)
        m.d.comb += [self.valid.eq(fifo.r_rdy | (bypass & entering)),
                     self.data.eq(Mux(fifo.r_rdy, fifo.r_data, entering_data)),
                     fifo.r_en.eq(self.pop & fifo.r_rdy),
                     fifo.w_en.eq(entering & ~(bypass & ~fifo.r_rdy & self.pop)),
                     fifo.w_data.eq(entering_data)]
        return m


class AxiDram(wiring.Component):
    """An AXI4 slave ``bus`` over ``params.size`` bytes (``memory``: one word per beat), ``protocol_error`` sticky."""

    def __init__(self, params: DramParams, address_bits: int = 32, id_bits: int = 4):
        self.params = params
        words = params.size // params.data_bytes
        self.memory = Memory(shape=unsigned(8 * params.data_bytes), depth=words, init=[])
        self.burst_layout = data.StructLayout({"word": address_bits, "len": LEN_BITS, "id": id_bits,
                                               "resp": RESPONSE_BITS})
        super().__init__({"bus": In(AxiSignature(address_bits, 8 * params.data_bytes, id_bits)),
                          "protocol_error": Out(1)})

    def _decode(self, m: Module, prefix: str, bad: Signal):
        """The burst that the ``prefix`` (``ar`` or ``aw``) channel offers, as a ``burst_layout`` value; ``bad``
        high when it is one this DRAM refuses (it then answers SLVERR)."""
        bus, params = self.bus, self.params
        address, length = getattr(bus, f"{prefix}addr"), getattr(bus, f"{prefix}len")
        shift = params.size_code
        start = Cat(Const(0, shift), address[shift:])
        end = start + ((length + 1) << shift)
        m.d.comb += bad.eq((getattr(bus, f"{prefix}burst") != INCR) | (getattr(bus, f"{prefix}size") != shift)
                           | ((start % BOUNDARY) + ((length + 1) << shift) > BOUNDARY))
        resp = Mux(bad, Resp.SLVERR, Mux(end > params.size, Resp.DECERR, Resp.OKAY))
        for error in reversed(params.errors):
            resp = Mux(~bad & (start < error.end) & (end > error.start), error.resp, resp)
        burst = Signal(self.burst_layout, name=f"{prefix}_burst")
        m.d.comb += [burst.word.eq(address[shift:]), burst.len.eq(length),
                     burst.id.eq(getattr(bus, f"{prefix}id")), burst.resp.eq(resp)]
        return burst

    def elaborate(self, platform):
        m = Module()
        m.submodules.dram_words = self.memory      # the reg array a Verilog testbench preloads and reads
        ar_bad, aw_bad, w_bad = Signal(), Signal(), Signal()
        m.d.sync += self.protocol_error.eq(self.protocol_error | ar_bad | aw_bad | w_bad)
        write = self.memory.write_port(granularity=8)
        self._read_side(m, ar_bad, self.memory.read_port(transparent_for=(write,)))
        self._write_side(m, aw_bad, w_bad, write)
        return m

    def _read_side(self, m: Module, bad: Signal, port) -> None:
        """AR into a latency queue of ``read_latency``, R beats of its head through one output register."""
        bus, params = self.bus, self.params
        m.submodules.reads = reads = LatencyQueue(self.burst_layout, params.read_latency, params.read_depth)
        accept = Signal()
        m.d.comb += accept.eq(bus.arvalid & bus.arready)
        checked = Signal()
        m.d.comb += [reads.push.eq(accept), reads.push_data.eq(self._decode(m, "ar", checked)),
                     bad.eq(accept & checked)]
        open_bursts = Signal(range(params.read_depth + 1))
        ended = bus.rvalid & bus.rready & bus.rlast
        next_open = open_bursts + accept - ended
        full = Signal()       # arready, which starts high
        m.d.sync += [open_bursts.eq(next_open), full.eq(next_open == params.read_depth)]
        m.d.comb += bus.arready.eq(~full)
        beat, resp = Signal(LEN_BITS), Signal(RESPONSE_BITS)
        head = reads.data
        present = (~bus.rvalid | bus.rready) & reads.valid
        m.d.comb += [port.addr.eq(head.word + beat), port.en.eq(present),
                     reads.pop.eq(present & (beat == head.len)),
                     bus.rdata.eq(Mux(resp == Resp.OKAY, port.data, 0)), bus.rresp.eq(resp)]
        with m.If(present):
            m.d.sync += [bus.rvalid.eq(1), bus.rid.eq(head.id), resp.eq(head.resp), bus.rlast.eq(beat == head.len),
                         beat.eq(Mux(beat == head.len, 0, beat + 1))]
        with m.Elif(bus.rready):
            m.d.sync += bus.rvalid.eq(0)

    def _write_side(self, m: Module, aw_bad: Signal, w_bad: Signal, port) -> None:
        """AW into a FIFO whose head takes the W beats (``wready`` while it holds one), then B through a latency
        queue of ``write_latency`` and one output register."""
        bus, params = self.bus, self.params
        layout = self.burst_layout
        m.submodules.addresses = addresses = SyncFIFO(width=layout.size, depth=params.write_depth)
        m.submodules.answers = answers = LatencyQueue(layout, params.write_latency, params.write_depth)
        accept, checked = Signal(), Signal()
        m.d.comb += [accept.eq(bus.awvalid & bus.awready), addresses.w_en.eq(accept),
                     addresses.w_data.eq(self._decode(m, "aw", checked)), aw_bad.eq(accept & checked)]
        head = layout(addresses.r_data)
        beat = Signal(LEN_BITS)
        take = bus.wvalid & bus.wready
        last = beat == head.len
        m.d.comb += [bus.wready.eq(addresses.r_rdy), w_bad.eq(take & (bus.wlast != last)),
                     port.addr.eq(head.word + beat), port.data.eq(bus.wdata),
                     port.en.eq(Mux(take & (head.resp == Resp.OKAY), bus.wstrb, 0)),
                     addresses.r_en.eq(take & last), answers.push.eq(take & last), answers.push_data.eq(head)]
        with m.If(take):
            m.d.sync += beat.eq(Mux(last, 0, beat + 1))
        open_bursts = Signal(range(params.write_depth + 1))
        answered = bus.bvalid & bus.bready
        next_open = open_bursts + accept - answered
        full = Signal()
        m.d.sync += [open_bursts.eq(next_open), full.eq(next_open == params.write_depth)]
        m.d.comb += bus.awready.eq(~full)
        present = (~bus.bvalid | bus.bready) & answers.valid
        m.d.comb += answers.pop.eq(present)
        with m.If(present):
            m.d.sync += [bus.bvalid.eq(1), bus.bid.eq(answers.data.id), bus.bresp.eq(answers.data.resp)]
        with m.Elif(bus.bready):
            m.d.sync += bus.bvalid.eq(0)
