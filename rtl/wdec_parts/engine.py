"""WDEC's arithmetic decoding engine: 10.4.3.3 (codec/reference/engine.py transcribed), a cascade of decision
stages that decodes up to ``lanes`` bins a cycle."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from aipu.codec.npu_profile import ZERO_RUN_BITS
from aipu.codec.reference.engine import (BOUND_S, BYPASS_LG_PMPS, RANGE_BITS, STUFFING_LG_PMPS, TRACE_BYPASS,
                                         TRACE_STUFFING)
from aipu.rtl.arith import bit_length
from aipu.rtl.wdec_parts.interfaces import (BIN_LANE, BIN_REQUEST, BIN_TRACE, CONTEXT_PORT, LG_BITS, NEED_BITS,
                                            BinKind, bit_window)

# The engine's registers between two bins. valueT is kept as its 8 low bits plus a flag for "at least 0x100":
# the software's wider value is only ever used for the next renormalisation's ``valueT < 0x100`` test and its
# ``& 0xFF`` (docs/rtl-wdec.md).
ENGINE_STATE = data.StructLayout({"rs1": 8, "rt1": 8, "value_s": 8, "value_t": 8, "value_t_big": 1, "bflag": 1,
                                  "value_d": 1})


class DecisionStage(wiring.Component):
    """One bin, combinationally: renormalise (past up to ZERO_RUN_BITS - 1 leading zeros of an empty valueT,
    plus 9 bits), split the range, decide MPS or LPS, read the LPS's bit and renormalising shift. ``zero_run``
    says the bin needs a zero-run step first (a longer zero run with valueT = 0); then ``bin``, ``used`` and
    ``after`` mean nothing.

    Signature: ``before`` (In: the engine's state), ``pending`` (In: zero-run steps have begun this bin's
    renormalisation, from ``before.value_s``), ``bits`` (In: the next NEED_BITS stream bits), ``kind``,
    ``mps``, ``lg`` (In: the bin's kind and its context's state), ``zero_run``, ``bin``, ``used`` (the stream
    bits the bin takes) and ``after`` (the state after it) (Out).
    """

    def __init__(self):
        super().__init__({"before": In(ENGINE_STATE), "pending": In(1), "bits": In(NEED_BITS), "kind": In(BinKind), "mps": In(1),
                          "lg": In(LG_BITS), "zero_run": Out(1), "bin": Out(1), "used": Out(range(NEED_BITS + 1)),
                          "after": Out(ENGINE_STATE)})

    def elaborate(self, platform) -> Module:
        m = Module()
        state, bits, after = self.before, self.bits, self.after
        in_context = self.kind == BinKind.CONTEXT
        mps_in, lg_full = Signal(), Signal(LG_BITS + 1)
        m.d.comb += [mps_in.eq(in_context & self.mps),
                     lg_full.eq(Mux(in_context, self.lg,
                                    Mux(self.kind == BinKind.BYPASS, BYPASS_LG_PMPS, STUFFING_LG_PMPS)))]

        # renormalisation (10.4.3.3.2): up to ZERO_RUN_BITS - 1 leading zeros and 9 bits
        renorm = state.value_d | (state.bflag & (state.rs1 == BOUND_S)) | self.pending
        s_start = Mux(self.pending, state.value_s, 0)
        room = Signal(9)
        m.d.comb += room.eq(BOUND_S - s_start)
        leading_zeros = Signal(range(ZERO_RUN_BITS + 1))
        m.d.comb += leading_zeros.eq(ZERO_RUN_BITS)
        for bit in reversed(range(ZERO_RUN_BITS)):      # the first 1 among the next bits: the last If wins
            with m.If(bits[NEED_BITS - 1 - bit]):
                m.d.comb += leading_zeros.eq(bit)
        t_length = bit_length(m, state.value_t, 8)
        m.d.comb += self.zero_run.eq(renorm & (state.value_t == 0) & ~state.value_t_big
                                     & (leading_zeros == ZERO_RUN_BITS) & (room > ZERO_RUN_BITS))
        renorm_bits = Signal(range(NEED_BITS + 1))
        fresh = Signal(RANGE_BITS + 1)
        r_rs1, r_value_t, r_value_s, r_bflag = Signal(8), Signal(8), Signal(8), Signal()
        with m.If(~renorm):
            m.d.comb += [r_rs1.eq(state.rs1), r_value_t.eq(state.value_t), r_value_s.eq(state.value_s),
                         r_bflag.eq(state.bflag)]
        with m.Elif(state.value_t_big):
            m.d.comb += [r_value_t.eq(state.value_t), r_value_s.eq(0)]
        with m.Else():
            wanted = Mux(state.value_t == 0, leading_zeros + RANGE_BITS, RANGE_BITS - t_length)
            m.d.comb += renorm_bits.eq(Mux(wanted < room, wanted, room))
            m.d.comb += fresh.eq((state.value_t << renorm_bits) | (bits >> (NEED_BITS - renorm_bits).as_unsigned()))
            m.d.comb += [r_value_t.eq(fresh[:8]), r_value_s.eq(s_start + renorm_bits), r_bflag.eq(fresh < 0x100)]
        after_renorm = Signal(NEED_BITS)
        m.d.comb += after_renorm.eq(bits << renorm_bits)

        # the decision: range split, MPS or LPS, the LPS's renormalising shift
        lg = lg_full >> 2
        s_flag = state.rt1 < lg
        rs2 = Signal(9)
        rt2 = Signal(8)
        m.d.comb += [rs2.eq(r_rs1 + s_flag), rt2.eq(Mux(s_flag, 256 + state.rt1 - lg, state.rt1 - lg))]
        lps = Signal()
        m.d.comb += lps.eq((rs2 > r_value_s) | ((rs2 == r_value_s) & (r_value_t >= rt2) & ~r_bflag))
        t_rlps = Signal(RANGE_BITS)
        m.d.comb += t_rlps.eq(Mux(s_flag, state.rt1 + lg, lg))
        lps_shift = Signal(range(RANGE_BITS + 1))
        m.d.comb += lps_shift.eq(RANGE_BITS - bit_length(m, t_rlps, RANGE_BITS))
        one_more = rs2 != r_value_s
        base = Signal(10)
        m.d.comb += base.eq(Mux(one_more, 256 + Cat(after_renorm[NEED_BITS - 1], r_value_t) - rt2, r_value_t - rt2))
        after_one = Signal(NEED_BITS)
        m.d.comb += after_one.eq(after_renorm << one_more)
        lps_value = Signal(10 + RANGE_BITS)
        m.d.comb += lps_value.eq((base << lps_shift) | (after_one >> (NEED_BITS - lps_shift).as_unsigned()))
        m.d.comb += [self.bin.eq(Mux(lps, ~mps_in, mps_in)),
                     self.used.eq(renorm_bits + Mux(lps, one_more + lps_shift, 0)),
                     after.value_s.eq(r_value_s), after.bflag.eq(r_bflag)]
        with m.If(lps):
            m.d.comb += [after.value_t.eq(lps_value[:8]), after.value_t_big.eq(lps_value[8:] != 0),
                         after.value_d.eq(1), after.rs1.eq(r_rs1), after.rt1.eq((t_rlps << lps_shift)[:8])]
        with m.Else():
            m.d.comb += [after.value_t.eq(r_value_t), after.rs1.eq(rs2), after.rt1.eq(rt2)]
        return m


class ArithmeticDecoder(wiring.Component):
    """The engine: its registers and a cascade of ``lanes`` DecisionStages, stage j decoding lane j's bin from
    the state stage j-1 leaves and the stream bits after those stage j-1 took. In one cycle the lanes decode in
    order while the syntax walk asks for them, up to the first that needs a zero-run step: lane 0 then takes
    the step (a cycle per ZERO_RUN_BITS zeros, up to boundS) before its bin, a later lane waits for the next
    cycle. Each stage reads its context on its own port of the context memory, which updates them at the end
    of the cycle. A request waits for the bit window to be ready; every decoded bin shows on its lane of
    ``trace``.

    Signature: ``bits`` (In: the bit window), ``bins`` and ``lanes`` (In: the syntax walk's requests, a lane per
    stage), ``context`` (Out: a context port per lane), ``trace`` (Out: a lane per stage).
    """

    def __init__(self, lanes: int = 1):
        self.stages = lanes
        super().__init__({"bits": In(bit_window(lanes)), "bins": In(BIN_REQUEST), "lanes": In(BIN_LANE).array(lanes),
                          "context": Out(CONTEXT_PORT).array(lanes), "trace": Out(BIN_TRACE).array(lanes)})

    def elaborate(self, platform) -> Module:
        m = Module()
        bins, window, view = self.bins, self.bits, self.stages * NEED_BITS
        state = Signal(ENGINE_STATE)
        zero_run_pending = Signal()         # lane 0's bin has had zero-run steps
        offset = 0                          # the stream bits the stages before this one take
        going = window.ready & ~bins.start  # the stages before this one decoded their bins
        for index, (lane, port, trace) in enumerate(zip(self.lanes, self.context, self.trace)):
            m.submodules[f"stage{index}"] = stage = DecisionStage()
            m.d.comb += [stage.before.eq(state if index == 0 else previous), stage.kind.eq(lane.kind),
                         stage.pending.eq(zero_run_pending if index == 0 else 0),
                         stage.bits.eq((window.bits << offset)[view - NEED_BITS:view]), port.index.eq(lane.context),
                         stage.mps.eq(port.mps), stage.lg.eq(port.lg), port.bin.eq(stage.bin), lane.bin.eq(stage.bin)]
            asked, taken = Signal(name=f"asked{index}"), Signal(range(view + 1), name=f"taken{index}")
            m.d.comb += [asked.eq(going & lane.decode & ~stage.zero_run), taken.eq(offset + stage.used)]
            with m.If(asked & (taken > window.avail)):
                m.d.comb += bins.overrun.eq(1)
            with m.Elif(asked):
                m.d.comb += [lane.decoded.eq(1), port.update.eq(lane.kind == BinKind.CONTEXT),
                             window.consume.eq(taken)]
                m.d.sync += [state.eq(stage.after), zero_run_pending.eq(0)]     # the last lane decoded sets them
                self._trace(m, lane, trace)
            if index == 0:
                self._zero_run_step(m, state, zero_run_pending, going & lane.decode & stage.zero_run)
            going, offset, previous = lane.decoded, taken, stage.after

        with m.If(window.ready & bins.start):          # 10.4.2.2: the first 9 bits
            with m.If(window.avail < RANGE_BITS):
                m.d.comb += bins.overrun.eq(1)
            with m.Else():
                first = window.bits[view - RANGE_BITS:]
                m.d.comb += [window.consume.eq(RANGE_BITS), bins.started.eq(1)]
                m.d.sync += [state.rs1.eq(0), state.rt1.eq(0xFF), state.value_s.eq(0), state.bflag.eq(0),
                             state.value_d.eq(1), zero_run_pending.eq(0), state.value_t.eq(first[:8]),
                             state.value_t_big.eq(first[8])]
        return m

    def _zero_run_step(self, m: Module, state, pending, step) -> None:
        """Lane 0's bin first needs ZERO_RUN_BITS more zeros of its renormalisation (``step``): take them."""
        with m.If(step & (self.bits.avail < ZERO_RUN_BITS)):
            m.d.comb += self.bins.overrun.eq(1)
        with m.Elif(step):
            m.d.comb += self.bits.consume.eq(ZERO_RUN_BITS)
            m.d.sync += [state.value_s.eq(Mux(pending, state.value_s, 0) + ZERO_RUN_BITS), state.rs1.eq(0),
                         pending.eq(1)]

    @staticmethod
    def _trace(m: Module, lane, trace) -> None:
        """A lane's decoded bin as the software trace shows it."""
        m.d.comb += [trace.valid.eq(1), trace.bin.eq(lane.bin)]
        with m.Switch(lane.kind):
            with m.Case(BinKind.CONTEXT):
                m.d.comb += trace.context.eq(lane.context)
            with m.Case(BinKind.BYPASS):
                m.d.comb += trace.context.eq(TRACE_BYPASS)
            with m.Case(BinKind.STUFFING):
                m.d.comb += trace.context.eq(TRACE_STUFFING)
