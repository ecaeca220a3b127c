"""WDEC's level decoder: the bins of one leaf (uni_map_nzflag, uni_sign, UEGk(16, 0) of uni_abs_q) to its level."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from aipu.codec.reference.elements import NUM_CONTEXTS, element_spec
from aipu.rtl.wdec_parts.interfaces import context_index

UEGK_PREFIX = element_spec("uni_abs_q").c_max          # 16 context-coded unary bins before Exp-Golomb
INT8_MAGNITUDE = 128
MAX_EG_ONES = (INT8_MAGNITUDE - UEGK_PREFIX + 1).bit_length()   # this many Exp-Golomb ones: above int8 for sure


class LeafBin(enum.Enum, shape=3):
    """The bin a leaf's level decodes next."""
    NZFLAG = 0          # uni_map_nzflag
    SIGN = 1            # uni_sign of a non-zero level
    UNARY = 2           # UEGk: the context-coded unary prefix
    EXP_GOLOMB = 3      # UEGk: the Exp-Golomb prefix
    SUFFIX = 4          # UEGk: the Exp-Golomb suffix


class LevelDecoder(wiring.Component):
    """De-binarises one leaf's level bin by bin: uni_map_nzflag (n0 = n1 = 0 at every leaf), then for a
    non-zero level uni_sign, in the context of CoefP[0]'s sign class (the CU's previous level), and the
    magnitude's UEGk(16, 0) bins with ctxIdx from the bin index. A magnitude beyond int8 is refused at the
    bin that makes it certain: the 7th Exp-Golomb one, or the last bin of a magnitude above 128 (128 itself
    for a positive level).

    Signature: ``cu_start`` (In: a CU's leaves begin, CoefP[0] = 0), ``context`` (Out: ctxIdx of the next
    bin), ``decoded``/``bin`` (In: that bin), ``complete`` (Out: the bin ended the level, ``level`` holds it),
    ``too_large`` (Out: the level is outside int8), ``level`` (Out: int8).
    """

    def __init__(self):
        super().__init__({"cu_start": In(1), "context": Out(range(NUM_CONTEXTS)), "decoded": In(1), "bin": In(1),
                          "complete": Out(1), "too_large": Out(1), "level": Out(8)})

    def elaborate(self, platform) -> Module:
        m = Module()
        uni_abs_q = context_index("uni_abs_q", "binIdx<46?binIdx+2:46")
        bin_ = self.bin
        expecting = Signal(LeafBin)
        sign, c0_class = Signal(), Signal(2)            # class of CoefP[0]: 0 negative, 1 zero, 2 positive
        magnitude = Signal(8)
        suffix_left = Signal(range(MAX_EG_ONES + 1))
        eg_ones = Signal(range(MAX_EG_ONES + 1))
        mag_bin = Signal(range(UEGK_PREFIX + 2 * MAX_EG_ONES + 1))
        finished = Signal(8)
        done_now = Signal()
        with m.Switch(expecting):
            with m.Case(LeafBin.NZFLAG):
                m.d.comb += self.context.eq(context_index("uni_map_nzflag", "N0==N1?N0:2"))
            with m.Case(LeafBin.SIGN):
                m.d.comb += self.context.eq(context_index("uni_sign", "C0<0?0:C0==0?1:2") + c0_class)
            with m.Default():
                m.d.comb += self.context.eq(uni_abs_q + 2 + mag_bin)
        with m.If(self.decoded):
            with m.Switch(expecting):
                with m.Case(LeafBin.NZFLAG):
                    with m.If(bin_):
                        m.d.sync += expecting.eq(LeafBin.SIGN)
                    with m.Else():
                        m.d.comb += [finished.eq(0), done_now.eq(1)]
                with m.Case(LeafBin.SIGN):
                    m.d.sync += [sign.eq(bin_), mag_bin.eq(0), expecting.eq(LeafBin.UNARY), eg_ones.eq(0),
                                 magnitude.eq(0)]
                with m.Case(LeafBin.UNARY):
                    m.d.sync += mag_bin.eq(mag_bin + 1)
                    with m.If(~bin_):
                        m.d.comb += [finished.eq(mag_bin), done_now.eq(1)]
                    with m.Elif(mag_bin == UEGK_PREFIX - 1):
                        m.d.sync += expecting.eq(LeafBin.EXP_GOLOMB)
                with m.Case(LeafBin.EXP_GOLOMB):
                    m.d.sync += mag_bin.eq(mag_bin + 1)
                    with m.If(bin_):
                        m.d.sync += eg_ones.eq(eg_ones + 1)
                        with m.If(eg_ones == MAX_EG_ONES - 1):
                            m.d.comb += self.too_large.eq(1)
                    with m.Elif(eg_ones == 0):
                        m.d.comb += [finished.eq(UEGK_PREFIX), done_now.eq(1)]
                    with m.Else():
                        m.d.sync += [expecting.eq(LeafBin.SUFFIX), suffix_left.eq(eg_ones), magnitude.eq(0)]
                with m.Case(LeafBin.SUFFIX):
                    m.d.sync += mag_bin.eq(mag_bin + 1)
                    suffix = Cat(bin_, magnitude[:7])
                    m.d.sync += [magnitude.eq(suffix), suffix_left.eq(suffix_left - 1)]
                    with m.If(suffix_left == 1):
                        total = UEGK_PREFIX - 1 + (Const(1, 9) << eg_ones) + suffix
                        m.d.comb += [finished.eq(total), done_now.eq(1)]
        with m.If(done_now):
            with m.If((finished > INT8_MAGNITUDE) | ((finished == INT8_MAGNITUDE) & ~sign)):
                m.d.comb += self.too_large.eq(1)
            with m.Else():
                m.d.comb += [self.complete.eq(1), self.level.eq(Mux(sign, -finished, finished))]
                m.d.sync += [c0_class.eq(Mux(finished == 0, 1, Mux(sign, 0, 2))), expecting.eq(LeafBin.NZFLAG)]
        with m.If(self.cu_start):
            m.d.sync += [c0_class.eq(1), expecting.eq(LeafBin.NZFLAG)]
        return m
