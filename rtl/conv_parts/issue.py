"""CONV's issue: one output pixel every ``beats`` cycles, its ACT and ACC words read and gathered into runs."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.conv_parts.interfaces import (PHASE, command_field, dim, geometry, most_beats, next_block, pixel_operands,
                                            pixel_place)
from aipu.rtl.conv_parts.window import WordWindow, reads_needed
from aipu.rtl.lanes import counter
from aipu.rtl.ports import read_port, word_bytes
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.timing.conv import ENTRY_BYTES


class PixelIssue(wiring.Component):
    """At ``phase.boundary`` takes the loaded ``block`` as the streaming one; while ``phase.issuing``, walks
    its output pixels row by row (``step_x``, ``step_y`` ACT bytes apart, ``out_c`` ACC entries apart), each
    in the command's ``beats`` cycles of two ACT and two ACC words (``act_read``/``act_read_b``,
    ``acc_read``/``acc_read_b``: words ``w`` and ``w + 1``).

    A cycle later the words arrive; two ``WordWindow``s gather them, and in the data cycle of the pixel's last
    beat ``operands`` holds its input run (up to ``2 * rows`` bytes) and ``cols`` old accumulators, with the
    bank and the overwrite of its block, and ``place`` says where its accumulators go back.

    Signature: ``out_c`` (In: the command's), ``geometry``, ``phase``, ``block`` (In: from the setup, the
    sequencer, the block walk), the four read ports, ``operands`` (Out: to the MAC array), ``place`` (Out:
    to the write-back).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({
            "out_c": In(command_field(config, "out_c")), "geometry": In(geometry(config)), "phase": In(PHASE),
            "block": In(next_block(config)),
            "act_read": Out(read_port(config, Buffer.ACT)), "act_read_b": Out(read_port(config, Buffer.ACT)),
            "acc_read": Out(read_port(config, Buffer.ACC)), "acc_read_b": Out(read_port(config, Buffer.ACC)),
            "operands": Out(pixel_operands(config)), "place": Out(pixel_place(config))})

    def elaborate(self, platform) -> Module:
        m = Module()
        geo, phase, block, place = self.geometry, self.phase, self.block, self.place
        config, beats = self.config, most_beats(self.config)
        act_port, acc_port = word_bytes(config, Buffer.ACT), word_bytes(config, Buffer.ACC)
        act_row, act_pixel, acc_pixel = Signal.like(block.act), Signal.like(block.act), Signal.like(block.acc)
        out_x, beat = Signal(range(dim(config))), counter(beats)
        stream_act_bytes, stream_cols = Signal.like(block.act_bytes), Signal.like(block.cols)
        stream_overwrites = Signal()

        act_word = act_pixel >> (act_port.bit_length() - 1)
        acc_byte = acc_pixel * ENTRY_BYTES
        acc_word = acc_byte >> (acc_port.bit_length() - 1)
        act_ports, acc_ports = (self.act_read, self.act_read_b), (self.acc_read, self.acc_read_b)
        for half in range(2):     # each run only as far as the block's groups' in-channels and its cols use
            act, acc = act_word + 2 * beat + half, acc_word + 2 * beat + half
            m.d.comb += [act_ports[half].addr.eq(act), acc_ports[half].addr.eq(acc),
                         act_ports[half].en.eq(phase.issuing & reads_needed(act, act_pixel, stream_act_bytes,
                                                                             act_port)),
                         acc_ports[half].en.eq(phase.issuing & reads_needed(acc, acc_byte, stream_cols * ENTRY_BYTES,
                                                                             acc_port))]
        with m.If(phase.issuing):
            with m.If(beat == geo.beats - 1):
                m.d.sync += [beat.eq(0), acc_pixel.eq(acc_pixel + self.out_c)]
                with m.If(out_x == geo.out_w - 1):
                    m.d.sync += [out_x.eq(0), act_row.eq(act_row + geo.step_y), act_pixel.eq(act_row + geo.step_y)]
                with m.Else():
                    m.d.sync += [out_x.eq(out_x + 1), act_pixel.eq(act_pixel + geo.step_x)]
            with m.Else():
                m.d.sync += beat.eq(beat + 1)
        with m.If(phase.boundary):      # last, so that it wins over the walk's own updates
            m.d.sync += [act_row.eq(block.act), act_pixel.eq(block.act), acc_pixel.eq(block.acc), out_x.eq(0),
                         beat.eq(0), stream_act_bytes.eq(block.act_bytes), stream_cols.eq(block.cols),
                         stream_overwrites.eq(block.overwrites)]

        # the reads' data cycle
        pixel_valid, pixel_beat = Signal(), counter(beats)
        pixel_act_offset = Signal(range(act_port))
        m.d.sync += [pixel_valid.eq(phase.issuing), pixel_beat.eq(beat),
                     pixel_act_offset.eq(act_pixel[:len(pixel_act_offset)]),
                     place.acc_offset.eq(acc_byte[:len(place.acc_offset)]), place.acc_word.eq(acc_word),
                     self.operands.bank.eq(phase.bank), place.cols.eq(stream_cols),
                     self.operands.overwrites.eq(stream_overwrites)]
        m.d.comb += place.valid.eq(pixel_valid & (pixel_beat == geo.beats - 1))
        windows = (("act_window", act_ports, act_port, pixel_act_offset, self.operands.x),
                   ("acc_window", acc_ports, acc_port, place.acc_offset, self.operands.old))
        for name, ports, port_bytes, offset, run in windows:
            m.submodules[name] = window = WordWindow(port_bytes, beats, len(run) // 8)
            m.d.comb += [window.a.eq(ports[0].data), window.b.eq(ports[1].data), window.valid.eq(pixel_valid),
                         window.beat.eq(pixel_beat), window.offset.eq(offset), run.eq(window.run)]
        return m
