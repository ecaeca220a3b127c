"""LUT's write-back: each stage-2 group's bytes (or a softmax result) packed into whole OUT words."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.lut_parts.interfaces import lanes, log2, operands
from aipu.rtl.ports import word_bytes, write_port
from aipu.sim.machine.arch import DTYPE_BYTES, LUT_ENTRY_BITS, Buffer, HardwareConfig


class OutputPacker(wiring.Component):
    """Merges the low ``out_type`` bytes of each ``value`` of a group (``group_valid``, ``group_bytes`` output
    bytes) or, for SOFTMAX, the one ``softmax_result`` into a pending OUT word at the destination's byte
    offset (from ``begin``); a word is written as soon as it is full, the last group's (``*_last``) bytes
    whatever they fill, with a byte mask. ``done`` pulses with the command's last write.

    Signature: ``operands`` (In), ``begin`` (In), ``group_valid``, ``group_last``, ``group_bytes``, ``value``
    (In, one per lane), ``softmax_valid``, ``softmax_last``, ``softmax_result`` (In), ``out_write`` (the OUT
    port), ``done`` (Out).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        out_word_bytes = word_bytes(config, Buffer.OUT)
        super().__init__({"operands": In(operands(config)), "begin": In(1), "group_valid": In(1),
                          "group_last": In(1), "group_bytes": In(range(out_word_bytes + 1)),
                          "value": In(LUT_ENTRY_BITS).array(lanes(config)), "softmax_valid": In(1),
                          "softmax_last": In(1), "softmax_result": In(LUT_ENTRY_BITS),
                          "out_write": Out(write_port(config, Buffer.OUT)), "done": Out(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        ops, port, out_word_bytes = self.operands, self.out_write, word_bytes(self.config, Buffer.OUT)
        valid, last = Signal(), Signal()
        nbytes = Signal(range(out_word_bytes + 1))
        m.d.comb += [valid.eq(Mux(ops.is_softmax, self.softmax_valid, self.group_valid)),
                     last.eq(Mux(ops.is_softmax, self.softmax_last, self.group_last)),
                     nbytes.eq(Mux(ops.is_softmax, Const(1) << ops.out_log2, self.group_bytes))]
        values = [Mux(ops.is_softmax, self.softmax_result, self.value[0]), *self.value[1:]]
        group = Signal(8 * out_word_bytes)
        with m.Switch(ops.out_log2):
            for size in set(DTYPE_BYTES.values()):
                with m.Case(log2(size)):
                    m.d.comb += group.eq(Cat(value[:8 * size] for value in values[:out_word_bytes // size]))
        ones = Const((1 << out_word_bytes) - 1, out_word_bytes)
        group_mask = Mux(valid, ~(ones << nbytes), 0)[:out_word_bytes]
        group_data = group & Cat(bit.replicate(8) for bit in group_mask)

        pending = Signal(8 * out_word_bytes)
        pending_mask = Signal(out_word_bytes)
        fill = Signal(range(out_word_bytes))
        out_word = Signal(range(self.config.buffer(Buffer.OUT).bytes // out_word_bytes + 1))
        merged = pending | (group_data << (fill * 8))
        merged_mask = pending_mask | (group_mask << fill)
        filled = fill + nbytes
        flush = Signal()
        m.d.comb += [port.addr.eq(out_word), port.data.eq(merged[:8 * out_word_bytes]),
                     port.mask.eq(merged_mask[:out_word_bytes])]
        with m.If(valid):
            with m.If((filled >= out_word_bytes) | last):
                m.d.comb += port.en.eq(1)
                m.d.sync += [pending.eq(merged[8 * out_word_bytes:]), pending_mask.eq(merged_mask[out_word_bytes:]),
                             out_word.eq(out_word + 1)]
            with m.Else():
                m.d.sync += [pending.eq(merged), pending_mask.eq(merged_mask)]
            m.d.sync += fill.eq(Mux(filled >= out_word_bytes, filled - out_word_bytes, filled))
            with m.If(last):
                with m.If(filled > out_word_bytes):
                    m.d.sync += flush.eq(1)
                with m.Else():
                    m.d.comb += self.done.eq(1)
        with m.If(flush):   # the pending word's tail: merged is just pending here (stage 2 is idle)
            m.d.comb += [port.en.eq(1), self.done.eq(1)]
            m.d.sync += flush.eq(0)
        with m.If(self.begin):
            m.d.sync += [pending.eq(0), pending_mask.eq(0), fill.eq(ops.dst_addr & (out_word_bytes - 1)),
                         out_word.eq(ops.dst_addr >> log2(out_word_bytes))]
        return m
