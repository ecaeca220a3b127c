"""WDEC's syntax walk: one command from its bounds check to its padding, through the npu profile's syntax."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from aipu.rtl.commands import command_layout
from aipu.rtl.ports import write_port
from aipu.rtl.wdec_parts.elements import SHAPE_FIELDS, CtuFlags, HeaderFields
from aipu.rtl.wdec_parts.interfaces import (BIN_LANE, BIN_REQUEST, STREAM_END, BinKind, leaf_level, rotation_shape,
                                            stream_span)
from aipu.rtl.wdec_parts.leaves import LeafWalk
from aipu.rtl.wdec_parts.levels import LevelDecoder
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Opcode


class SyntaxWalk(wiring.Component):
    """One part's sequence (its ``command``: the part's stream, channels and bytes of WEIGHT, checked by the
    unit), from ``start``, when its stream begins, one state per stretch of the stream:

      PRIME     the engine's first 9 bits
      HEADER    the header fields (bypass bins; a ``continuation`` part's: max_ctu3d_idx alone)
      CTU       the CTU's flags (context bins)
      LEAF      the CU's leaves: each leaf's level, up to ``wdec.bins_per_cycle`` of its bins a cycle (one a
                lane), written as it completes, Morton candidates outside the CU skipped; the end-of-CTU
                bypass bin when the walk ends (last CTU: STUFFING)
      STUFFING  the stuffing bin, then PADDING: the zero padding ends the stream

    and the parts it holds for them: the header fields and CTU flags, the leaf walk, the level decoder and
    the level writer. Every bin but a leaf's goes alone, on lane 0. Any fault stops the command with ``fault``
    naming it (an index into ``error_names``).

    Signature: ``command`` (In: the WDEC command), ``start`` (In), ``done``, ``fault``, ``fault_field`` (Out,
    per UnitComponent.elaborate_engine), ``span`` (Out: to the fetcher and the bit window), ``end`` (Out: the
    window's padding check), ``bins`` and ``lanes`` (Out: the engine's requests, a lane per stage),
    ``rotation`` (Out: the context memory's bank of lane 0, a leaf bin's position), ``weight_write`` (the
    WEIGHT port).
    """

    def __init__(self, config: HardwareConfig, error_names: tuple[str, ...], continuation: bool = False):
        self.config = config
        self.error_names = error_names
        self.continuation = continuation
        lanes = config.wdec.bins_per_cycle
        super().__init__({"command": In(command_layout(config, Opcode.WDEC)), "start": In(1), "done": Out(1),
                          "fault": Out(1), "fault_field": Out(range(len(error_names))),
                          "span": Out(stream_span(config)), "end": Out(STREAM_END), "bins": Out(BIN_REQUEST),
                          "lanes": Out(BIN_LANE).array(lanes), "rotation": Out(rotation_shape(lanes)),
                          "leaf": Out(leaf_level(config))})

    def elaborate(self, platform) -> Module:
        m = Module()
        config, cmd, bins = self.config, self.command, self.bins
        m.submodules.header = header = HeaderFields(config, self.error_names, self.continuation)
        m.submodules.flags = flags = CtuFlags()
        m.submodules.leaves = leaves = LeafWalk(config)
        m.submodules.levels = levels = LevelDecoder(config.wdec.bins_per_cycle)
        m.d.comb += [self.span.dram_addr.eq(cmd.dram_addr), self.span.length.eq(cmd.length),
                     header.begin.eq(self.span.begin), leaves.begin.eq(self.span.begin),
                     header.bin.eq(self.lanes[0].bin), flags.bin.eq(self.lanes[0].bin),
                     leaves.ctu_size_idx.eq(header.ctu_size_idx), flags.split_coded.eq(leaves.split_coded),
                     self.leaf.level.eq(levels.level), self.leaf.taps.eq(leaves.taps),
                     self.leaf.kernel.eq(leaves.kernel), self.leaf.tap.eq(leaves.tap),
                     self.leaf.channel.eq(leaves.channel)]
        m.d.comb += [getattr(part, name).eq(getattr(cmd, name)) for name in SHAPE_FIELDS.values()
                     for part in (header, leaves)]

        def fail(field):
            """Stop the command on ``field`` (an error name, or a value holding an index of one)."""
            index = self.error_names.index(field) if isinstance(field, str) else field
            m.d.comb += [self.fault.eq(1), self.fault_field.eq(index)]
            m.next = "IDLE"

        def decode(kind, context=0):
            """Ask the engine for a bin this cycle on lane 0; returns whether it decoded one (on its ``bin``)."""
            m.d.comb += [self.lanes[0].decode.eq(1), self.lanes[0].kind.eq(kind), self.lanes[0].context.eq(context)]
            with m.If(bins.overrun):
                fail("stream")
            return self.lanes[0].decoded

        with m.FSM(name="wdec"):
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.comb += self.span.begin.eq(1)
                    m.next = "PRIME"
            with m.State("PRIME"):
                m.d.comb += bins.start.eq(1)
                with m.If(bins.overrun):
                    fail("stream")
                with m.Elif(bins.started):
                    m.next = "HEADER"
            with m.State("HEADER"):
                m.d.comb += header.decoded.eq(decode(BinKind.BYPASS))
                with m.If(header.fault):
                    fail(header.fault_field)
                with m.Elif(header.complete):
                    m.d.comb += flags.begin.eq(1)
                    m.next = "CTU"
            with m.State("CTU"):
                m.d.comb += flags.decoded.eq(decode(BinKind.CONTEXT, flags.context))
                with m.If(flags.mismatch):
                    fail("profile")
                with m.Elif(flags.complete):
                    m.d.comb += [leaves.first_leaf.eq(1), levels.cu_start.eq(1)]
                    m.next = "LEAF"
            with m.State("LEAF"):
                with m.If(leaves.cu_end):
                    with m.If(decode(BinKind.BYPASS)):
                        with m.If(self.lanes[0].bin != leaves.last_ctu):
                            fail("stream")
                        with m.Elif(leaves.last_ctu):
                            m.next = "STUFFING"
                        with m.Else():
                            m.d.comb += [leaves.next_ctu.eq(1), flags.begin.eq(1)]
                            m.next = "CTU"
                with m.Elif(leaves.outside):
                    m.d.comb += leaves.skip.eq(1)
                with m.Else():
                    m.d.comb += self.leaf.in_leaf.eq(1)
                    self._leaf_bins(m, levels, fail)
                    with m.If(levels.too_large):
                        fail("levels")
                    with m.Elif(levels.complete):
                        m.d.comb += [self.leaf.valid.eq(1), leaves.next_leaf.eq(1)]
            with m.State("STUFFING"):
                with m.If(decode(BinKind.STUFFING)):
                    with m.If(~self.lanes[0].bin):
                        fail("stream")
                    with m.Else():
                        m.next = "PADDING"
            with m.State("PADDING"):
                m.d.comb += self.end.check.eq(1)
                with m.If(self.end.malformed):
                    fail("stream")
                with m.Elif(self.end.ended):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
        return m

    def _leaf_bins(self, m: Module, levels: LevelDecoder, fail) -> None:
        """A leaf's bins this cycle: every lane the level wants, in its context, on the leaf position's bank."""
        m.d.comb += self.rotation.eq(levels.position)
        for wanted, request in zip(levels.lanes, self.lanes):
            m.d.comb += [request.decode.eq(wanted.wants), request.kind.eq(BinKind.CONTEXT),
                         request.context.eq(wanted.context), wanted.decoded.eq(request.decoded),
                         wanted.bin.eq(request.bin)]
        with m.If(self.bins.overrun):
            fail("stream")
