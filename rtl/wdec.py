"""WDEC: the on-chip weight decoder. One command decodes one layer's chapter-10 stream (the npu profile,
codec/npu_profile.py) from DRAM into int8 weights in WEIGHT, one bin per cycle (docs/rtl-wdec.md).

The engine is wired from named parts (aipu.rtl.wdec_parts), one Verilog module each:
  fetcher   word reads from DRAM into a FIFO deep enough to cover the read latency
  window    the bit window that always holds the NEED_BITS the engine may consume in a cycle
  engine    the arithmetic decoder of 10.4.3.3 (renormalisation, decision, bypass, stuffing bin)
  contexts  the context RAM with its update_ctx
  syntax    the command's sequence through the profile's syntax: header fields (bypass FL), CTU flags, the
            unitree's leaves in Morton order with the UEGk de-binariser, the write of each level at its
            [O][KH][KW][I] byte

Every bin the engine decodes is visible on ``debug_bin_valid`` / ``debug_bin_ctx`` / ``debug_bin`` (the
software trace's (ctxIdx, bin), -1 bypass, -2 stuffing), so tests compare the hardware bin by bin.
"""
from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

from amaranth.hdl import Signal
from amaranth.lib.wiring import Out, connect, flipped

from aipu.codec.errors import CodecError
from aipu.codec.npu_profile import decode_profile_compiled
from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.engine import TRACE_STUFFING
from aipu.rtl.ports import DramPhases, dram_read_port, write_port
from aipu.rtl.unit import UnitComponent
from aipu.rtl.wdec_parts.contexts import ContextMemory
from aipu.rtl.wdec_parts.engine import ArithmeticDecoder
from aipu.rtl.wdec_parts.fetcher import WordFetcher
from aipu.rtl.wdec_parts.interfaces import NEED_BITS
from aipu.rtl.wdec_parts.syntax import SyntaxWalk
from aipu.rtl.wdec_parts.window import BitWindow
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.machine.isa import Opcode, Unit


class Wdec(UnitComponent):
    UNIT = Unit.WDEC
    ENGINE_ERRORS = ("stream", "profile", "levels")   # does not decode; outside the npu profile; not int8

    def __init__(self, config: HardwareConfig):
        if config.wdec.bins_per_cycle != 1:
            raise ValueError(f"Wdec decodes one bin a cycle: wdec.bins_per_cycle = {config.wdec.bins_per_cycle} "
                             "is for the cycle model only, the RTL needs 1")
        super().__init__(config)
        self.debug_bin_valid = Signal()
        self.debug_bin_ctx = Signal(range(TRACE_STUFFING, NUM_CONTEXTS))
        self.debug_bin = Signal()

    def ports(self, config: HardwareConfig) -> dict:
        if 8 * config.dram.bytes_per_cycle < NEED_BITS:
            raise ValueError(f"WDEC needs DRAM words of at least {NEED_BITS} bits to decode a bin every cycle")
        return {"dram_read": Out(dram_read_port(config)), "weight_write": Out(write_port(config, Buffer.WEIGHT))}

    def elaborate_engine(self, m, word, start, done, fault, fault_field):
        m.submodules.syntax = syntax = SyntaxWalk(self.config, self.error_names)
        m.submodules.fetcher = fetcher = WordFetcher(self.config)
        m.submodules.window = window = BitWindow(self.config)
        m.submodules.engine = engine = ArithmeticDecoder()
        m.submodules.contexts = contexts = ContextMemory()
        m.d.comb += [syntax.command.eq(self.view(word, Opcode.WDEC)), syntax.start.eq(start), done.eq(syntax.done),
                     fault.eq(syntax.fault), fault_field.eq(syntax.fault_field)]
        connect(m, syntax.span, fetcher.span, window.span)
        connect(m, flipped(self.dram_read), fetcher.dram_read)
        connect(m, fetcher.words, window.words)
        m.d.comb += window.drained.eq(fetcher.drained)
        connect(m, window.bits, engine.bits)
        connect(m, syntax.end, window.end)
        connect(m, syntax.bins, engine.bins)
        connect(m, engine.context, contexts.port)
        m.d.comb += contexts.clear.eq(syntax.span.begin)
        connect(m, flipped(self.weight_write), syntax.weight_write)
        m.d.comb += [self.debug_bin_valid.eq(engine.trace.valid), self.debug_bin_ctx.eq(engine.trace.context),
                     self.debug_bin.eq(engine.trace.bin)]


def command_cycles(config: HardwareConfig, command, stream: bytes) -> int:
    """Cycles of a WDEC command on a profile stream that decodes (docs/rtl-wdec.md): the check, the wait for
    the first bits, the 9-bit engine start, one cycle per bin, per Morton candidate outside a CU and per
    ZERO_RUN_BITS of a long zero run, and the padding check."""
    return dram_phases(config, command, stream).cycles


def dram_phases(config: HardwareConfig, command, stream: bytes) -> DramPhases:
    """WDEC's cycles around its DRAM transfer: from the first word to the last bin the stream's words are
    read at the pace the engine uses them (at most one a cycle); the check and the read latency come before,
    the padding check after. A stream that does not decode has no timing: the RTL stops on it with an error."""
    try:
        decoded = decoded_profile(stream, (command.out_c, command.in_c, command.k_h, command.k_w))
    except CodecError as error:
        raise ExecutionError(f"the weight stream at dram_addr = {command.dram_addr:#x} ({command.length} bytes) does "
                             f"not decode in the npu profile: {error}") from None
    first = first_bits_cycles(config, command.dram_addr, command.length) - config.dram.latency_cycles
    bins = -(-decoded.bins // config.wdec.bins_per_cycle)      # the RTL: one a cycle
    transfer = first + bins + decoded.morton_skips + decoded.zero_run_cycles
    words = _stream_words(config, command.dram_addr, command.length)
    return DramPhases(1 + config.dram.latency_cycles, transfer, min(words, transfer), 1)


class StreamCounts(NamedTuple):
    bins: int
    morton_skips: int
    zero_run_cycles: int


def decoded_profile(stream: bytes, shape: tuple[int, int, int, int]) -> StreamCounts:
    """The profile decoder's counts of one stream, remembered by the stream's digest (a report asks for the
    cycles and the bins of the same streams; the decoded levels are not kept)."""
    key = (hashlib.blake2b(stream, digest_size=16).digest(), tuple(shape))
    counts = _STREAM_COUNTS.get(key)
    if counts is None:
        if len(_STREAM_COUNTS) >= _STREAM_COUNTS_KEPT:
            _STREAM_COUNTS.clear()
        decoded = decode_profile_compiled(stream, shape)
        counts = _STREAM_COUNTS[key] = StreamCounts(decoded.bins, decoded.morton_skips, decoded.zero_run_cycles)
    return counts


_STREAM_COUNTS: dict[tuple[bytes, tuple], StreamCounts] = {}
_STREAM_COUNTS_KEPT = 1 << 16


def _stream_words(config: HardwareConfig, dram_addr: int, length: int) -> int:
    """DRAM words that hold the stream's bytes."""
    nbytes = config.dram.bytes_per_cycle
    return (dram_addr + length - 1) // nbytes - dram_addr // nbytes + 1


def first_bits_cycles(config: HardwareConfig, dram_addr: int, length: int) -> int:
    """Cycles from the first DRAM request to the 9-bit engine start, which waits until the window holds
    NEED_BITS (or the whole stream): the read latency, one cycle each into the FIFO and into the window, one
    per word it takes (words arrive one a cycle) and the start itself."""
    nbytes = config.dram.bytes_per_cycle
    needed = math.ceil((8 * (dram_addr % nbytes) + NEED_BITS) / (8 * nbytes))
    words = min(_stream_words(config, dram_addr, length), needed)
    return config.dram.latency_cycles + 2 + words
