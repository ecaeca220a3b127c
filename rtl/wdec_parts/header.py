"""WDEC's parts header: the little-endian u32 byte lengths in front of a stream of several parts
(docs/codec.md §11, "Parts"), read from DRAM word by word."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.codec.npu_profile import PART_LENGTH
from aipu.rtl.ports import dram_read_port
from aipu.rtl.wdec_parts.interfaces import command_field
from aipu.sim.machine.arch import HardwareConfig


class PartsHeader(wiring.Component):
    """From ``begin``: requests the words holding the ``parts`` lengths at ``dram_addr``, back to back, and
    takes each length's bytes from the words as they come. ``complete`` rises in the cycle the last word
    arrives; ``lengths`` (one per part of the ``parts`` most, as many as the unit has part decoders) hold
    their values from the cycle after.

    Signature: ``begin``, ``dram_addr``, ``parts`` (In), ``dram_read`` (Out), ``lengths`` (Out: a 32-bit
    length per part decoder), ``complete`` (Out).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({"begin": In(1), "dram_addr": In(command_field(config, "dram_addr")),
                          "parts": In(command_field(config, "parts")), "dram_read": Out(dram_read_port(config)),
                          "lengths": Out(8 * PART_LENGTH.size).array(config.wdec.engines), "complete": Out(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        dram, nbytes = self.dram_read, self.config.dram.bytes_per_cycle
        offset_bits = (nbytes - 1).bit_length()
        header_end = self.dram_addr + PART_LENGTH.size * self.parts
        first_word = self.dram_addr >> offset_bits
        words = ((header_end - 1) >> offset_bits) - first_word + 1
        request_addr = Signal.like(dram.addr)
        requests_left = Signal(range(PART_LENGTH.size * len(self.lengths) // nbytes + 3))
        received = Signal.like(requests_left)
        m.d.comb += [dram.valid.eq(requests_left != 0), dram.addr.eq(request_addr),
                     self.complete.eq(dram.data_valid & (received == words - 1))]
        with m.If(dram.valid & dram.ready):
            m.d.sync += [request_addr.eq(request_addr + 1), requests_left.eq(requests_left - 1)]
        with m.If(dram.data_valid):
            m.d.sync += received.eq(received + 1)
            for index, length in enumerate(self.lengths):
                for byte in range(PART_LENGTH.size):
                    address = self.dram_addr + PART_LENGTH.size * index + byte
                    with m.If((address >> offset_bits) - first_word == received):
                        lane = address[:offset_bits] if offset_bits else 0
                        m.d.sync += length[8 * byte:8 * byte + 8].eq(dram.data.word_select(lane, 8))
        with m.If(self.begin):
            m.d.sync += [request_addr.eq(first_word), requests_left.eq(words), received.eq(0)]
        return m
