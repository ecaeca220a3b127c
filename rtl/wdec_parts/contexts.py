"""WDEC's context memory: (lgPmps, cycno, mps) per ctxIdx and update_ctx (10.4.3.3.5)."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.engine import LG_PMPS_INIT, LG_PMPS_MAX, LPS_INCREMENT
from aipu.rtl.wdec_parts.interfaces import CONTEXT_PORT, LG_BITS


class ContextMemory(wiring.Component):
    """A RAM indexed by the software's ctxIdx, read combinationally and written back in the same cycle, so a
    bin in the same context as the previous one needs no bypass logic. A context not written since
    ``clear`` reads as its initial state (10.4.2.1): a command starts with fresh contexts at no cost.

    Signature: ``port`` (In: the engine's context read and update), ``clear`` (In: every context fresh).
    """

    def __init__(self):
        super().__init__({"port": In(CONTEXT_PORT), "clear": In(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        port = self.port
        m.submodules.memory = memory = Memory(shape=LG_BITS + 3, depth=NUM_CONTEXTS, init=[])
        read = memory.read_port(domain="comb")
        write = memory.write_port()
        written = Signal(NUM_CONTEXTS)
        m.d.comb += read.addr.eq(port.index)
        state = Signal(LG_BITS + 3)
        m.d.comb += state.eq(Mux(written.bit_select(port.index, 1), read.data, LG_PMPS_INIT << 3))
        mps, cycno, lg = state[0], state[1:3], state[3:]
        m.d.comb += [port.mps.eq(mps), port.lg.eq(lg)]

        cwr = Mux(cycno <= 1, 3, Mux(cycno == 2, 4, 5))
        next_cycno = Signal(2)
        next_lg = Signal(LG_BITS + 1)
        next_mps = Signal()
        with m.If(port.bin != mps):
            m.d.comb += next_cycno.eq(Mux(cycno <= 2, cycno + 1, 3))
            raised = lg + Mux(cwr == 3, LPS_INCREMENT[0], Mux(cwr == 4, LPS_INCREMENT[1], LPS_INCREMENT[2]))
            with m.If(raised > LG_PMPS_MAX):
                m.d.comb += [next_lg.eq(2 * LG_PMPS_MAX + 1 - raised), next_mps.eq(~mps)]
            with m.Else():
                m.d.comb += [next_lg.eq(raised), next_mps.eq(mps)]
        with m.Else():
            m.d.comb += [next_cycno.eq(Mux(cycno == 0, 1, cycno)), next_mps.eq(mps),
                         next_lg.eq(lg - (lg >> cwr) - (lg >> (cwr + 2)))]
        m.d.comb += [write.addr.eq(port.index), write.data.eq(Cat(next_mps, next_cycno, next_lg[:LG_BITS])),
                     write.en.eq(port.update)]
        with m.If(port.update):
            m.d.sync += written.eq(written | (1 << port.index))
        with m.If(self.clear):
            m.d.sync += written.eq(0)
        return m
