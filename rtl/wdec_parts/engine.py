"""WDEC's arithmetic decoding engine: 10.4.3.3 (codec/reference/engine.py transcribed), one bin a cycle."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.codec.npu_profile import ZERO_RUN_BITS
from aipu.codec.reference.engine import (BOUND_S, BYPASS_LG_PMPS, RANGE_BITS, STUFFING_LG_PMPS, TRACE_BYPASS,
                                         TRACE_STUFFING)
from aipu.rtl.arith import bit_length
from aipu.rtl.wdec_parts.interfaces import (BIN_REQUEST, BIN_TRACE, BIT_WINDOW, CONTEXT_PORT, LG_BITS, NEED_BITS,
                                            BinKind)


class ArithmeticDecoder(wiring.Component):
    """In one cycle: renormalise (past up to ZERO_RUN_BITS - 1 leading zeros of an empty valueT, plus 9 bits),
    split the range, decide MPS or LPS, read the LPS's bit and renormalising shift; the context memory
    updates the context at the end of the cycle. A longer zero run with valueT = 0 takes a cycle per
    ZERO_RUN_BITS zeros (up to boundS) before the bin.

    valueT is kept as its 8 low bits plus a flag for "at least 0x100": the software's wider value is only
    ever used for the next renormalisation's ``valueT < 0x100`` test and its ``& 0xFF`` (docs/rtl-wdec.md).
    A request waits for the bit window to be ready; every decoded bin shows on ``trace``.

    Signature: ``bits`` (In: the bit window), ``bins`` (In: the syntax walk's requests), ``context`` (Out: the
    context memory), ``trace`` (Out: the bin decoded this cycle).
    """

    def __init__(self):
        super().__init__({"bits": In(BIT_WINDOW), "bins": In(BIN_REQUEST), "context": Out(CONTEXT_PORT),
                          "trace": Out(BIN_TRACE)})

    def elaborate(self, platform) -> Module:
        m = Module()
        bins, window, context = self.bins, self.bits, self.context
        bits, avail = window.bits, window.avail
        rs1, rt1, value_s, value_t = Signal(8), Signal(8), Signal(8), Signal(8)
        value_t_big, bflag, value_d, zero_run_pending = Signal(), Signal(), Signal(), Signal()
        in_context = bins.kind == BinKind.CONTEXT
        mps_in, lg_full = Signal(), Signal(LG_BITS + 1)
        m.d.comb += [mps_in.eq(in_context & context.mps),
                     lg_full.eq(Mux(in_context, context.lg,
                                    Mux(bins.kind == BinKind.BYPASS, BYPASS_LG_PMPS, STUFFING_LG_PMPS)))]

        # renormalisation (10.4.3.3.2): up to ZERO_RUN_BITS - 1 leading zeros and 9 bits
        renorm = value_d | (bflag & (rs1 == BOUND_S)) | zero_run_pending
        s_start = Mux(zero_run_pending, value_s, 0)
        room = Signal(9)
        m.d.comb += room.eq(BOUND_S - s_start)
        leading_zeros = Signal(range(ZERO_RUN_BITS + 1))
        m.d.comb += leading_zeros.eq(ZERO_RUN_BITS)
        for bit in reversed(range(ZERO_RUN_BITS)):      # the first 1 among the next bits: the last If wins
            with m.If(bits[NEED_BITS - 1 - bit]):
                m.d.comb += leading_zeros.eq(bit)
        t_length = bit_length(m, value_t, 8)
        zero_run = Signal()
        m.d.comb += zero_run.eq(renorm & (value_t == 0) & ~value_t_big & (leading_zeros == ZERO_RUN_BITS)
                                & (room > ZERO_RUN_BITS))
        renorm_bits = Signal(range(NEED_BITS + 1))
        fresh = Signal(RANGE_BITS + 1)
        r_rs1, r_value_t, r_value_s, r_bflag = Signal(8), Signal(8), Signal(8), Signal()
        with m.If(~renorm):
            m.d.comb += [r_rs1.eq(rs1), r_value_t.eq(value_t), r_value_s.eq(value_s), r_bflag.eq(bflag)]
        with m.Elif(value_t_big):
            m.d.comb += [r_value_t.eq(value_t), r_value_s.eq(0)]
        with m.Else():
            wanted = Mux(value_t == 0, leading_zeros + RANGE_BITS, RANGE_BITS - t_length)
            m.d.comb += renorm_bits.eq(Mux(wanted < room, wanted, room))
            m.d.comb += fresh.eq((value_t << renorm_bits) | (bits >> (NEED_BITS - renorm_bits).as_unsigned()))
            m.d.comb += [r_value_t.eq(fresh[:8]), r_value_s.eq(s_start + renorm_bits),
                         r_bflag.eq(fresh < 0x100)]
        after_renorm = Signal(NEED_BITS)
        m.d.comb += after_renorm.eq(bits << renorm_bits)

        # the decision: range split, MPS or LPS, the LPS's renormalising shift
        lg = lg_full >> 2
        s_flag = rt1 < lg
        rs2 = Signal(9)
        rt2 = Signal(8)
        m.d.comb += [rs2.eq(r_rs1 + s_flag), rt2.eq(Mux(s_flag, 256 + rt1 - lg, rt1 - lg))]
        lps = Signal()
        m.d.comb += lps.eq((rs2 > r_value_s) | ((rs2 == r_value_s) & (r_value_t >= rt2) & ~r_bflag))
        t_rlps = Signal(RANGE_BITS)
        m.d.comb += t_rlps.eq(Mux(s_flag, rt1 + lg, lg))
        lps_shift = Signal(range(RANGE_BITS + 1))
        m.d.comb += lps_shift.eq(RANGE_BITS - bit_length(m, t_rlps, RANGE_BITS))
        one_more = rs2 != r_value_s
        base = Signal(10)
        m.d.comb += base.eq(Mux(one_more, 256 + Cat(after_renorm[NEED_BITS - 1], r_value_t) - rt2, r_value_t - rt2))
        after_one = Signal(NEED_BITS)
        m.d.comb += after_one.eq(after_renorm << one_more)
        lps_value = Signal(10 + RANGE_BITS)
        m.d.comb += lps_value.eq((base << lps_shift) | (after_one >> (NEED_BITS - lps_shift).as_unsigned()))
        bin_value = Signal()
        m.d.comb += bin_value.eq(Mux(lps, ~mps_in, mps_in))
        bin_bits = Signal(range(NEED_BITS + 2))
        m.d.comb += bin_bits.eq(renorm_bits + Mux(lps, one_more + lps_shift, 0))
        m.d.comb += [bins.bin.eq(bin_value), context.index.eq(bins.context), context.bin.eq(bin_value)]

        with m.If(window.ready & bins.start):          # 10.4.2.2: the first 9 bits
            with m.If(avail < RANGE_BITS):
                m.d.comb += bins.overrun.eq(1)
            with m.Else():
                first = bits[NEED_BITS - RANGE_BITS:]
                m.d.comb += [window.consume.eq(RANGE_BITS), bins.started.eq(1)]
                m.d.sync += [rs1.eq(0), rt1.eq(0xFF), value_s.eq(0), bflag.eq(0), value_d.eq(1),
                             zero_run_pending.eq(0), value_t.eq(first[:8]), value_t_big.eq(first[8])]
        with m.Elif(window.ready & bins.decode):
            with m.If(zero_run):
                with m.If(avail < ZERO_RUN_BITS):
                    m.d.comb += bins.overrun.eq(1)
                with m.Else():
                    m.d.comb += window.consume.eq(ZERO_RUN_BITS)
                    m.d.sync += [value_s.eq(s_start + ZERO_RUN_BITS), rs1.eq(0), zero_run_pending.eq(1)]
            with m.Elif(bin_bits > avail):
                m.d.comb += bins.overrun.eq(1)
            with m.Else():
                m.d.comb += [bins.decoded.eq(1), window.consume.eq(bin_bits), context.update.eq(in_context)]
                m.d.sync += [value_s.eq(r_value_s), bflag.eq(r_bflag), zero_run_pending.eq(0)]
                with m.If(lps):
                    m.d.sync += [value_t.eq(lps_value[:8]), value_t_big.eq(lps_value[8:] != 0), value_d.eq(1),
                                 rs1.eq(r_rs1), rt1.eq((t_rlps << lps_shift)[:8])]
                with m.Else():
                    m.d.sync += [value_t.eq(r_value_t), value_t_big.eq(0), value_d.eq(0), rs1.eq(rs2),
                                 rt1.eq(rt2)]
                self._trace(m)
        return m

    def _trace(self, m: Module) -> None:
        """The decoded bin as the software trace shows it."""
        bins = self.bins
        m.d.comb += [self.trace.valid.eq(1), self.trace.bin.eq(bins.bin)]
        with m.Switch(bins.kind):
            with m.Case(BinKind.CONTEXT):
                m.d.comb += self.trace.context.eq(bins.context)
            with m.Case(BinKind.BYPASS):
                m.d.comb += self.trace.context.eq(TRACE_BYPASS)
            with m.Case(BinKind.STUFFING):
                m.d.comb += self.trace.context.eq(TRACE_STUFFING)
