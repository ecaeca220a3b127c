"""CONV's word window: a run of bytes at any byte offset, gathered from port words read two a cycle."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.lanes import shift_down


class WordWindow(wiring.Component):
    """Gathers ``2·beats`` consecutive port words, two per cycle (``a`` and the next word ``b``) in the
    cycles ``valid`` marks with their ``beat``, and shows the ``length`` bytes from byte ``offset`` of them.

    The words of the beats before the last are held in registers; in the last beat's data cycle ``run`` is
    cut from them with the live port words on top, so a run at any alignment costs no extra cycle.

    Signature: ``a``, ``b`` (In: the data of a pair of read ports), ``valid``, ``beat`` (In: which pair
    arrives), ``offset`` (In: the run's first byte in the first word), ``run`` (Out: ``length`` bytes).
    """

    def __init__(self, port_bytes: int, beats: int, length: int):
        self.beats = beats
        super().__init__({"a": In(8 * port_bytes), "b": In(8 * port_bytes), "valid": In(1), "beat": In(range(beats)),
                          "offset": In(range(port_bytes)), "run": Out(8 * length)})

    def elaborate(self, platform) -> Module:
        m = Module()
        width = len(self.a)
        held = [Signal(width, name=f"held{i}") for i in range(2 * self.beats - 2)]
        for i in range(self.beats - 1):
            with m.If(self.valid & (self.beat == i)):
                m.d.sync += [held[2 * i].eq(self.a), held[2 * i + 1].eq(self.b)]
        words = Cat(*held, self.a, self.b)
        m.d.comb += self.run.eq(shift_down(m, "run", words, self.offset, 8, len(self.run) // 8))
        return m
