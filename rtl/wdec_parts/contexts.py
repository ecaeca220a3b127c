"""WDEC's context memory: (lgPmps, cycno, mps) per ctxIdx and update_ctx (10.4.3.3.5), a read and an update
per engine stage a cycle."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.engine import LG_PMPS_INIT, LG_PMPS_MAX, LPS_INCREMENT
from aipu.rtl.wdec_parts.interfaces import CONTEXT_PORT, LG_BITS, rotation_shape

STATE_BITS = LG_BITS + 3        # mps, cycno (2 bits), lgPmps


class ContextMemory(wiring.Component):
    """``lanes`` banks of RAM indexed by the software's ctxIdx (one read and one write port each, as an SRAM
    macro has), read combinationally and written back in the same cycle, so a bin in the same context as the
    previous one needs no bypass logic. Port j reads and updates bank (``rotation`` + j) mod lanes: the
    syntax walk sets ``rotation`` to a leaf's bin position, so that a context of the leaf's bin p always lives
    in bank p mod lanes (every other context, one bin a cycle on port 0 with ``rotation`` 0, in bank 0) and
    the lanes of a cycle, consecutive bins of one leaf, meet distinct banks. A context not written since
    ``clear`` reads as its initial state (10.4.2.1): a command starts with fresh contexts at no cost.

    Signature: ``ports`` (In: a context read and update per engine stage), ``rotation`` (In: port 0's bank),
    ``clear`` (In: every context fresh).
    """

    def __init__(self, lanes: int = 1):
        self.lanes = lanes
        super().__init__({"ports": In(CONTEXT_PORT).array(lanes), "rotation": In(rotation_shape(lanes)),
                          "clear": In(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        lanes = self.lanes
        written = Signal(NUM_CONTEXTS)
        reads, writes = [], []
        for bank in range(lanes):
            m.submodules[f"bank{bank}"] = memory = Memory(shape=STATE_BITS, depth=NUM_CONTEXTS, init=[])
            reads.append(memory.read_port(domain="comb"))
            writes.append(memory.write_port())
        reads, writes = Array(reads), Array(writes)
        marked = written
        bits = (lanes - 1).bit_length()
        for lane, port in enumerate(self.ports):
            bank = (self.rotation + lane)[:bits] if bits else 0
            state = Signal(STATE_BITS, name=f"state{lane}")
            m.d.comb += [reads[bank].addr.eq(port.index),
                         state.eq(Mux(written.bit_select(port.index, 1), reads[bank].data, LG_PMPS_INIT << 3)),
                         port.mps.eq(state[0]), port.lg.eq(state[3:]),
                         writes[bank].addr.eq(port.index), writes[bank].data.eq(_updated(m, state, port.bin)),
                         writes[bank].en.eq(port.update)]
            marked = marked | Mux(port.update, 1 << port.index, 0)
        m.d.sync += written.eq(Mux(self.clear, 0, marked))
        return m


def _updated(m: Module, state, bin_) -> Signal:
    """update_ctx of a context in ``state`` (mps, cycno, lgPmps) after ``bin_``."""
    mps, cycno, lg = state[0], state[1:3], state[3:]
    cwr = Mux(cycno <= 1, 3, Mux(cycno == 2, 4, 5))
    next_cycno = Signal(2)
    next_lg = Signal(LG_BITS + 1)
    next_mps = Signal()
    with m.If(bin_ != mps):
        m.d.comb += next_cycno.eq(Mux(cycno <= 2, cycno + 1, 3))
        raised = lg + Mux(cwr == 3, LPS_INCREMENT[0], Mux(cwr == 4, LPS_INCREMENT[1], LPS_INCREMENT[2]))
        with m.If(raised > LG_PMPS_MAX):
            m.d.comb += [next_lg.eq(2 * LG_PMPS_MAX + 1 - raised), next_mps.eq(~mps)]
        with m.Else():
            m.d.comb += [next_lg.eq(raised), next_mps.eq(mps)]
    with m.Else():
        m.d.comb += [next_cycno.eq(Mux(cycno == 0, 1, cycno)), next_mps.eq(mps),
                     next_lg.eq(lg - (lg >> cwr) - (lg >> (cwr + 2)))]
    return Cat(next_mps, next_cycno, next_lg[:LG_BITS])
