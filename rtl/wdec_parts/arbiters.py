"""WDEC's arbiters: its parts' DRAM reads onto the unit's one read port, and their decoded levels onto its one
WEIGHT write port, each round robin from the requester after the last one granted."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from aipu.rtl.arbiter import after, round_robin
from aipu.rtl.ports import dram_read_port, write_port
from aipu.sim.machine.arch import Buffer, HardwareConfig


class ReadArbiter(wiring.Component):
    """One request a cycle from ``requesters`` DRAM read ports onto ``dram_read``; the answers, which come back
    in request order, go to their requester by a FIFO of the granted requesters' indices, deep enough for
    ``in_flight`` reads. ``clear`` sets the round robin's pointer to requester 0 (at each command).

    Signature: ``readers`` (In: a DRAM read port per requester), ``dram_read`` (Out: the unit's), ``clear`` (In).
    """

    def __init__(self, config: HardwareConfig, requesters: int, in_flight: int):
        self.requesters, self.in_flight = requesters, in_flight
        super().__init__({"readers": In(dram_read_port(config)).array(requesters),
                          "dram_read": Out(dram_read_port(config)), "clear": In(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        n, dram = self.requesters, self.dram_read
        pointer = Signal(range(max(n, 2)))
        winner = round_robin(m, Cat(reader.valid for reader in self.readers), pointer)
        m.submodules.granted = granted = SyncFIFO(width=len(winner), depth=self.in_flight)
        chosen = Signal.like(dram.addr)
        m.d.comb += chosen.eq(Cat(reader.addr for reader in self.readers).word_select(winner, len(chosen)))
        taken = dram.valid & dram.ready
        m.d.comb += [dram.valid.eq(Cat(reader.valid for reader in self.readers).any()), dram.addr.eq(chosen),
                     granted.w_en.eq(taken), granted.w_data.eq(winner), granted.r_en.eq(dram.data_valid)]
        for index, reader in enumerate(self.readers):
            m.d.comb += [reader.ready.eq(dram.ready & (winner == index)), reader.data.eq(dram.data),
                         reader.data_valid.eq(dram.data_valid & (granted.r_data == index))]
        with m.If(self.clear):
            m.d.sync += pointer.eq(0)
        with m.Elif(taken):
            m.d.sync += pointer.eq(after(winner, n))
        return m


class WriteArbiter(wiring.Component):
    """One pending level a cycle from ``writers`` parts onto ``weight_write``: the winner's write goes out and
    its ``grant`` rises in the same cycle (a part pending and not granted holds). ``clear`` sets the pointer
    to part 0 (at each command).

    Signature: ``writes`` (In: each part's buffered write), ``pending`` (In: a bit per part), ``grant`` (Out: a
    bit per part), ``weight_write`` (Out: the WEIGHT port), ``clear`` (In).
    """

    def __init__(self, config: HardwareConfig, writers: int):
        self.writers = writers
        super().__init__({"writes": In(write_port(config, Buffer.WEIGHT)).array(writers), "pending": In(writers),
                          "grant": Out(writers), "weight_write": Out(write_port(config, Buffer.WEIGHT)),
                          "clear": In(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        n, port = self.writers, self.weight_write
        pointer = Signal(range(max(n, 2)))
        winner = round_robin(m, self.pending, pointer)
        any_pending = self.pending.any()
        m.d.comb += [port.en.eq(any_pending), self.grant.eq(any_pending << winner)]
        for name in ("addr", "data", "mask"):
            width = len(getattr(port, name))
            m.d.comb += getattr(port, name).eq(Cat(getattr(write, name) for write in self.writes)
                                               .word_select(winner, width))
        with m.If(self.clear):
            m.d.sync += pointer.eq(0)
        with m.Elif(any_pending):
            m.d.sync += pointer.eq(after(winner, n))
        return m
