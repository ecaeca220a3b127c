"""LUT's element fetch: the source window and the groups of elements RUN takes, one a cycle."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.commands import command_layout
from aipu.rtl.lut_parts.interfaces import lanes, operands, source_bytes, window_bytes
from aipu.rtl.ports import read_port, word_bytes
from aipu.sim.machine.arch import LUT16_INPUT_BITS, Buffer, HardwareConfig
from aipu.sim.machine.isa import VECTOR_SOURCE_BUFFERS, Opcode


class ElementFetch(wiring.Component):
    """Keeps a two-word window on the source (the last word taken and the word the port holds) and cuts each
    group's bytes from it at the group's byte offset, so every lane sees its element: ``raw[j]`` (byte j, a
    DIRECT8 index) and ``sample[j]`` (bytes 2j, 2j + 1 as int16, 0 for lanes beyond the window).

    ``begin`` points it at ``src_addr``; ``prime`` reads the next source word (the prologue; ``prime_hold``
    takes the word read into the window); each ``advance`` moves on a group of 2^group_log2 elements (fewer
    at the end: ``last_group``), reading the next word when the offset passes the end of one, and stages the
    group for RUN stage 2: ``staged_valid``, ``staged_last`` and ``staged_bytes`` (its output bytes) in the
    next cycle.

    Signature: ``command`` (In: the LUT word), ``operands`` (In), ``begin``, ``prime``, ``prime_hold``,
    ``advance`` (In), ``act_read``, ``out_read`` (the source ports), ``raw``, ``sample`` (Out, one per lane),
    ``last_group``, ``staged_valid``, ``staged_last``, ``staged_bytes`` (Out).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        out_word_bytes = word_bytes(config, Buffer.OUT)
        super().__init__({
            "command": In(command_layout(config, Opcode.LUT)), "operands": In(operands(config)),
            "begin": In(1), "prime": In(1), "prime_hold": In(1), "advance": In(1),
            **{f"{buffer.name.lower()}_read": Out(read_port(config, buffer)) for buffer in VECTOR_SOURCE_BUFFERS},
            "raw": Out(8).array(lanes(config)), "sample": Out(signed(LUT16_INPUT_BITS)).array(lanes(config)),
            "last_group": Out(1), "staged_valid": Out(1), "staged_last": Out(1),
            "staged_bytes": Out(range(out_word_bytes + 1))})

    def elaborate(self, platform) -> Module:
        m = Module()
        config, cmd, ops = self.config, self.command, self.operands
        sizes, widest = source_bytes(config), window_bytes(config)
        sources = {buffer: getattr(self, f"{buffer.name.lower()}_read") for buffer in VECTOR_SOURCE_BUFFERS}
        src_word = Signal(range(max(config.buffer(b).bytes // size for b, size in sizes.items()) + 2))
        src_last = Signal(8 * widest)
        src_held = Mux(ops.from_out, sources[Buffer.OUT].data, sources[Buffer.ACT].data)
        src_pos = Signal(range(widest))
        window = Mux(ops.from_out, Cat(src_last[:8 * sizes[Buffer.OUT]], sources[Buffer.OUT].data),
                     Cat(src_last[:8 * sizes[Buffer.ACT]], sources[Buffer.ACT].data))
        chunk = window.bit_select(src_pos * 8, 8 * widest)
        read_source = Signal()
        last_word = Signal.like(src_word)       # the source's last: no read past it (docs/isa.md, "Banks")
        for buffer, port in sources.items():
            m.d.comb += [port.addr.eq(src_word),
                         port.en.eq(read_source & (cmd.src_buf == buffer) & (src_word <= last_word))]
        for lane, (raw, sample) in enumerate(zip(self.raw, self.sample)):
            m.d.comb += raw.eq(chunk.word_select(lane, 8))
            if (lane + 1) * LUT16_INPUT_BITS <= 8 * widest:
                m.d.comb += sample.eq(chunk.word_select(lane, LUT16_INPUT_BITS))

        left = Signal.like(cmd.count)
        group_full = Const(1) << ops.group_log2
        group_count = Mux(left < group_full, left, group_full)
        source_word_bytes = Const(1) << ops.source_log2
        m.d.comb += self.last_group.eq(left <= group_full)
        m.d.sync += self.staged_valid.eq(0)
        with m.If(self.begin):
            m.d.sync += [src_word.eq(cmd.src_addr >> ops.source_log2),
                         last_word.eq((cmd.src_addr + (cmd.count << ops.in_log2) - 1) >> ops.source_log2),
                         src_pos.eq(cmd.src_addr & (source_word_bytes - 1)), left.eq(cmd.count)]
        with m.If(self.prime):
            m.d.comb += read_source.eq(1)
            m.d.sync += src_word.eq(src_word + 1)
            with m.If(self.prime_hold):
                m.d.sync += src_last.eq(src_held)
        with m.If(self.advance):
            advanced = src_pos + (Const(1) << (ops.group_log2 + ops.in_log2))
            with m.If(advanced >= source_word_bytes):
                m.d.comb += read_source.eq(1)
                m.d.sync += [src_pos.eq(advanced - source_word_bytes), src_last.eq(src_held), src_word.eq(src_word + 1)]
            with m.Else():
                m.d.sync += src_pos.eq(advanced)
            m.d.sync += [left.eq(left - group_count), self.staged_valid.eq(1), self.staged_last.eq(self.last_group),
                         self.staged_bytes.eq(group_count << ops.out_log2)]
        return m
