"""One part of a WDEC stream decoded into WEIGHT: the one-engine pipeline (fetcher, bit window, engine, context
memory, syntax walk) and its cube stager, whose rows WDEC's write arbiter takes into the shared WEIGHT port."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from aipu.rtl.commands import command_layout
from aipu.rtl.ports import dram_read_port, write_port
from aipu.rtl.wdec_parts.contexts import ContextMemory
from aipu.rtl.wdec_parts.engine import ArithmeticDecoder
from aipu.rtl.wdec_parts.fetcher import WordFetcher
from aipu.rtl.wdec_parts.interfaces import BIN_TRACE
from aipu.rtl.wdec_parts.stager import CubeStager
from aipu.rtl.wdec_parts.syntax import SyntaxWalk
from aipu.rtl.wdec_parts.window import BitWindow
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Opcode


class PartDecoder(wiring.Component):
    """Decodes the part ``command`` describes (its stream's ``dram_addr`` and ``length``, its ``out_c`` channels
    from ``wgt_addr`` on) from ``start`` to ``done`` (its last row written) or ``fault``. The stager's row
    writes wait in ``write`` with ``pending`` until the write arbiter ``grant``s them; while the stager cannot
    take a leaf's level the engine holds (it sees its bit window as not ready), and the leaf walk's Morton
    skips go on.

    ``continuation``: the decoder of a later part, whose stream is a continuation part (docs/codec.md §11).

    Signature: ``command`` (In), ``start`` (In), ``done``, ``fault``, ``fault_field`` (Out), ``dram_read`` (the
    part's DRAM requests), ``write`` (Out: the level's WEIGHT write, ``en`` unused), ``pending`` (Out),
    ``grant`` (In), ``trace`` (Out: the engine's bins, a BIN_TRACE per cascade stage).
    """

    def __init__(self, config: HardwareConfig, error_names: tuple[str, ...], continuation: bool = False):
        self.config, self.error_names, self.continuation = config, error_names, continuation
        super().__init__({"command": In(command_layout(config, Opcode.WDEC)), "start": In(1), "done": Out(1),
                          "fault": Out(1), "fault_field": Out(range(len(error_names))),
                          "dram_read": Out(dram_read_port(config)), "write": Out(write_port(config, Buffer.WEIGHT)),
                          "pending": Out(1), "grant": In(1),
                          "trace": Out(BIN_TRACE).array(config.wdec.bins_per_cycle)})

    def elaborate(self, platform) -> Module:
        m = Module()
        lanes = self.config.wdec.bins_per_cycle
        m.submodules.syntax = syntax = SyntaxWalk(self.config, self.error_names, self.continuation)
        m.submodules.fetcher = fetcher = WordFetcher(self.config)
        m.submodules.bit_window = window = BitWindow(self.config)
        m.submodules.engine = engine = ArithmeticDecoder(lanes)
        m.submodules.contexts = contexts = ContextMemory(lanes)
        m.submodules.stager = stager = CubeStager(self.config)
        cmd = self.command
        m.d.comb += [syntax.command.eq(cmd), syntax.start.eq(self.start), self.done.eq(stager.done),
                     self.fault.eq(syntax.fault), self.fault_field.eq(syntax.fault_field),
                     stager.begin.eq(syntax.span.begin), stager.finished.eq(syntax.done),
                     stager.wgt_addr.eq(cmd.wgt_addr), stager.out_c.eq(cmd.out_c), stager.in_c.eq(cmd.in_c),
                     self.pending.eq(stager.pending), stager.grant.eq(self.grant)]
        connect(m, syntax.leaf, stager.leaf)
        connect(m, stager.write, flipped(self.write))
        connect(m, syntax.span, fetcher.span, window.span)
        connect(m, flipped(self.dram_read), fetcher.dram_read)
        connect(m, fetcher.words, window.words)
        m.d.comb += window.drained.eq(fetcher.drained)
        m.d.comb += [engine.bits.bits.eq(window.bits.bits), engine.bits.avail.eq(window.bits.avail),
                     engine.bits.ready.eq(window.bits.ready & ~stager.hold),
                     window.bits.consume.eq(engine.bits.consume)]
        connect(m, syntax.end, window.end)
        connect(m, syntax.bins, engine.bins)
        for request, lane in zip(syntax.lanes, engine.lanes):
            connect(m, request, lane)
        for port, memory_port in zip(engine.context, contexts.ports):
            connect(m, port, memory_port)
        m.d.comb += [contexts.clear.eq(syntax.span.begin), contexts.rotation.eq(syntax.rotation)]
        for trace, engine_trace in zip(self.trace, engine.trace):
            m.d.comb += [trace.valid.eq(engine_trace.valid), trace.context.eq(engine_trace.context),
                         trace.bin.eq(engine_trace.bin)]
        return m
