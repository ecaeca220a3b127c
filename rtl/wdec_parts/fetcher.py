"""WDEC's fetcher: the stream's DRAM words, requested back to back, into a FIFO, and out one a cycle."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from aipu.rtl.ports import dram_read_port
from aipu.rtl.wdec_parts.interfaces import stream_span
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.timing.wdec_stream import fetch_depth


class WordFetcher(wiring.Component):
    """Reads the words from the one of ``dram_addr`` to the one of the stream's last byte.

    A request goes out every cycle while the FIFO (``fetch_depth``: ``dram.latency_cycles + 4`` words) plus
    the reads in flight have room, so after the first response the FIFO never runs dry. ``words`` hands them
    on in stream order (as DRAM delivers them); ``drained`` says every word of the stream has gone out.

    Signature: ``span`` (In: begin, dram_addr, length), ``dram_read`` (the unit's DRAM port), ``words``
    (Out: a stream of DRAM words), ``drained`` (Out).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({"span": In(stream_span(config)), "dram_read": Out(dram_read_port(config)),
                          "words": Out(stream.Signature(8 * config.dram.bytes_per_cycle)), "drained": Out(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        span, dram, words = self.span, self.dram_read, self.words
        offset_bits = (self.config.dram.bytes_per_cycle - 1).bit_length()
        depth = fetch_depth(self.config)
        m.submodules.fifo = fifo = SyncFIFO(width=len(words.payload), depth=depth)
        end_byte = span.dram_addr + span.length
        first_word = span.dram_addr >> offset_bits
        total_words = ((end_byte - 1) >> offset_bits) - first_word + 1

        request_addr = Signal(len(dram.addr))
        requests_left = Signal(len(span.length) + 1)
        inflight = Signal(range(depth + 1))
        request = Signal()
        m.d.comb += [request.eq((requests_left != 0) & (fifo.level + inflight < depth)),
                     dram.valid.eq(request), dram.addr.eq(request_addr),
                     fifo.w_data.eq(dram.data), fifo.w_en.eq(dram.data_valid)]
        taken = request & dram.ready
        with m.If(taken):
            m.d.sync += [request_addr.eq(request_addr + 1), requests_left.eq(requests_left - 1)]
        m.d.sync += inflight.eq(inflight + taken - dram.data_valid)

        undelivered = Signal(len(span.length) + 1)
        handed = words.valid & words.ready
        m.d.comb += [words.payload.eq(fifo.r_data), words.valid.eq(fifo.r_rdy & (undelivered != 0)),
                     fifo.r_en.eq(handed), self.drained.eq(undelivered == 0)]
        with m.If(handed):
            m.d.sync += undelivered.eq(undelivered - 1)

        with m.If(span.begin):
            m.d.sync += [request_addr.eq(first_word), requests_left.eq(total_words), undelivered.eq(total_words)]
        return m
