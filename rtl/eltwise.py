"""ELTWISE in the POOL unit, and the element plumbing POOL shares with it (docs/rtl-pool.md).

:class:`SourceReads` reads one element (or operand pair) per cycle from ACT or OUT, :func:`pack_output`
writes a stream of output elements as whole OUT words, :func:`dtype_bounds` / :func:`element_value` read
the element types. :class:`EltwiseEngine` takes one element pair per cycle through three stages:

  issue   read a[i] (first port of a_buf) and b[i] (second port of b_buf)
  scale   d = value - zero point; ADD/SUB/MAX/MIN: t_a = d_a * (M_a << (N - N_a)), t_b likewise, with
          N = max(N_a, N_b) (golden eltwise: the terms are aligned exactly); MUL: t_a = d_a * d_b * M_a;
          RESCALE: t_a = d_a * M_a (golden concat's requantize), t_b = 0
  output  combine, round(. / 2**N) in the command's rounding, + out_zero_point, clamp to [qmin, qmax]

The aligned multipliers and N are registered once per command (CHECK), so the pipeline has one multiplier
per operand and one barrel shifter.
"""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed

from aipu.rtl.arith import clamp, rounding_shift_right
from aipu.rtl.ports import word_bytes
from aipu.rtl.unit import UnitComponent
from aipu.sim.golden.eltwise import MAX_ALIGN
from aipu.sim.machine.arch import (DTYPE_NUMPY, ELTWISE_SUM_BITS, MAC_OPERAND_BITS, MULTIPLIER_BITS, SHIFT_BITS,
                                   Buffer, DType, HardwareConfig)
from aipu.sim.machine.isa import VECTOR_SOURCE_BUFFERS, EltwiseOp

SOURCE_BUFFERS = VECTOR_SOURCE_BUFFERS       # where POOL and ELTWISE read

OPERAND_TYPES = (DType.INT8, DType.UINT8)
ALIGNED_BITS = MULTIPLIER_BITS + MAX_ALIGN        # M << (N - N_i) of an operand that passed the alignment check
PRODUCT_BITS = 2 * MAC_OPERAND_BITS + MULTIPLIER_BITS   # MUL: d_a * d_b * M


def wire(m: Module, expression, name: str) -> Signal:
    """``expression`` as a named signal: a shared result computed once (and readable in waveforms)."""
    signal = Signal(Value.cast(expression).shape(), name=name)
    m.d.comb += signal.eq(expression)
    return signal


def dtype_bounds(dtype, types=tuple(DType)):
    """(lowest, highest) value of the element type ``dtype`` (a DType-valued signal), one of ``types``."""
    low, high = Const(0, signed(18)), Const(0, signed(18))
    for member in types:
        info = np.iinfo(DTYPE_NUMPY[member])
        low, high = Mux(dtype == member, int(info.min), low), Mux(dtype == member, int(info.max), high)
    return low, high


def element_value(dtype, low_byte, high_byte):
    """The value of an element of ``dtype`` from its (little-endian) bytes, as a signed 17-bit value."""
    return Mux(dtype == DType.INT16, Cat(low_byte, high_byte).as_signed(),
               Mux(dtype == DType.INT8, low_byte.as_signed(), low_byte))


def is_wide(dtype):
    """1 for the two-byte element type."""
    return dtype == DType.INT16


class SourceReads:
    """The unit's two read ports per source buffer, one element each per cycle.

    POOL (``straddle`` = 1) reads the word holding its element's first byte through the first port and the
    next word through the second, so a two-byte element may cross a word boundary. ELTWISE reads operand a
    through the first port of ``a_buffer`` and operand b through the second port of ``b_buffer``. An engine
    drives ``address``/``enable`` pairs; the element's bytes are in ``first`` / ``second`` the next cycle.
    """

    def __init__(self, m: Module, unit: UnitComponent, straddle, a_buffer, b_buffer):
        width = unit.config.width_parameters["sram_addr_bits"]
        self.a_address, self.b_address = Signal(width), Signal(width)
        self.a_enable, self.b_enable = Signal(), Signal()
        self.lanes = []
        for buffer in SOURCE_BUFFERS:
            name = buffer.name.lower()
            first, second = getattr(unit, f"{name}_read"), getattr(unit, f"{name}_read_b")
            shift = (word_bytes(unit.config, buffer) - 1).bit_length()
            a_offset = Signal(shift, name=f"{name}_a_offset")
            b_offset = Signal(shift, name=f"{name}_b_offset")
            a_here, b_here = self.a_enable & (a_buffer == buffer), self.b_enable & (b_buffer == buffer)
            a_word, b_word = self.a_address >> shift, self.b_address >> shift
            m.d.comb += [first.addr.eq(a_word), first.en.eq(a_here),
                         second.addr.eq(Mux(straddle, a_word + 1, b_word)),
                         second.en.eq(Mux(straddle, a_here, b_here))]
            with m.If(a_here):
                m.d.sync += a_offset.eq(self.a_address)
            with m.If(b_here):
                m.d.sync += b_offset.eq(self.b_address)
            self.lanes.append((buffer, first, second, a_offset, b_offset))

        first = [Const(0, 8), Const(0, 8)]
        second = Const(0, 8)
        for buffer, first_port, second_port, a_offset, b_offset in self.lanes:
            words = Cat(first_port.data, second_port.data)
            first = [Mux(a_buffer == buffer, words.word_select(a_offset + index, 8), first[index]) for index in (0, 1)]
            second = Mux(b_buffer == buffer, second_port.data.word_select(b_offset, 8), second)
        #: bytes 0 and 1 of the element read through the first port(s) in the previous cycle
        self.first = [wire(m, value, f"first_byte{index}") for index, value in enumerate(first)]
        #: the byte read through the second port (ELTWISE operand b) in the previous cycle
        self.second = wire(m, second, "second_byte")


def pack_output(m: Module, config: HardwareConfig, port, begin, dst_addr, wide, valid, value, flush) -> None:
    """Write a contiguous stream of output elements (from ``dst_addr``, one per ``valid``) to OUT, a word at a
    time: bytes gather in a pending word that is written when its last byte arrives; ``flush`` writes it
    as it is. An element straddling two words completes the first and starts the second, so at most one
    word is written per cycle (this needs OUT words of at least two bytes)."""
    nbytes = word_bytes(config, Buffer.OUT)
    if nbytes < 2:
        raise ValueError("the POOL unit needs OUT port_bytes >= 2 to write an int16 element per cycle")
    shift = (nbytes - 1).bit_length()
    address = Signal(len(dst_addr) + 1)
    pending_data, pending_mask = Signal(8 * nbytes), Signal(nbytes)
    offset = address[:shift]
    placed_data = Cat(value[:8], Mux(wide, value[8:16], 0)) << (offset * 8)
    placed_mask = Cat(Const(1), wide) << offset
    merged_data = pending_data | placed_data[:8 * nbytes]
    merged_mask = pending_mask | placed_mask[:nbytes]
    full = merged_mask[-1]
    m.d.comb += port.addr.eq(address >> shift)
    with m.If(begin):
        m.d.sync += [address.eq(dst_addr), pending_data.eq(0), pending_mask.eq(0)]
    with m.Elif(valid):
        m.d.sync += address.eq(address + 1 + wide)
        with m.If(full):
            m.d.comb += [port.en.eq(1), port.data.eq(merged_data), port.mask.eq(merged_mask)]
            m.d.sync += [pending_data.eq(placed_data[8 * nbytes:]), pending_mask.eq(placed_mask[nbytes:])]
        with m.Else():
            m.d.sync += [pending_data.eq(merged_data), pending_mask.eq(merged_mask)]
    with m.Elif(flush):
        m.d.comb += [port.en.eq(1), port.data.eq(pending_data), port.mask.eq(pending_mask)]


def region_beyond(config: HardwareConfig, buffer_select, address, nbytes):
    """The byte region [address, address + nbytes) ends beyond the selected buffer."""
    end = address + nbytes
    beyond = Const(0)
    for buffer in SOURCE_BUFFERS:
        beyond = Mux(buffer_select == buffer, end > config.buffer(buffer).bytes, beyond)
    return beyond


class EltwiseEngine:
    """The ELTWISE datapath; ``faults`` lists (condition, field) in the interpreter's order of checks."""

    def __init__(self, unit, m: Module, command, phase: dict, reads: SourceReads, enabled):
        self.unit, self.m, self.command, self.phase, self.enabled = unit, m, command, phase, enabled
        self.out_valid, self.out_last = Signal(), Signal()
        self.out_value = Signal(signed(17))
        c = command
        self.two_operands = (c.op == EltwiseOp.ADD) | (c.op == EltwiseOp.SUB) | (c.op == EltwiseOp.MAX) | \
            (c.op == EltwiseOp.MIN)
        self.faults = self._faults()
        self._datapath(reads)

    def _faults(self) -> list[tuple]:
        c, config = self.command, self.unit.config
        is_mul, is_rescale = c.op == EltwiseOp.MUL, c.op == EltwiseOp.RESCALE
        unused = [(is_mul, name) for name in ("b_multiplier", "b_shift")]
        unused += [(is_rescale, name) for name in ("b_buf", "b_addr", "b_type", "b_zero_point", "b_multiplier",
                                                  "b_shift")]
        a_low, a_high = dtype_bounds(c.a_type, OPERAND_TYPES)
        b_low, b_high = dtype_bounds(c.b_type, OPERAND_TYPES)
        out_low, out_high = dtype_bounds(c.out_type)
        return [
            (region_beyond(config, c.a_buf, c.a_addr, c.count), "a_addr"),
            *((selected & (getattr(c, name) != 0), name) for selected, name in unused),
            (~is_rescale & region_beyond(config, c.b_buf, c.b_addr, c.count), "b_addr"),
            ((c.a_zero_point < a_low) | (c.a_zero_point > a_high), "a_zero_point"),
            (~is_rescale & ((c.b_zero_point < b_low) | (c.b_zero_point > b_high)), "b_zero_point"),
            # the operand with the smaller shift would be aligned by more than MAX_ALIGN bits
            (self.two_operands & (c.b_shift > c.a_shift + MAX_ALIGN), "a_shift"),
            (self.two_operands & (c.a_shift > c.b_shift + MAX_ALIGN), "b_shift"),
            ((c.qmin < out_low) | (c.qmin > out_high), "qmin"),
            ((c.qmax < out_low) | (c.qmax > out_high), "qmax"),
            (c.qmin > c.qmax, "qmin"),
            ((c.out_zero_point < out_low) | (c.out_zero_point > out_high), "out_zero_point"),
            (c.dst_addr + c.count * (1 + (c.out_type == DType.INT16)) > config.buffer(Buffer.OUT).bytes,
             "dst_addr"),
        ]

    def _datapath(self, reads: SourceReads) -> None:
        m, c = self.m, self.command
        # per command: N and the aligned multipliers (b's is 0 where b takes no part)
        shift, a_scale, b_scale = Signal(SHIFT_BITS), Signal(ALIGNED_BITS), Signal(ALIGNED_BITS)
        common = Mux(self.two_operands & (c.b_shift > c.a_shift), c.b_shift, c.a_shift)
        with m.If(self.phase["check"]):
            m.d.sync += [shift.eq(common), a_scale.eq(c.a_multiplier << (common - c.a_shift)[:SHIFT_BITS]),
                         b_scale.eq(Mux(self.two_operands, c.b_multiplier << (common - c.b_shift)[:SHIFT_BITS], 0))]

        # issue: element i of both operands
        index, finished = Signal(len(c.count)), Signal()
        issuing = self.phase["run"] & self.enabled & ~finished
        last = index == c.count - 1
        with m.If(self.enabled):
            m.d.comb += [reads.a_address.eq(c.a_addr + index), reads.a_enable.eq(issuing),
                         reads.b_address.eq(c.b_addr + index), reads.b_enable.eq(issuing & (c.op != EltwiseOp.RESCALE))]
        with m.If(self.phase["begin"]):
            m.d.sync += [index.eq(0), finished.eq(0)]
        with m.Elif(issuing):
            m.d.sync += [index.eq(index + 1), finished.eq(last)]

        # scale: the centred operands times their multipliers
        read_valid, read_last = Signal(), Signal()
        m.d.sync += [read_valid.eq(issuing), read_last.eq(last)]
        a_centred = wire(m, element_value(c.a_type, reads.first[0], 0) - c.a_zero_point, "a_centred")
        b_centred = wire(m, element_value(c.b_type, reads.second, 0) - c.b_zero_point, "b_centred")
        term_bits = signed(max(ELTWISE_SUM_BITS, PRODUCT_BITS))
        scaled_valid, scaled_last, a_term, b_term = Signal(), Signal(), Signal(term_bits), Signal(term_bits)
        m.d.sync += [scaled_valid.eq(read_valid), scaled_last.eq(read_last),
                     a_term.eq(Mux(c.op == EltwiseOp.MUL, a_centred * b_centred, a_centred) * a_scale),
                     b_term.eq(b_centred * b_scale)]

        # output: combine, round once, zero point, clamp
        combined = Signal(signed(len(a_term) + 1))
        with m.Switch(c.op):
            with m.Case(EltwiseOp.SUB):
                m.d.comb += combined.eq(a_term - b_term)
            with m.Case(EltwiseOp.MAX):
                m.d.comb += combined.eq(Mux(a_term > b_term, a_term, b_term))
            with m.Case(EltwiseOp.MIN):
                m.d.comb += combined.eq(Mux(a_term < b_term, a_term, b_term))
            with m.Default():       # ADD; MUL and RESCALE have b_term = 0
                m.d.comb += combined.eq(a_term + b_term)
        shifted = wire(m, rounding_shift_right(combined, shift, c.rounding) + c.out_zero_point, "shifted")
        m.d.sync += [self.out_valid.eq(scaled_valid & self.enabled), self.out_last.eq(scaled_last),
                     self.out_value.eq(clamp(shifted, c.qmin, c.qmax))]
