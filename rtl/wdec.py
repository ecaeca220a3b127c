"""WDEC: the on-chip weight decoder. One command decodes one layer's chapter-10 stream (the npu profile,
codec/npu_profile.py) from DRAM into int8 weights in WEIGHT, up to ``wdec.bins_per_cycle`` bins of a leaf per
cycle (docs/rtl-wdec.md).

The engine is wired from named parts (aipu.rtl.wdec_parts), one Verilog module each:
  fetcher   word reads from DRAM into a FIFO deep enough to cover the read latency
  window    the bit window that always holds the B·NEED_BITS the engine may consume in a cycle
  engine    the arithmetic decoder of 10.4.3.3 (renormalisation, decision, bypass, stuffing bin): a cascade
            of B decision stages
  contexts  the context RAM (B banks) with its update_ctx
  syntax    the command's sequence through the profile's syntax: header fields (bypass FL), CTU flags, the
            unitree's leaves in Morton order with the UEGk de-binariser, the write of each level at its
            [O][KH][KW][I] byte

Every bin the engine decodes is visible on ``debug_bin_valid`` / ``debug_bin_ctx`` / ``debug_bin`` (lists of a
signal per lane, lane 0 first; the software trace's (ctxIdx, bin), -1 bypass, -2 stuffing), so tests compare
the hardware bin by bin. NEED_BITS and the cycles a command takes are ``aipu.sim.timing.wdec``.
"""
from __future__ import annotations

from amaranth.hdl import Signal
from amaranth.lib.wiring import Out, connect, flipped

from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.engine import TRACE_STUFFING
from aipu.rtl.ports import dram_read_port, write_port
from aipu.rtl.unit import UnitComponent
from aipu.rtl.wdec_parts.contexts import ContextMemory
from aipu.rtl.wdec_parts.engine import ArithmeticDecoder
from aipu.rtl.wdec_parts.fetcher import WordFetcher
from aipu.rtl.wdec_parts.syntax import SyntaxWalk
from aipu.rtl.wdec_parts.window import BitWindow
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.timing.wdec import NEED_BITS


class Wdec(UnitComponent):
    UNIT = Unit.WDEC
    ENGINE_ERRORS = ("stream", "profile", "levels")   # does not decode; outside the npu profile; not int8

    def __init__(self, config: HardwareConfig):
        if config.wdec.engines != 1:
            raise ValueError(f"Wdec has one engine: wdec.engines = {config.wdec.engines} is for the cycle model only, "
                             "the RTL needs 1")
        super().__init__(config)
        lanes = range(config.wdec.bins_per_cycle)
        self.debug_bin_valid = [Signal(name=f"debug_bin_valid{lane}") for lane in lanes]
        self.debug_bin_ctx = [Signal(range(TRACE_STUFFING, NUM_CONTEXTS), name=f"debug_bin_ctx{lane}")
                              for lane in lanes]
        self.debug_bin = [Signal(name=f"debug_bin{lane}") for lane in lanes]

    def ports(self, config: HardwareConfig) -> dict:
        lanes = config.wdec.bins_per_cycle
        if 8 * config.dram.bytes_per_cycle < lanes * NEED_BITS:
            raise ValueError(f"WDEC needs DRAM words of at least {lanes * NEED_BITS} bits to decode {lanes} bins a "
                             f"cycle (wdec.bins_per_cycle = {lanes}), dram.bytes_per_cycle = "
                             f"{config.dram.bytes_per_cycle} gives {8 * config.dram.bytes_per_cycle}")
        return {"dram_read": Out(dram_read_port(config)), "weight_write": Out(write_port(config, Buffer.WEIGHT))}

    def elaborate_engine(self, m, word, start, done, fault, fault_field):
        m.submodules.syntax = syntax = SyntaxWalk(self.config, self.error_names)
        m.submodules.fetcher = fetcher = WordFetcher(self.config)
        m.submodules.bit_window = window = BitWindow(self.config)
        lanes = self.config.wdec.bins_per_cycle
        m.submodules.engine = engine = ArithmeticDecoder(lanes)
        m.submodules.contexts = contexts = ContextMemory(lanes)
        m.d.comb += [syntax.command.eq(self.view(word, Opcode.WDEC)), syntax.start.eq(start), done.eq(syntax.done),
                     fault.eq(syntax.fault), fault_field.eq(syntax.fault_field)]
        connect(m, syntax.span, fetcher.span, window.span)
        connect(m, flipped(self.dram_read), fetcher.dram_read)
        connect(m, fetcher.words, window.words)
        m.d.comb += window.drained.eq(fetcher.drained)
        connect(m, window.bits, engine.bits)
        connect(m, syntax.end, window.end)
        connect(m, syntax.bins, engine.bins)
        for request, lane in zip(syntax.lanes, engine.lanes):
            connect(m, request, lane)
        for port, memory_port in zip(engine.context, contexts.ports):
            connect(m, port, memory_port)
        m.d.comb += [contexts.clear.eq(syntax.span.begin), contexts.rotation.eq(syntax.rotation)]
        connect(m, flipped(self.weight_write), syntax.weight_write)
        for trace, valid, context, bin_ in zip(engine.trace, self.debug_bin_valid, self.debug_bin_ctx, self.debug_bin):
            m.d.comb += [valid.eq(trace.valid), context.eq(trace.context), bin_.eq(trace.bin)]
