"""The word window: a run of bytes at any byte offset, gathered from port words read two a cycle."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.lanes import shift_down


def reads_needed(port_word: Value, first_byte: Value, length: Value, port_bytes: int) -> Value:
    """1 if ``port_word`` holds one of the ``length`` (>= 1) bytes from ``first_byte`` or an earlier byte:
    the ``en`` gate that keeps a run's reads from going past its end into words the command does not use
    (the word after a run that fits in fewer words than the beats read; docs/isa.md, "Banks")."""
    return port_word <= ((first_byte + length - 1) >> (port_bytes.bit_length() - 1))


class WordWindow(wiring.Component):
    """Gathers up to ``2·beats`` consecutive port words, two per cycle (``a`` and the next word ``b``) in the
    cycles ``valid`` marks with their ``beat``, and shows the ``length`` bytes from byte ``offset`` of them.

    The words of earlier beats are held in registers; in the data cycle of a beat ``run`` is cut from them
    with the live port words in that beat's place, so a run at any alignment costs no extra cycle, and a run
    of fewer beats (DWCONV's ``tap_beats`` varies with the command) ends at any beat.

    Signature: ``a``, ``b`` (In: the data of a pair of read ports), ``valid``, ``beat`` (In: which pair
    arrives), ``offset`` (In: the run's first byte in the first word), ``run`` (Out: ``length`` bytes).
    """

    def __init__(self, port_bytes: int, beats: int, length: int):
        self.beats = beats
        super().__init__({"a": In(8 * port_bytes), "b": In(8 * port_bytes), "valid": In(1),
                          "beat": In(range(max(beats, 2))),      # one bit at least: Verilog has no zero-width net
                          "offset": In(range(port_bytes)), "run": Out(8 * length)})

    def elaborate(self, platform) -> Module:
        m = Module()
        width = len(self.a)
        words = []
        for i in range(self.beats - 1):
            held = [Signal(width, name=f"held{2 * i + half}") for half in range(2)]
            live = self.beat == i
            with m.If(self.valid & live):
                m.d.sync += [held[0].eq(self.a), held[1].eq(self.b)]
            words += [Mux(live, self.a, held[0]), Mux(live, self.b, held[1])]
        words = Cat(*words, self.a, self.b)
        m.d.comb += self.run.eq(shift_down(m, "run", words, self.offset, 8, len(self.run) // 8))
        return m
