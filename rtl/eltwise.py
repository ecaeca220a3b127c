"""ELTWISE in the POOL unit: one element pair per cycle through a three-stage pipeline (docs/rtl-pool.md).

  issue   read a[i] (first port of a_buf) and b[i] (second port of b_buf)
  scale   d = value - zero point; ADD/SUB/MAX/MIN: t_a = d_a * (M_a << (N - N_a)), t_b likewise, with
          N = max(N_a, N_b) (golden eltwise: the terms are aligned exactly); MUL: t_a = d_a * d_b * M_a;
          RESCALE: t_a = d_a * M_a (golden concat's requantize), t_b = 0
  output  combine, round(. / 2**N) in the command's rounding, + out_zero_point, clamp to [qmin, qmax]

The aligned multipliers and N are registered once per command (CHECK), so the pipeline has one multiplier
per operand and one barrel shifter.
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed

from aipu.rtl.arith import clamp, rounding_shift_right
from aipu.rtl.pool import SourceReads, dtype_bounds, element_value, region_beyond, wire
from aipu.sim.golden.eltwise import MAX_ALIGN
from aipu.sim.machine.arch import (ELTWISE_SUM_BITS, MAC_OPERAND_BITS, MULTIPLIER_BITS, SHIFT_BITS, Buffer,
                                   DType)
from aipu.sim.machine.isa import EltwiseOp

OPERAND_TYPES = (DType.INT8, DType.UINT8)
ALIGNED_BITS = MULTIPLIER_BITS + MAX_ALIGN        # M << (N - N_i) of an operand that passed the alignment check
PRODUCT_BITS = 2 * MAC_OPERAND_BITS + MULTIPLIER_BITS   # MUL: d_a * d_b * M


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
