"""WDEC: the on-chip weight decoder. One command decodes one layer's chapter-10 stream (the npu profile,
codec/npu_profile.py) from DRAM into int8 weights in WEIGHT; a stream of K parts (docs/codec.md §11) on K of its
``wdec.engines`` part decoders at once, each up to ``wdec.bins_per_cycle`` bins of a leaf per cycle
(docs/rtl-wdec.md).

The unit checks the command, reads the parts header (K > 1), starts a part decoder per part and retires when
the last one has finished. It is wired from named parts (aipu.rtl.wdec_parts), one Verilog module each:
  header    the parts header's lengths, read from DRAM
  part<i>   a part decoder: fetcher, bit window, engine, contexts and syntax walk, and a one-level write buffer
  reads     the header's and the part decoders' DRAM reads onto the unit's port, round robin
  writes    the part decoders' levels onto the WEIGHT port, round robin

Every bin part decoder 0 decodes is visible on ``debug_bin_valid`` / ``debug_bin_ctx`` / ``debug_bin`` (lists
of a signal per cascade lane, lane 0 first; the software trace's (ctxIdx, bin), -1 bypass, -2 stuffing), so
tests compare the hardware bin by bin. NEED_BITS is ``aipu.sim.timing.wdec_stream``'s, the cycles a command takes
``aipu.sim.timing.wdec``'s.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib.wiring import Out, connect, flipped

from aipu.codec.npu_profile import PART_LENGTH
from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.engine import TRACE_STUFFING
from aipu.rtl.ports import dram_read_port, write_port
from aipu.rtl.unit import UnitComponent
from aipu.rtl.wdec_parts.arbiters import ReadArbiter, WriteArbiter
from aipu.rtl.wdec_parts.header import PartsHeader
from aipu.rtl.wdec_parts.part_decoder import PartDecoder
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.timing.wdec_stream import NEED_BITS, fetch_depth


class Wdec(UnitComponent):
    UNIT = Unit.WDEC
    ENGINE_ERRORS = ("stream", "profile", "levels")   # does not decode; outside the npu profile; not int8

    def __init__(self, config: HardwareConfig):
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
        config, cmd = self.config, self.view(word, Opcode.WDEC)
        engines = config.wdec.engines
        abort = Signal()
        decoders = []
        for index in range(engines):
            decoder = PartDecoder(config, self.error_names, continuation=index > 0)
            m.submodules[f"part{index}"] = ResetInserter(abort)(decoder)
            decoders.append(decoder)
        m.submodules.writes = writes = WriteArbiter(config, engines)
        connect(m, flipped(self.weight_write), writes.weight_write)
        for index, decoder in enumerate(decoders):
            connect(m, decoder.write, writes.writes[index])
            m.d.comb += [writes.pending[index].eq(decoder.pending), decoder.grant.eq(writes.grant[index])]
        arbiters, header = [writes], None
        if engines == 1:
            connect(m, flipped(self.dram_read), decoders[0].dram_read)
        else:
            m.submodules.header = header = PartsHeader(config)
            m.d.comb += [header.dram_addr.eq(cmd.dram_addr), header.parts.eq(cmd.parts)]
            header_words = PART_LENGTH.size * engines // config.dram.bytes_per_cycle + 2
            m.submodules.reads = reads = ReadArbiter(config, engines + 1,
                                                     engines * fetch_depth(config) + header_words)
            connect(m, flipped(self.dram_read), reads.dram_read)
            for reader, port in zip([decoder.dram_read for decoder in decoders] + [header.dram_read], reads.readers):
                connect(m, reader, port)
            arbiters.append(reads)
        for trace, valid, context, bin_ in zip(decoders[0].trace, self.debug_bin_valid, self.debug_bin_ctx,
                                               self.debug_bin):
            m.d.comb += [valid.eq(trace.valid), context.eq(trace.context), bin_.eq(trace.bin)]
        plan, lengths_fit = self._part_commands(m, cmd, header, decoders)
        self._sequence(m, cmd, (start, done, fault, fault_field), (abort, plan, lengths_fit), header, decoders,
                       arbiters)

    def _part_commands(self, m, cmd, header, decoders) -> tuple[Signal, Signal]:
        """Each decoder's part: its bytes after the header and the parts before it, its output channels
        [i·out_c/K, (i+1)·out_c/K) and their bytes of WEIGHT (registered when ``plan`` rises, in CHECK); the
        whole command when K = 1. Returns ``plan`` and whether the header's K lengths are the stream's (none
        zero, together with the header all of ``length``)."""
        plan, lengths_fit = Signal(), Signal()
        if len(decoders) == 1:             # K = 1 is all it executes (CHECK refuses more)
            m.d.comb += [decoders[0].command.eq(cmd), lengths_fit.eq(1)]
            return plan, lengths_fit
        taps = cmd.k_h * cmd.k_w
        offset = PART_LENGTH.size * cmd.parts
        nonzero = []
        for index, decoder in enumerate(decoders):
            part, length = decoder.command, header.lengths[index]
            planned = Signal.like(part, name=f"planned{index}")
            first = (index * cmd.out_c) // cmd.parts if index else 0
            with m.If(plan):
                m.d.sync += [planned.out_c.eq(((index + 1) * cmd.out_c) // cmd.parts - first),
                             planned.wgt_addr.eq(cmd.wgt_addr + first * taps * cmd.in_c)]
            m.d.comb += [part.as_value().eq(cmd.as_value()), part.dram_addr.eq(cmd.dram_addr + offset),
                         part.length.eq(length), part.out_c.eq(planned.out_c), part.wgt_addr.eq(planned.wgt_addr)]
            if index == 0:
                with m.If(cmd.parts == 1):
                    m.d.comb += part.eq(cmd)
            nonzero.append((length != 0) | (cmd.parts <= index))
            offset = offset + Mux(cmd.parts > index, length, 0)
        m.d.comb += lengths_fit.eq(Cat(nonzero).all() & (offset == cmd.length))
        return plan, lengths_fit

    def _sequence(self, m, cmd, control, steps, header, decoders, arbiters):
        """CHECK the command, read the parts HEADER (K > 1), LAUNCH a decoder per part, RUN until the last has
        finished or one faults (the lowest-numbered part names the fault, and every decoder stops)."""
        (start, done, fault, fault_field), (abort, plan, lengths_fit) = control, steps
        config, engines = self.config, len(decoders)
        taps = cmd.k_h * cmd.k_w
        used = Signal(engines)
        finished = Signal(engines)
        m.d.comb += used.eq((1 << cmd.parts) - 1)

        def fail(name):
            m.d.comb += [fault.eq(1), fault_field.eq(self.error_index(name) if isinstance(name, str) else name)]
            m.next = "IDLE"

        with m.FSM(name="wdec"):
            with m.State("IDLE"):
                with m.If(start):
                    m.d.comb += [arbiter.clear.eq(1) for arbiter in arbiters]
                    m.d.sync += finished.eq(0)
                    m.next = "CHECK"
            with m.State("CHECK"):
                with m.If((cmd.parts == 0) | (cmd.parts > engines) | (cmd.parts > cmd.out_c)):
                    fail("parts")
                with m.Elif(cmd.wgt_addr + cmd.out_c * cmd.in_c * taps > config.buffer(Buffer.WEIGHT).bytes):
                    fail("wgt_addr")
                with m.Elif(cmd.dram_addr + cmd.length > (1 << config.dram.address_bits)):
                    fail("dram_addr")
                with m.Elif(cmd.parts == 1):
                    m.d.comb += decoders[0].start.eq(1)
                    m.next = "RUN"
                if header is not None:
                    with m.Elif(cmd.length < PART_LENGTH.size * cmd.parts):
                        fail("stream")
                    with m.Else():
                        m.d.comb += [header.begin.eq(1), plan.eq(1)]
                        m.next = "HEADER"
            if header is not None:
                with m.State("HEADER"):
                    with m.If(header.complete):
                        m.next = "LAUNCH"
                with m.State("LAUNCH"):
                    with m.If(~lengths_fit):
                        fail("stream")
                    with m.Else():
                        m.d.comb += [decoder.start.eq(used[index]) for index, decoder in enumerate(decoders)]
                        m.next = "RUN"
            with m.State("RUN"):
                faults = Cat(decoder.fault for decoder in decoders)
                ended = finished | Cat(decoder.done for decoder in decoders)
                m.d.sync += finished.eq(ended)
                with m.If(faults.any()):
                    for index in reversed(range(engines)):
                        with m.If(faults[index]):
                            fail(decoders[index].fault_field)
                    m.d.comb += abort.eq(1)
                with m.Elif((ended & used) == used):
                    m.d.comb += done.eq(1)
                    m.next = "IDLE"
