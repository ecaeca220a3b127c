"""The DRAM bridge: the units' internal DRAM ports (:mod:`aipu.rtl.ports`) onto one AXI4 master port.

Readers (the command fetcher, LOAD, WDEC) each have a ``dram_read_port``; STORE, the only writer, a
``dram_write_port``. Every word request becomes one single-beat burst (``len`` 0, full width, INCR), so the
DRAM gives one R beat per request and the policy stays exactly modelable (docs/rtl.md, "DRAM bridge"):

  reads   one grant a cycle, round robin: the first requester from the reader after the last one granted.
          Granted in cycle t when the AR register is free (empty or handshaking in t) and fewer than
          ``max_reads`` reads are outstanding; AR in t + 1 (ARID = the reader's index), held until
          ``arready``; R is always taken (``rready`` = 1: the units cannot refuse data) and registered, so
          the reader sees ``data_valid`` one cycle after the R handshake: L + 2 cycles after the grant for
          a DRAM of read latency L that takes AR at once. Per reader, responses come in request order (AXI
          keeps one ID's bursts in order). :mod:`aipu.sim.timing.dram_bridge` is the same policy in Python.
  writes  a word is taken when the AW register and the W queue (3 words) have room and fewer than
          ``max_writes`` writes are unacknowledged; AW in the next cycle, its W beat (WSTRB = the mask,
          WLAST) from then on; B always taken. A word with an empty mask (STORE's probe) is checked and
          dropped. ``write_idle``: every write taken before this cycle has had its B.
  errors  sticky until ``clear``; the bridge then grants and takes nothing and delivers no data (R and B
          are still taken, so the counts drain). A requested word at or beyond ``dram_bytes`` is refused
          before it reaches AXI (DRAM_RANGE); an R or B answering SLVERR or DECERR stops with AXI_RESPONSE
          and the code in ``error_field``; ``error_unit`` names the requester by the code given for it.
          In one cycle an R error wins over a B error, which wins over a read's range, then the write's.
"""
from __future__ import annotations

from collections.abc import Sequence

from amaranth.hdl import Cat, Const, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from aipu.rtl.arbiter import after, round_robin
from aipu.rtl.axi import AxiSignature
from aipu.rtl.ports import dram_read_port, dram_write_port
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.registers import BY_NAME, ErrorCause, Response
from aipu.sim.timing.dram_bridge import default_max_writes

INCR = 1
W_QUEUE = 3      # W beats waiting: a word taken in t has AW in t + 1 and its W taken from t + 2 on (wready follows AW)


class DramBridge(wiring.Component):
    """``read[i]`` for each code of ``readers`` (the ERROR.UNIT of reader i: a ``Unit`` or
    ``registers.FETCHER``), ``write`` for the ``writer``, ``m_axi`` the AXI4 master (Verilog ``m_axi_araddr``, ...
    with ``flat_ports(bridge, "_")``). ``max_reads`` and ``max_writes`` bound the outstanding bursts; their
    defaults, ``dram.latency_cycles`` and one more, never throttle a DRAM whose read and write latency are at most
    ``dram.latency_cycles`` - 2 (docs/rtl.md)."""

    def __init__(self, config: HardwareConfig, readers: Sequence[int], writer: int = Unit.STORE, *,
                 max_reads: int | None = None, max_writes: int | None = None):
        if not readers:
            raise ValueError("a DRAM bridge needs at least one reader")
        self.config, self.readers, self.writer = config, tuple(int(code) for code in readers), int(writer)
        self.max_reads = max_reads or config.dram.latency_cycles
        self.max_writes = max_writes or default_max_writes(config)
        self.id_bits = max(1, (len(self.readers) - 1).bit_length())
        self.word_shift = (config.dram.bytes_per_cycle - 1).bit_length()     # word address -> byte address
        error = {fld.name: width for fld, width in BY_NAME["ERROR"].layout(config)}
        super().__init__({
            "read": In(dram_read_port(config)).array(len(self.readers)),
            "write": In(dram_write_port(config)),
            "m_axi": Out(AxiSignature(config.dram.address_bits, 8 * config.dram.bytes_per_cycle, self.id_bits)),
            "dram_bytes": In(config.dram.address_bits + 1),   # words at or beyond are refused (DRAM_RANGE)
            "write_idle": Out(1),                                 # no write taken before this cycle lacks its B
            "clear": In(1),                                       # forget the error and resume (with ``start``)
            "error": Out(1), "error_cause": Out(error["CAUSE"]), "error_unit": Out(error["UNIT"]),
            "error_field": Out(error["FIELD"]),
        })

    def _beyond(self, word) -> Value:
        return Cat(Const(0, self.word_shift), word) >= self.dram_bytes

    def elaborate(self, platform) -> Module:
        m = Module()
        bus = self.m_axi
        size = self.word_shift                  # full-width beats
        m.d.comb += [bus.arlen.eq(0), bus.arsize.eq(size), bus.arburst.eq(INCR), bus.rready.eq(1),
                     bus.awlen.eq(0), bus.awsize.eq(size), bus.awburst.eq(INCR), bus.wlast.eq(1), bus.bready.eq(1)]
        read_failed, read_refused = self._read_side(m)
        write_failed, write_refused = self._write_side(m)
        self._errors(m, [read_failed, write_failed, read_refused, write_refused])
        return m

    def _code(self, codes: Sequence[int], index) -> Value:
        """``codes[index]`` as 8 bits (0 for an index beyond them, such as a RID no AR had)."""
        table = [*codes, *[0] * ((1 << len(index)) - len(codes))]
        return Cat(*(Const(code, 8) for code in table)).word_select(index, 8)

    def _read_side(self, m: Module) -> tuple:
        """Round-robin grant into the AR register, R registered and routed by RID."""
        bus, n = self.m_axi, len(self.readers)
        pointer = Signal(range(n))
        outstanding = Signal(range(self.max_reads + 1))
        requests = Cat(*(port.valid for port in self.read))
        winner = round_robin(m, requests, pointer)
        offer = Signal()
        m.d.comb += offer.eq(~self.error & (requests != 0) & (~bus.arvalid | bus.arready)
                             & (outstanding < self.max_reads))
        chosen_addr = Signal.like(self.read[0].addr)
        m.d.comb += chosen_addr.eq(Cat(*(port.addr for port in self.read)).word_select(winner, len(chosen_addr)))
        refused = offer & self._beyond(chosen_addr)
        grant = offer & ~refused
        for index, port in enumerate(self.read):
            m.d.comb += port.ready.eq(grant & (winner == index))
        with m.If(grant):
            m.d.sync += [bus.arvalid.eq(1), bus.araddr.eq(chosen_addr << self.word_shift), bus.arid.eq(winner),
                         pointer.eq(after(winner, n))]
        with m.Elif(bus.arready):
            m.d.sync += bus.arvalid.eq(0)
        answered = bus.rvalid          # rready is always high
        m.d.sync += outstanding.eq(outstanding + grant - answered)

        data, data_valid, data_id = Signal.like(bus.rdata), Signal(), Signal.like(bus.rid)
        failed = answered & (bus.rresp != Response.OKAY)
        m.d.sync += [data.eq(bus.rdata), data_id.eq(bus.rid), data_valid.eq(answered & ~failed & ~self.error)]
        for index, port in enumerate(self.read):
            m.d.comb += [port.data.eq(data), port.data_valid.eq(data_valid & (data_id == index))]
        return ((failed, ErrorCause.AXI_RESPONSE, self._code(self.readers, bus.rid), bus.rresp),
                (refused, ErrorCause.DRAM_RANGE, self._code(self.readers, winner), 0))

    def _write_side(self, m: Module) -> tuple:
        """AW register and W queue; B counted into ``write_idle``."""
        bus, port = self.m_axi, self.write
        nbytes = self.config.dram.bytes_per_cycle
        m.submodules.w_queue = queue = SyncFIFO(width=9 * nbytes, depth=W_QUEUE)
        unanswered = Signal(range(self.max_writes + 1))
        room = ~self.error & (~bus.awvalid | bus.awready) & queue.w_rdy & (unanswered < self.max_writes)
        refused = port.valid & room & self._beyond(port.addr)
        take = port.valid & room & ~refused
        issue = take & (port.mask != 0)
        m.d.comb += [port.ready.eq(room & ~refused), queue.w_en.eq(issue), queue.w_data.eq(Cat(port.data, port.mask)),
                     bus.wvalid.eq(queue.r_rdy), bus.wdata.eq(queue.r_data[:8 * nbytes]),
                     bus.wstrb.eq(queue.r_data[8 * nbytes:]), queue.r_en.eq(bus.wready),
                     self.write_idle.eq(unanswered == 0)]
        with m.If(issue):      # awid stays 0
            m.d.sync += [bus.awvalid.eq(1), bus.awaddr.eq(port.addr << self.word_shift)]
        with m.Elif(bus.awready):
            m.d.sync += bus.awvalid.eq(0)
        m.d.sync += unanswered.eq(unanswered + issue - bus.bvalid)
        failed = bus.bvalid & (bus.bresp != Response.OKAY)
        return ((failed, ErrorCause.AXI_RESPONSE, self.writer, bus.bresp),
                (refused, ErrorCause.DRAM_RANGE, self.writer, 0))

    def _errors(self, m: Module, faults: list) -> None:
        """Record the first of ``faults`` (condition, cause, unit, field) that holds while no error is held;
        ``clear`` forgets the error."""
        for index, (condition, cause, unit, field) in enumerate(faults):
            with (m.Elif if index else m.If)(condition & ~self.error):
                m.d.sync += [self.error.eq(1), self.error_cause.eq(cause), self.error_unit.eq(unit),
                             self.error_field.eq(field)]
        with m.If(self.clear):
            m.d.sync += [self.error.eq(0), self.error_cause.eq(0), self.error_unit.eq(0), self.error_field.eq(0)]
