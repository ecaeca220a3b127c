"""WDEC: the on-chip weight decoder. One command decodes one layer's chapter-10 stream (the npu profile,
codec/npu_profile.py) from DRAM into int8 weights in WEIGHT, one bin per cycle (docs/rtl-wdec.md).

Three parts:
  fetcher   word reads from DRAM into a FIFO deep enough to cover the read latency, and a bit window
            that always holds the NEED_BITS the engine may consume in a cycle (refilled one word a cycle)
  engine    the arithmetic decoder of 10.4.3.3 (renormalisation, decision, bypass, stuffing bin) and the
            context RAM with its update_ctx, one bin per cycle
  syntax    the profile's syntax: header fields (bypass FL), CTU flags, the unitree's leaves in Morton
            order with the UEGk de-binariser, and the write of each level at its [O][KH][KW][I] byte

Every bin the engine decodes is visible on ``debug_bin_valid`` / ``debug_bin_ctx`` / ``debug_bin`` (the
software trace's (ctxIdx, bin), -1 bypass, -2 stuffing), so tests compare the hardware bin by bin. NEED_BITS
and the cycles a command takes are ``aipu.sim.timing.wdec``.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from aipu.codec.npu_profile import (PROFILE_CTU_FLAGS, PROFILE_CU_FLAGS, PROFILE_HEADER, PROFILE_SPLIT_FLAG,
                                    SPLIT_FLAG_MIN_CU, ZERO_RUN_BITS)
from aipu.codec.reference.elements import NUM_CONTEXTS, element_spec
from aipu.codec.reference.engine import (BOUND_S, BYPASS_LG_PMPS, LG_PMPS_INIT, LG_PMPS_MAX, LPS_INCREMENT,
                                         RANGE_BITS, STUFFING_LG_PMPS, TRACE_BYPASS, TRACE_STUFFING)
from aipu.codec.reference.geometry import CTU_SIZES
from aipu.rtl.ports import dram_read_port, word_bytes, write_port
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import KERNEL_BITS, Opcode, Unit
from aipu.sim.timing.wdec import NEED_BITS

UEGK_PREFIX = element_spec("uni_abs_q").c_max          # 16 context-coded unary bins before Exp-Golomb
INT8_MAGNITUDE = 128
MAX_EG_ONES = (INT8_MAGNITUDE - UEGK_PREFIX + 1).bit_length()   # this many Exp-Golomb ones: above int8 for sure
MAX_ZDEPTH = ((1 << KERNEL_BITS) - 1) ** 2
MORTON_LEVELS = max((MAX_ZDEPTH - 1).bit_length(), (max(CTU_SIZES) - 1).bit_length())
LG_BITS = LG_PMPS_MAX.bit_length()


def _bit_length(m: Module, value, width: int) -> Signal:
    result = Signal(range(width + 1))
    for bit in range(width):
        with m.If(value[bit]):
            m.d.comb += result.eq(bit + 1)
    return result


def _maximum(values):
    result = values[0]
    for value in values[1:]:
        result = Mux(value > result, value, result)
    return result


def _ceil_log2(m: Module, extent, width: int) -> Signal:
    return _bit_length(m, extent - 1, width)


def _context_index(name: str, rule: str) -> int:
    spec = element_spec(name)
    assert spec.inc_rule == rule, f"{name}: the hardware implements ctxIdxInc {rule}, the table says {spec.inc_rule}"
    return spec.ctx_start


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
        config = self.config
        cmd = self.view(word, Opcode.WDEC)
        word_bits = 8 * config.dram.bytes_per_cycle
        offset_bits = (config.dram.bytes_per_cycle - 1).bit_length()
        weight_bytes = config.buffer(Buffer.WEIGHT).bytes
        port_bytes = word_bytes(config, Buffer.WEIGHT)

        def fail(name):
            m.d.comb += [fault.eq(1), fault_field.eq(self.error_index(name))]
            m.next = "IDLE"

        # ------------------------------------------------------------------ fetcher
        depth = config.dram.latency_cycles + 4
        m.submodules.fifo = fifo = SyncFIFO(width=word_bits, depth=depth)
        stream_bits = Signal(len(cmd.length) + 3)
        end_byte = cmd.dram_addr + cmd.length
        first_word = cmd.dram_addr >> offset_bits
        total_words = ((end_byte - 1) >> offset_bits) - first_word + 1
        req_addr = Signal(len(self.dram_read.addr))
        req_left = Signal(len(cmd.length) + 1)
        to_window = Signal(len(cmd.length) + 1)
        inflight = Signal(range(depth + 1))
        first_pending = Signal()
        request = Signal()
        m.d.comb += [request.eq((req_left != 0) & (fifo.level + inflight < depth)),
                     self.dram_read.valid.eq(request), self.dram_read.addr.eq(req_addr),
                     fifo.w_data.eq(self.dram_read.data), fifo.w_en.eq(self.dram_read.data_valid)]
        taken = request & self.dram_read.ready
        with m.If(taken):
            m.d.sync += [req_addr.eq(req_addr + 1), req_left.eq(req_left - 1)]
        m.d.sync += inflight.eq(inflight + taken - self.dram_read.data_valid)

        window_bits = 2 * NEED_BITS + word_bits
        window = Signal(window_bits)
        count = Signal(range(window_bits + 1))
        consume = Signal(range(NEED_BITS + 1))
        refill = Signal()
        m.d.comb += [refill.eq((count < 2 * NEED_BITS) & fifo.r_rdy & (to_window != 0)), fifo.r_en.eq(refill)]
        stream_order = Cat(*[fifo.r_data[8 * i:8 * i + 8] for i in reversed(range(config.dram.bytes_per_cycle))])
        skip_bytes = cmd.dram_addr[:offset_bits] if offset_bits else Const(0, 1)
        incoming = Signal(word_bits)
        incoming_bits = Signal(range(word_bits + 1))
        with m.If(first_pending):
            m.d.comb += [incoming.eq(stream_order << (skip_bytes * 8)), incoming_bits.eq(word_bits - skip_bytes * 8)]
        with m.Else():
            m.d.comb += [incoming.eq(stream_order), incoming_bits.eq(word_bits)]
        kept = Signal(window_bits)
        m.d.comb += kept.eq(window << consume)
        with m.If(refill):
            placed = Cat(Const(0, window_bits - word_bits), incoming) >> (count - consume).as_unsigned()
            m.d.sync += [window.eq(kept | placed), count.eq(count - consume + incoming_bits),
                         to_window.eq(to_window - 1), first_pending.eq(0)]
        with m.Else():
            m.d.sync += [window.eq(kept), count.eq(count - consume)]

        position = Signal(len(stream_bits))          # stream bits consumed
        m.d.sync += position.eq(position + consume)
        left = stream_bits - position
        avail = Signal(range(NEED_BITS + 1))
        m.d.comb += avail.eq(Mux(left < NEED_BITS, left, NEED_BITS))
        bits = Signal(NEED_BITS)                     # the next stream bits, MSB first, zero past the end
        past_end = (Const(1, NEED_BITS + 1) << (NEED_BITS - avail).as_unsigned()) - 1
        m.d.comb += bits.eq(window[window_bits - NEED_BITS:] & ~past_end)
        ready = (count >= NEED_BITS) | (to_window == 0)

        # ------------------------------------------------------------------ engine (10.4.3.3)
        rs1, rt1, value_s, value_t = Signal(8), Signal(8), Signal(8), Signal(8)
        value_t_big, bflag, value_d, zero_run_pending = Signal(), Signal(), Signal(), Signal()
        mps_in, lg_full = Signal(), Signal(LG_BITS + 1)
        renorm = value_d | (bflag & (rs1 == BOUND_S)) | zero_run_pending
        s_start = Mux(zero_run_pending, value_s, 0)
        room = Signal(9)
        m.d.comb += room.eq(BOUND_S - s_start)
        leading_zeros = Signal(range(ZERO_RUN_BITS + 1))
        m.d.comb += leading_zeros.eq(ZERO_RUN_BITS)
        for bit in reversed(range(ZERO_RUN_BITS)):      # the first 1 among the next bits: the last If wins
            with m.If(bits[NEED_BITS - 1 - bit]):
                m.d.comb += leading_zeros.eq(bit)
        t_length = _bit_length(m, value_t, 8)
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
        m.d.comb += lps_shift.eq(RANGE_BITS - _bit_length(m, t_rlps, RANGE_BITS))
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

        # context RAM: (lgPmps, cycno, mps) per ctxIdx; a context not written since the command began reads
        # as its initial state (10.4.2.1), so a command starts with fresh contexts at no cost
        m.submodules.contexts = contexts = Memory(shape=LG_BITS + 3, depth=NUM_CONTEXTS, init=[])
        ctx_read = contexts.read_port(domain="comb")
        ctx_write = contexts.write_port()
        written = Signal(NUM_CONTEXTS)
        ctx_index = Signal(range(NUM_CONTEXTS))
        m.d.comb += ctx_read.addr.eq(ctx_index)
        state = Signal(LG_BITS + 3)
        m.d.comb += state.eq(Mux(written.bit_select(ctx_index, 1), ctx_read.data, LG_PMPS_INIT << 3))
        ctx_mps, ctx_cycno, ctx_lg = state[0], state[1:3], state[3:]
        cwr = Mux(ctx_cycno <= 1, 3, Mux(ctx_cycno == 2, 4, 5))
        next_cycno = Signal(2)
        next_lg = Signal(LG_BITS + 1)
        next_mps = Signal()
        with m.If(bin_value != ctx_mps):
            m.d.comb += next_cycno.eq(Mux(ctx_cycno <= 2, ctx_cycno + 1, 3))
            raised = ctx_lg + Mux(cwr == 3, LPS_INCREMENT[0], Mux(cwr == 4, LPS_INCREMENT[1], LPS_INCREMENT[2]))
            with m.If(raised > LG_PMPS_MAX):
                m.d.comb += [next_lg.eq(2 * LG_PMPS_MAX + 1 - raised), next_mps.eq(~ctx_mps)]
            with m.Else():
                m.d.comb += [next_lg.eq(raised), next_mps.eq(ctx_mps)]
        with m.Else():
            m.d.comb += [next_cycno.eq(Mux(ctx_cycno == 0, 1, ctx_cycno)), next_mps.eq(ctx_mps),
                         next_lg.eq(ctx_lg - (ctx_lg >> cwr) - (ctx_lg >> (cwr + 2)))]
        m.d.comb += [ctx_write.addr.eq(ctx_index), ctx_write.data.eq(Cat(next_mps, next_cycno, next_lg[:LG_BITS]))]

        def decode(kind, context=None):
            """Decode one bin this cycle (when the window is ready); returns the bin and a commit flag under
            which the caller acts on it. kind: "context", "bypass" or "stuffing"."""
            if kind == "context":
                m.d.comb += [ctx_index.eq(context), mps_in.eq(ctx_mps), lg_full.eq(ctx_lg)]
            else:
                m.d.comb += lg_full.eq(BYPASS_LG_PMPS if kind == "bypass" else STUFFING_LG_PMPS)
            commit = Signal(name=f"commit_{kind}")
            with m.If(ready):
                with m.If(zero_run):
                    with m.If(avail < ZERO_RUN_BITS):
                        fail("stream")
                    with m.Else():
                        m.d.comb += consume.eq(ZERO_RUN_BITS)
                        m.d.sync += [value_s.eq(s_start + ZERO_RUN_BITS), rs1.eq(0), zero_run_pending.eq(1)]
                with m.Elif(bin_bits > avail):
                    fail("stream")
                with m.Else():
                    m.d.comb += [commit.eq(1), consume.eq(bin_bits), self.debug_bin_valid.eq(1),
                                 self.debug_bin.eq(bin_value)]
                    trace_ctx = {"context": context, "bypass": TRACE_BYPASS, "stuffing": TRACE_STUFFING}[kind]
                    m.d.comb += self.debug_bin_ctx.eq(trace_ctx)
                    m.d.sync += [value_s.eq(r_value_s), bflag.eq(r_bflag), zero_run_pending.eq(0)]
                    with m.If(lps):
                        m.d.sync += [value_t.eq(lps_value[:8]), value_t_big.eq(lps_value[8:] != 0), value_d.eq(1),
                                     rs1.eq(r_rs1), rt1.eq((t_rlps << lps_shift)[:8])]
                    with m.Else():
                        m.d.sync += [value_t.eq(r_value_t), value_t_big.eq(0), value_d.eq(0), rs1.eq(rs2),
                                     rt1.eq(rt2)]
                    if kind == "context":
                        m.d.comb += ctx_write.en.eq(1)
                        m.d.sync += written.eq(written | (1 << ctx_index))
            return bin_value, commit

        # ------------------------------------------------------------------ syntax (the npu profile)
        zdepth = Signal(range(MAX_ZDEPTH + 1))
        m.d.comb += zdepth.eq(cmd.k_h * cmd.k_w)
        integer_input, cmaxw_nonzero, ctu_size_idx = Signal(), Signal(), Signal(2)
        field = Signal(range(len(PROFILE_HEADER) + 1))
        field_bit = Signal(6)
        value = Signal(32)
        ctu_c, ctu_k = Signal(len(cmd.in_c)), Signal(len(cmd.out_c))
        ctu_size = Signal(range(max(CTU_SIZES) + 1))
        m.d.comb += ctu_size.eq(max(CTU_SIZES) >> ctu_size_idx)
        height, width = Signal(range(max(CTU_SIZES) + 1)), Signal(range(max(CTU_SIZES) + 1))
        m.d.comb += [height.eq(Mux(cmd.in_c - ctu_c < ctu_size, cmd.in_c - ctu_c, ctu_size)),
                     width.eq(Mux(cmd.out_c - ctu_k < ctu_size, cmd.out_c - ctu_k, ctu_size))]
        last_ctu = (ctu_c + ctu_size >= cmd.in_c) & (ctu_k + ctu_size >= cmd.out_c)
        levels = Signal(range(MORTON_LEVELS + 1))       # tree depth of the CU: Morton bits per axis
        m.d.comb += levels.eq(_maximum([_ceil_log2(m, e, len(e)) for e in (zdepth, height, width)]))
        morton = Signal(3 * MORTON_LEVELS + 1)
        coords = [Cat(*[morton[3 * bit + 2 - axis] for bit in range(MORTON_LEVELS)]) for axis in range(3)]
        extents = (zdepth, height, width)
        walk_end = (morton >> (levels * 3)) != 0
        # an out-of-range candidate: skip the subtree at the highest bit where a coordinate passes its extent
        skip_level = Signal(range(MORTON_LEVELS))
        passing = [Mux(coord >= extent, _bit_length(m, coord ^ (extent - 1), MORTON_LEVELS) - 1, 0)
                   for coord, extent in zip(coords, extents)]
        m.d.comb += skip_level.eq(_maximum(passing))
        outside = Signal()
        m.d.comb += outside.eq(Cat(*[coord >= extent for coord, extent in zip(coords, extents)]).any())
        z, y, x = coords
        sign, c0_class = Signal(), Signal(2)            # class of CoefP[0]: 0 negative, 1 zero, 2 positive
        magnitude = Signal(8)
        suffix_left = Signal(range(MAX_EG_ONES + 1))
        eg_ones = Signal(range(MAX_EG_ONES + 1))
        mag_bin = Signal(range(UEGK_PREFIX + 2 * MAX_EG_ONES + 1))
        phase = Signal(2)                               # UEGk: 0 unary prefix, 1 Exp-Golomb prefix, 2 suffix
        step = Signal(range(len(PROFILE_CTU_FLAGS) + 4))

        address = cmd.wgt_addr + ((ctu_k + x) * zdepth + z) * cmd.in_c + ctu_c + y
        level = Signal(8)

        def write_level(level_value, level_sign):
            m.d.comb += [level.eq(Mux(level_sign, -level_value, level_value)), self.weight_write.en.eq(1),
                         self.weight_write.addr.eq(address >> (port_bytes.bit_length() - 1)),
                         self.weight_write.data.eq(level.replicate(port_bytes)),
                         self.weight_write.mask.eq(1 << address[:max(1, port_bytes.bit_length() - 1)]
                                                   if port_bytes > 1 else 1)]
            m.d.sync += [morton.eq(morton + 1), c0_class.eq(Mux(level_value == 0, 1, Mux(level_sign, 0, 2)))]

        uni_map_nzflag = _context_index("uni_map_nzflag", "N0==N1?N0:2")   # n0 = n1 = 0 at every leaf
        uni_sign = _context_index("uni_sign", "C0<0?0:C0==0?1:2")
        uni_abs_q = _context_index("uni_abs_q", "binIdx<46?binIdx+2:46")
        ctu_flags = [(_context_index(name, "1" if name == "map_mode_flag" else "0")
                      + (1 if name == "map_mode_flag" else 0), wanted) for name, wanted in PROFILE_CTU_FLAGS]
        split_name, split_wanted = PROFILE_SPLIT_FLAG
        split_ctx = _context_index(split_name, "0")
        tail_flags = [(_context_index(name, "0"), wanted) for name, wanted in PROFILE_CU_FLAGS]
        shape_fields = {"R": cmd.k_h, "S": cmd.k_w, "C": cmd.in_c, "K": cmd.out_c}
        shape_names = {"R": "k_h", "S": "k_w", "C": "in_c", "K": "out_c"}

        with m.FSM(name="wdec"):
            with m.State("IDLE"):
                with m.If(start):
                    m.next = "CHECK"
            with m.State("CHECK"):
                limit = 1 << config.dram.address_bits
                with m.If(cmd.wgt_addr + cmd.out_c * cmd.in_c * zdepth > weight_bytes):
                    fail("wgt_addr")
                with m.Elif(end_byte > limit):
                    fail("dram_addr")
                with m.Else():
                    m.d.sync += [stream_bits.eq(cmd.length << 3), req_addr.eq(first_word), req_left.eq(total_words),
                                 to_window.eq(total_words), first_pending.eq(1), window.eq(0), count.eq(0),
                                 position.eq(0), written.eq(0), field.eq(0), field_bit.eq(0), value.eq(0),
                                 ctu_c.eq(0), ctu_k.eq(0)]
                    m.next = "PRIME"
            with m.State("PRIME"):
                with m.If(ready):
                    with m.If(avail < RANGE_BITS):
                        fail("stream")
                    with m.Else():
                        first = bits[NEED_BITS - RANGE_BITS:]
                        m.d.comb += consume.eq(RANGE_BITS)
                        m.d.sync += [rs1.eq(0), rt1.eq(0xFF), value_s.eq(0), bflag.eq(0), value_d.eq(1),
                                     zero_run_pending.eq(0), value_t.eq(first[:8]), value_t_big.eq(first[8])]
                        m.next = "HEADER"
            with m.State("HEADER"):
                bin_, commit = decode("bypass")
                with m.If(commit):
                    accumulated = Cat(bin_, value[:31])
                    m.d.sync += [value.eq(accumulated), field_bit.eq(field_bit + 1)]
                    with m.Switch(field):
                        for index, (name, wanted) in enumerate(PROFILE_HEADER):
                            with m.Case(index):
                                length = element_spec(name).fixed_length
                                with m.If(field_bit == length - 1):
                                    m.d.sync += [field.eq(index + 1), field_bit.eq(0), value.eq(0)]
                                    if name == "integer_input":
                                        m.d.sync += integer_input.eq(accumulated[0])
                                    elif name == "max_ctu3d_idx":
                                        m.d.sync += ctu_size_idx.eq(accumulated[:2])
                                    elif name == "sublayer_cmaxw":
                                        m.d.sync += cmaxw_nonzero.eq(accumulated != 0)
                                    if isinstance(wanted, str):
                                        with m.If(accumulated[:length] != shape_fields[wanted]):
                                            fail(shape_names[wanted])
                                    elif wanted is not None:
                                        with m.If(accumulated[:length] != wanted):
                                            fail("profile")
                                    if index == len(PROFILE_HEADER) - 1:
                                        with m.If(~integer_input & cmaxw_nonzero & (accumulated[:length] == 0)):
                                            fail("stream")
                                        with m.Else():
                                            m.d.sync += step.eq(0)
                                            m.next = "CTU"
            with m.State("CTU"):
                flags = ctu_flags + [(split_ctx, split_wanted)] + tail_flags
                context = Signal(range(NUM_CONTEXTS))
                expected = Signal()
                with m.Switch(step):
                    for index, (ctx, wanted) in enumerate(flags):
                        with m.Case(index):
                            m.d.comb += [context.eq(ctx), expected.eq(wanted)]
                bin_, commit = decode("context", context)
                with m.If(commit):
                    with m.If(bin_ != expected):
                        fail("profile")
                    with m.Elif(step == len(flags) - 1):
                        m.d.sync += [morton.eq(0), c0_class.eq(1)]
                        m.next = "LEAF"
                    with m.Elif((step == len(ctu_flags) - 1) & (height <= SPLIT_FLAG_MIN_CU)
                                & (width <= SPLIT_FLAG_MIN_CU)):
                        m.d.sync += step.eq(step + 2)
                    with m.Else():
                        m.d.sync += step.eq(step + 1)
            with m.State("LEAF"):
                with m.If(walk_end):
                    bin_, commit = decode("bypass")
                    with m.If(commit):
                        with m.If(bin_ != last_ctu):
                            fail("stream")
                        with m.Elif(last_ctu):
                            m.next = "STUFFING"
                        with m.Else():
                            with m.If(ctu_k + ctu_size >= cmd.out_c):
                                m.d.sync += [ctu_k.eq(0), ctu_c.eq(ctu_c + ctu_size)]
                            with m.Else():
                                m.d.sync += ctu_k.eq(ctu_k + ctu_size)
                            m.d.sync += step.eq(0)
                            m.next = "CTU"
                with m.Elif(outside):
                    m.d.sync += morton.eq((morton | ((Const(1, len(morton)) << (skip_level * 3)) - 1)) + 1)
                with m.Else():
                    bin_, commit = decode("context", uni_map_nzflag)
                    with m.If(commit):
                        with m.If(bin_):
                            m.next = "SIGN"
                        with m.Else():
                            write_level(Const(0, 8), 0)
            with m.State("SIGN"):
                bin_, commit = decode("context", uni_sign + c0_class)
                with m.If(commit):
                    m.d.sync += [sign.eq(bin_), mag_bin.eq(0), phase.eq(0), eg_ones.eq(0), magnitude.eq(0)]
                    m.next = "MAGNITUDE"
            with m.State("MAGNITUDE"):
                bin_, commit = decode("context", uni_abs_q + 2 + mag_bin)
                with m.If(commit):
                    m.d.sync += mag_bin.eq(mag_bin + 1)
                    finished = Signal(8)
                    done_now = Signal()
                    with m.Switch(phase):
                        with m.Case(0):
                            with m.If(~bin_):
                                m.d.comb += [finished.eq(mag_bin), done_now.eq(1)]
                            with m.Elif(mag_bin == UEGK_PREFIX - 1):
                                m.d.sync += phase.eq(1)
                        with m.Case(1):
                            with m.If(bin_):
                                m.d.sync += eg_ones.eq(eg_ones + 1)
                                with m.If(eg_ones == MAX_EG_ONES - 1):
                                    fail("levels")
                            with m.Elif(eg_ones == 0):
                                m.d.comb += [finished.eq(UEGK_PREFIX), done_now.eq(1)]
                            with m.Else():
                                m.d.sync += [phase.eq(2), suffix_left.eq(eg_ones), magnitude.eq(0)]
                        with m.Case(2):
                            suffix = Cat(bin_, magnitude[:7])
                            m.d.sync += [magnitude.eq(suffix), suffix_left.eq(suffix_left - 1)]
                            with m.If(suffix_left == 1):
                                total = UEGK_PREFIX - 1 + (Const(1, 9) << eg_ones) + suffix
                                m.d.comb += [finished.eq(total), done_now.eq(1)]
                    with m.If(done_now):
                        with m.If((finished > INT8_MAGNITUDE) | ((finished == INT8_MAGNITUDE) & ~sign)):
                            fail("levels")
                        with m.Else():
                            write_level(finished, sign)
                            m.next = "LEAF"
            with m.State("STUFFING"):
                bin_, commit = decode("stuffing")
                with m.If(commit):
                    with m.If(~bin_):
                        fail("stream")
                    with m.Else():
                        m.next = "PADDING"
            with m.State("PADDING"):
                pad = Signal(3)
                m.d.comb += pad.eq(-position[:3])
                with m.If(ready):
                    padding = bits >> (NEED_BITS - pad).as_unsigned()
                    with m.If((pad > avail) | (padding != 0) | (position + pad != stream_bits)):
                        fail("stream")
                    with m.Else():
                        m.d.comb += [consume.eq(pad), done.eq(1)]
                        m.next = "IDLE"
