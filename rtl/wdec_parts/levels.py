"""WDEC's level decoder: the bins of one leaf (uni_map_nzflag, uni_sign, UEGk(16, 0) of uni_abs_q) to its level,
up to ``lanes`` bins a cycle."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out, Signature

from aipu.codec.reference.elements import NUM_CONTEXTS, element_spec
from aipu.rtl.wdec_parts.interfaces import context_index

UEGK_PREFIX = element_spec("uni_abs_q").c_max          # 16 context-coded unary bins before Exp-Golomb
INT8_MAGNITUDE = 128
MAX_EG_ONES = (INT8_MAGNITUDE - UEGK_PREFIX + 1).bit_length()   # this many Exp-Golomb ones: above int8 for sure
# The most bins a leaf decodes: nzflag, sign, the unary prefix, MAX_EG_ONES - 1 ones, the zero, as many suffix bins
LEAF_BINS = 2 + UEGK_PREFIX + 2 * (MAX_EG_ONES - 1) + 1


class LeafBin(enum.Enum, shape=3):
    """The bin a leaf's level decodes next."""
    NZFLAG = 0          # uni_map_nzflag
    SIGN = 1            # uni_sign of a non-zero level
    UNARY = 2           # UEGk: the context-coded unary prefix
    EXP_GOLOMB = 3      # UEGk: the Exp-Golomb prefix
    SUFFIX = 4          # UEGk: the Exp-Golomb suffix


# A leaf's progress between two bins: the next bin's kind and position in the leaf (0 nzflag, 1 sign, then the
# magnitude's bins), the sign, the Exp-Golomb ones so far and the suffix bins left, the suffix so far.
LEAF_STATE = data.StructLayout({"expecting": LeafBin, "position": range(LEAF_BINS + 1), "sign": 1, "magnitude": 8,
                                "eg_ones": range(MAX_EG_ONES + 1), "suffix_left": range(MAX_EG_ONES + 1)})

# One lane of the decoder, as the engine's: the ``context`` of the leaf's next bin but as many as the lanes
# before it, whether the level ``wants`` it after their bins, and whether it was ``decoded``, with ``bin``.
LEAF_LANE = Signature({"context": Out(range(NUM_CONTEXTS)), "wants": Out(1), "decoded": In(1), "bin": In(1)})


def assert_distinct_contexts(lanes: int) -> None:
    """uni_abs_q's bins at leaf positions 2 .. LEAF_BINS + lanes - 2 (the furthest a lane reads) have ctxIdx
    start + position: the profile's magnitudes never reach binIdx 46, where the context stops following the
    bin index. So every leaf position has a context of its own (nzflag and sign have theirs), and the lanes
    of a cycle, consecutive positions of one leaf, never share a context."""
    spec = element_spec("uni_abs_q")
    for position in range(2, LEAF_BINS + lanes - 1):
        assert spec.ctx_inc(position - 2, {}) == position, f"leaf position {position} reaches the capped context"


class LevelDecoder(wiring.Component):
    """De-binarises one leaf's level, up to ``lanes`` bins a cycle (lane j is the bin after lane j-1's, and
    the level ``wants`` it unless an earlier lane's bin ended the level): uni_map_nzflag (n0 = n1 = 0 at
    every leaf), then for a non-zero level uni_sign, in the context of CoefP[0]'s sign class (the CU's
    previous level), and the magnitude's UEGk(16, 0) bins with ctxIdx from the bin index. A lane's context
    depends on its position in the leaf only (``assert_distinct_contexts``), never on the bins before it. A magnitude
    beyond int8 is refused at the bin that makes it certain: the 7th Exp-Golomb one, or the last bin of a
    magnitude above 128 (128 itself for a positive level).

    Signature: ``cu_start`` (In: a CU's leaves begin, CoefP[0] = 0), ``lanes`` (a LEAF_LANE per lane),
    ``position`` (Out: the position in the leaf of lane 0's bin), ``complete`` (Out: a decoded bin ended the
    level, ``level`` holds it), ``too_large`` (Out: the level is outside int8), ``level`` (Out: int8).
    """

    def __init__(self, lanes: int = 1):
        assert_distinct_contexts(lanes)
        super().__init__({"cu_start": In(1), "lanes": Out(LEAF_LANE).array(lanes),
                          "position": Out(range(LEAF_BINS + 1)), "complete": Out(1), "too_large": Out(1),
                          "level": Out(8)})

    def elaborate(self, platform) -> Module:
        m = Module()
        leaf = Signal(LEAF_STATE)
        c0_class = Signal(2)            # class of CoefP[0]: 0 negative, 1 zero, 2 positive
        m.d.comb += self.position.eq(leaf.position)
        state, wants = leaf, Const(1)
        for index, lane in enumerate(self.lanes):
            m.d.comb += [lane.context.eq(self._context(m, leaf.position + index, c0_class)), lane.wants.eq(wants)]
            after, done, finished, too_large = _next(m, state, lane.bin)
            with m.If(lane.decoded):
                m.d.sync += leaf.eq(after)          # the last lane decoded sets the registers
                with m.If(too_large):
                    m.d.comb += self.too_large.eq(1)
                with m.Elif(done):
                    m.d.comb += [self.complete.eq(1), self.level.eq(Mux(state.sign, -finished, finished))]
                    m.d.sync += [c0_class.eq(Mux(finished == 0, 1, Mux(state.sign, 0, 2))),
                                 leaf.expecting.eq(LeafBin.NZFLAG), leaf.position.eq(0)]
            state, wants = after, ~done & ~too_large
        with m.If(self.cu_start):
            m.d.sync += [c0_class.eq(1), leaf.expecting.eq(LeafBin.NZFLAG), leaf.position.eq(0)]
        return m

    @staticmethod
    def _context(m: Module, position, c0_class) -> Signal:
        """ctxIdx of the leaf's bin at ``position``."""
        context = Signal(range(NUM_CONTEXTS))
        with m.If(position == 0):
            m.d.comb += context.eq(context_index("uni_map_nzflag", "N0==N1?N0:2"))
        with m.Elif(position == 1):
            m.d.comb += context.eq(context_index("uni_sign", "C0<0?0:C0==0?1:2") + c0_class)
        with m.Else():
            m.d.comb += context.eq(context_index("uni_abs_q", "binIdx<46?binIdx+2:46") + position)
        return context


def _next(m: Module, state, bin_) -> tuple:
    """One bin of a leaf: (the state after it, whether it ends the level, the magnitude it ends with, whether
    it makes the magnitude certainly too large)."""
    after = Signal(LEAF_STATE)
    done, too_large = Signal(), Signal()
    finished = Signal(8)
    m.d.comb += [after.eq(state), after.position.eq(state.position + 1)]
    with m.Switch(state.expecting):
        with m.Case(LeafBin.NZFLAG):
            with m.If(bin_):
                m.d.comb += after.expecting.eq(LeafBin.SIGN)
            with m.Else():
                m.d.comb += [finished.eq(0), done.eq(1)]
        with m.Case(LeafBin.SIGN):
            m.d.comb += [after.sign.eq(bin_), after.expecting.eq(LeafBin.UNARY), after.eg_ones.eq(0),
                         after.magnitude.eq(0)]
        with m.Case(LeafBin.UNARY):
            with m.If(~bin_):
                m.d.comb += [finished.eq(state.position - 2), done.eq(1)]
            with m.Elif(state.position == 2 + UEGK_PREFIX - 1):
                m.d.comb += after.expecting.eq(LeafBin.EXP_GOLOMB)
        with m.Case(LeafBin.EXP_GOLOMB):
            with m.If(bin_):
                m.d.comb += after.eg_ones.eq(state.eg_ones + 1)
                with m.If(state.eg_ones == MAX_EG_ONES - 1):
                    m.d.comb += too_large.eq(1)
            with m.Elif(state.eg_ones == 0):
                m.d.comb += [finished.eq(UEGK_PREFIX), done.eq(1)]
            with m.Else():
                m.d.comb += [after.expecting.eq(LeafBin.SUFFIX), after.suffix_left.eq(state.eg_ones),
                             after.magnitude.eq(0)]
        with m.Case(LeafBin.SUFFIX):
            suffix = Cat(bin_, state.magnitude[:7])
            m.d.comb += [after.magnitude.eq(suffix), after.suffix_left.eq(state.suffix_left - 1)]
            with m.If(state.suffix_left == 1):
                m.d.comb += [finished.eq(UEGK_PREFIX - 1 + (Const(1, 9) << state.eg_ones) + suffix), done.eq(1)]
    with m.If(done & ((finished > INT8_MAGNITUDE) | ((finished == INT8_MAGNITUDE) & ~state.sign))):
        m.d.comb += too_large.eq(1)
    return after, done, finished, too_large
