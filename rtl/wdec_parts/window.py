"""WDEC's bit window: the stream's bits from DRAM words, always the B·NEED_BITS an engine of B stages may take in
a cycle."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.wdec_parts.interfaces import NEED_BITS, STREAM_END, bit_window, stream_span
from aipu.sim.machine.arch import HardwareConfig


class BitWindow(wiring.Component):
    """A shift register of ``2·view + word`` bits, ``view`` the ``wdec.bins_per_cycle``·NEED_BITS an engine of
    that many stages may consume in one cycle, that takes a word whenever it holds fewer than ``2·view`` (the
    first word without the bytes before ``dram_addr``). Ready once it holds ``view`` bits, it holds them in
    every later cycle as long as a word has at least ``view`` bits (WDEC refuses narrower words): after the
    start the engine never waits.

    ``bits`` shows the next ``view`` bits, zero past the stream's ``length`` bytes; ``end`` checks that the
    stream ends after the padding to the next byte (all zero).

    Signature: ``span`` (In: begin, dram_addr, length), ``words`` (In: the fetcher's DRAM words), ``drained``
    (In: no word is left to come), ``bits`` (Out: to the engine), ``end`` (In: the padding check).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        words = stream.Signature(8 * config.dram.bytes_per_cycle)
        super().__init__({"span": In(stream_span(config)), "words": In(words), "drained": In(1),
                          "bits": Out(bit_window(config.wdec.bins_per_cycle)), "end": In(STREAM_END)})

    def elaborate(self, platform) -> Module:
        m = Module()
        span, words = self.span, self.words
        nbytes = self.config.dram.bytes_per_cycle
        word_bits = 8 * nbytes
        offset_bits = (nbytes - 1).bit_length()
        view = self.config.wdec.bins_per_cycle * NEED_BITS
        window_bits = 2 * view + word_bits
        window = Signal(window_bits)
        count = Signal(range(window_bits + 1))
        consume = Signal(range(view + 1))
        first_pending = Signal()
        m.d.comb += words.ready.eq(count < 2 * view)
        refill = words.valid & words.ready
        stream_order = Cat(*[words.payload[8 * i:8 * i + 8] for i in reversed(range(nbytes))])
        skip_bytes = span.dram_addr[:offset_bits] if offset_bits else Const(0, 1)
        incoming = Signal(word_bits)
        incoming_bits = Signal(range(word_bits + 1))
        with m.If(first_pending):
            m.d.comb += [incoming.eq(stream_order << (skip_bytes * 8)), incoming_bits.eq(word_bits - skip_bytes * 8)]
        with m.Else():
            m.d.comb += [incoming.eq(stream_order), incoming_bits.eq(word_bits)]
        kept = Signal(window_bits)
        m.d.comb += kept.eq(window << consume)
        with m.If(refill):
            placed = Cat(Const(0, window_bits - word_bits), incoming) >> (count - consume).as_unsigned()
            m.d.sync += [window.eq(kept | placed), count.eq(count - consume + incoming_bits), first_pending.eq(0)]
        with m.Else():
            m.d.sync += [window.eq(kept), count.eq(count - consume)]

        stream_bits = Signal(len(span.length) + 3)
        position = Signal(len(stream_bits))          # stream bits consumed
        m.d.sync += position.eq(position + consume)
        left = stream_bits - position
        avail, bits, ready = self.bits.avail, self.bits.bits, self.bits.ready
        m.d.comb += avail.eq(Mux(left < view, left, view))
        past_end = (Const(1, view + 1) << (view - avail).as_unsigned()) - 1
        m.d.comb += [bits.eq(window[window_bits - view:] & ~past_end), ready.eq((count >= view) | self.drained)]

        pad = Signal(3)
        m.d.comb += pad.eq(-position[:3])
        padding = bits >> (view - pad).as_unsigned()
        with m.If(self.end.check & ready):
            with m.If((pad > avail) | (padding != 0) | (position + pad != stream_bits)):
                m.d.comb += self.end.malformed.eq(1)
            with m.Else():
                m.d.comb += [consume.eq(pad), self.end.ended.eq(1)]
        with m.Else():
            m.d.comb += consume.eq(self.bits.consume)

        with m.If(span.begin):
            m.d.sync += [stream_bits.eq(span.length << 3), first_pending.eq(1), window.eq(0), count.eq(0),
                         position.eq(0)]
        return m
