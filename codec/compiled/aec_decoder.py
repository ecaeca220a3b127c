"""The compiled AEC decoder and its FL / U / UEGk de-binarisers, as numba ``@njit`` functions over arrays.

The same algorithms as ``codec.reference.engine.AecDecoder`` and ``codec.reference.binarization`` (whose
docstrings cite the standard), over plain arrays, so that the compiled trees and sublayer decoder call them
directly:

* ``state``: int64[STATE_SIZE], the engine registers and bookkeeping (``new_state``);
* ``ctx``: the context array of ``codec.compiled.contexts``;
* ``data``: uint8[:], the stream;
* ``trace``: int32[capacity, 2] of (ctxIdx, bin), or an empty array for no trace (a positions trace,
  int32[capacity, POSITIONS_TRACE_COLUMNS], also holds where the engine stood after each bin).

numba cannot raise our CodecError with a position, so errors set ``state[S_ERROR]`` (ERR_* codes) and
the decoding functions then return -1; a caller checks the return value or ``state[S_ERROR]`` and
converts with ``raise_on_error``. After an error the engine keeps going on 0 bits, never past the end
of ``data``, so an njit parser can check once per element.

``FastDecoder`` wraps the functions in the ``AecDecoder`` API (per-bin calls from Python: for tests and
mixed code, not for speed).
"""
from __future__ import annotations

import numpy as np

from ..errors import CodecError
from ..reference.binarization import MAX_EG_VALUE, MAX_FL_LENGTH
from ..reference.elements import NUM_CONTEXTS
from ..reference.engine import (BOUND_S, BYPASS_LG_PMPS, RANGE_BITS, STUFFING_LG_PMPS, TERMINATION_ZERO_BITS,
                                TRACE_BYPASS, TRACE_STUFFING)
from .contexts import CTX_LG_PMPS, CTX_MPS, INC_CONST, ctx_inc, new_contexts, update_ctx
from .jit_cache import njit

# state[] layout
S_RS1, S_RT1, S_VALUE_S, S_VALUE_T, S_VALUE_D, S_BFLAG = 0, 1, 2, 3, 4, 5
S_POS, S_END, S_BOUND_S, S_BINS, S_TRACE_LEN, S_ERROR, S_ERROR_POS = 6, 7, 8, 9, 10, 11, 12
# the hardware's zero-run cycles (codec.npu_profile.ZERO_RUN_BITS): counted when S_ZERO_RUN_BITS is set
S_ZERO_RUN_BITS, S_ZERO_RUNS = 13, 14
# the hardware's cascade runs (docs/rtl-wdec.md, "The cascade"): while state[S_RUN_FROM] >= 0 (the bin that began
# the open run), a bin after zero-run steps ends the run before it; state[S_RUNS + n] counts runs of n bins
S_RUN_FROM, S_RUNS = 15, 16
MAX_RUN = 127               # longer runs count as MAX_RUN (a profile leaf of a decodable level has at most 81 bins)
STATE_SIZE = S_RUNS + MAX_RUN + 1
# state[S_ERROR] codes, and the encoder's (codec.compiled.aec_encoder)
ERR_NONE, ERR_PAST_END, ERR_PREFIX_TOO_LONG, ERR_VALUE_TOO_LARGE, ERR_TRACE_FULL, ERR_TERMINATOR = 0, 1, 2, 3, 4, 5
ERR_OUTPUT_FULL = 6
ERROR_MESSAGES = {
    ERR_PAST_END: "reading past the end of the stream",
    ERR_PREFIX_TOO_LONG: "unary / Exp-Golomb prefix longer than any legal value needs",
    ERR_VALUE_TOO_LARGE: "decoded value exceeds its maximum",
    ERR_TRACE_FULL: "trace array full",
    ERR_TERMINATOR: "terminating stuffing bin is 0 or padding is not zero",
    ERR_OUTPUT_FULL: "output buffer full",
}


def new_state(data: np.ndarray, bit_offset: int = 0, bound_s: int = BOUND_S) -> np.ndarray:
    """Engine state after 10.4.2.2's initialisation (valueT = read_bits(9)); check ``state[S_ERROR]``."""
    state = np.zeros(STATE_SIZE, dtype=np.int64)
    state[S_RT1] = 0xFF
    state[S_POS] = bit_offset
    state[S_END] = 8 * len(data)
    state[S_BOUND_S] = bound_s
    state[S_VALUE_D] = 1
    state[S_RUN_FROM] = -1
    state[S_VALUE_T] = _read_bits(state, data, RANGE_BITS)
    return state


NO_TRACE = np.zeros((0, 2), dtype=np.int32)
# A positions trace has three more columns: the bit position after the row's bin, the zero-run cycles so far, and
# (set by the profile walk, codec.compiled.profile_walk) whether the bin is one of a leaf's: TRACE_LEAF_BIN, or
# TRACE_LEAF_LAST for the last bin of its leaf (0: any other bin), with TRACE_CUBE_FIRST added on the first bin of
# a leaf whose 8x8x8 cube is not the previous leaf's
TRACE_POS, TRACE_ZERO_RUNS, TRACE_LEAF, POSITIONS_TRACE_COLUMNS = 2, 3, 4, 5
TRACE_LEAF_BIN, TRACE_LEAF_LAST, TRACE_LEAF_KIND, TRACE_CUBE_FIRST = 1, 2, 3, 4


@njit
def set_error(state, code):
    """Record the first error and where the engine stood; later ones keep it."""
    if state[S_ERROR] == ERR_NONE:
        state[S_ERROR] = code
        state[S_ERROR_POS] = state[S_POS]


@njit
def _peek_bits(data, pos, count):
    """``count`` (1..9) bits MSB first at bit ``pos``, which the caller has checked against the end."""
    first = pos >> 3
    window = np.int64(data[first]) << 16
    if first + 1 < data.shape[0]:
        window |= np.int64(data[first + 1]) << 8
        if first + 2 < data.shape[0]:
            window |= np.int64(data[first + 2])
    return (window >> (24 - (pos & 7) - count)) & ((1 << count) - 1)


@njit
def _read_bits(state, data, count):
    """read_bits(count) for count <= 9, MSB first, from a 3-byte window; past the end flags an error."""
    if count == 0:
        return 0
    pos = state[S_POS]
    if pos + count > state[S_END]:
        set_error(state, ERR_PAST_END)
        return 0
    state[S_POS] = pos + count
    return _peek_bits(data, pos, count)


BIT_LENGTH = np.array([int(v).bit_length() for v in range(512)], dtype=np.int64)


@njit
def bit_length(value):
    """Bit length of a value below 512 (valueT while normalising, tRlps)."""
    return BIT_LENGTH[value]


@njit
def zero_runs(data, pos, end, bound_s, run_bits):
    """Engine cycles a renormalisation from valueT = 0 spends on whole ``run_bits`` of zeros from bit ``pos``
    before the rest (codec.npu_profile's counting decoder; bits past ``end`` read as 0)."""
    count, value_s = 0, 0
    while bound_s - value_s > run_bits:
        for bit in range(pos + value_s, pos + value_s + run_bits):
            if bit < end and (data[bit >> 3] >> (7 - (bit & 7))) & 1:
                return count
        value_s += run_bits
        count += 1
    return count


@njit
def end_run(state, bin_index):
    """Count the open cascade run as ending before bin ``bin_index`` (a bin after zero-run steps, or the end
    of a leaf), if it holds a bin; the next run begins there."""
    start = state[S_RUN_FROM]
    if 0 <= start < bin_index:
        state[S_RUNS + min(bin_index - start, MAX_RUN)] += 1
        state[S_RUN_FROM] = bin_index


@njit
def decode_bin(state, data, pred_mps, lg_pmps_full):
    """decode_decision without the context update (reference.engine.AecDecoder._decode)."""
    lg_pmps = lg_pmps_full >> 2
    value_t = state[S_VALUE_T]
    bound_s = state[S_BOUND_S]
    if state[S_VALUE_D] or (state[S_BFLAG] == 1 and state[S_RS1] == bound_s):
        if value_t == 0 and state[S_ZERO_RUN_BITS]:
            runs = zero_runs(data, state[S_POS], state[S_END], bound_s, state[S_ZERO_RUN_BITS])
            if runs:
                state[S_ZERO_RUNS] += runs
                end_run(state, state[S_BINS])
        state[S_RS1] = 0
        value_s = 0
        while value_t < 0x100 and value_s < bound_s:
            step = min(RANGE_BITS - bit_length(value_t), bound_s - value_s) if value_t else 1
            value_t = (value_t << step) | _read_bits(state, data, step)
            value_s += step
        state[S_BFLAG] = 1 if value_t < 0x100 else 0
        value_t &= 0xFF
        state[S_VALUE_S] = value_s
    value_s = state[S_VALUE_S]
    rs1 = state[S_RS1]
    rt1 = state[S_RT1]
    if rt1 >= lg_pmps:
        rs2 = rs1
        rt2 = rt1 - lg_pmps
        s_flag = 0
    else:
        rs2 = rs1 + 1
        rt2 = 256 + rt1 - lg_pmps
        s_flag = 1
    if rs2 > value_s or (rs2 == value_s and value_t >= rt2 and state[S_BFLAG] == 0):   # LPS
        bin_val = 1 - pred_mps
        t_rlps = lg_pmps if s_flag == 0 else rt1 + lg_pmps
        if rs2 == value_s:
            value_t -= rt2
        else:
            value_t = 256 + ((value_t << 1) | _read_bits(state, data, 1)) - rt2
        shift = RANGE_BITS - bit_length(t_rlps)
        value_t = (value_t << shift) | _read_bits(state, data, shift)
        state[S_RT1] = (t_rlps << shift) & 0xFF
        state[S_VALUE_D] = 1
    else:                                                                               # MPS
        bin_val = pred_mps
        state[S_RS1] = rs2
        state[S_RT1] = rt2
        state[S_VALUE_D] = 0
    state[S_VALUE_T] = value_t
    state[S_BINS] += 1
    return bin_val


@njit
def record(state, trace, ctx_idx, bin_val):
    """One trace row: (ctxIdx, bin), and in a positions trace the engine's bit position and zero-run cycles
    so far (the npu profile's per-cycle consumption, codec.compiled.profile_walk.profile_cycles)."""
    if trace.shape[0] == 0:
        return
    n = state[S_TRACE_LEN]
    if n >= trace.shape[0]:
        set_error(state, ERR_TRACE_FULL)
        return
    trace[n, 0] = ctx_idx
    trace[n, 1] = bin_val
    if trace.shape[1] > TRACE_POS:
        trace[n, TRACE_POS] = state[S_POS]
        trace[n, TRACE_ZERO_RUNS] = state[S_ZERO_RUNS]
    state[S_TRACE_LEN] = n + 1


@njit
def decode_decision(state, ctx, data, trace, ctx_idx):
    bin_val = decode_bin(state, data, ctx[ctx_idx, CTX_MPS], ctx[ctx_idx, CTX_LG_PMPS])
    update_ctx(ctx, ctx_idx, bin_val)
    record(state, trace, ctx_idx, bin_val)
    return bin_val


@njit
def decode_bypass(state, data, trace):
    bin_val = decode_bin(state, data, 0, BYPASS_LG_PMPS)
    record(state, trace, TRACE_BYPASS, bin_val)
    return bin_val


@njit
def decode_stuffing_bit(state, data, trace):
    bin_val = decode_bin(state, data, 0, STUFFING_LG_PMPS)
    record(state, trace, TRACE_STUFFING, bin_val)
    return bin_val


@njit
def finish(state, data, trace, strict):
    """The terminator (reference.engine.AecDecoder.finish); returns the bit position after it, or -1. Not
    ``strict``, only the stuffing bin is read: ``data`` and S_END then include the zeros it may read past the
    stream (``finish_stream``)."""
    ok = decode_stuffing_bit(state, data, trace) == 1
    if strict:
        padding = (8 - (state[S_POS] & 7)) & 7
        ok = _read_bits(state, data, padding) == 0 and ok
    if not ok:
        set_error(state, ERR_TERMINATOR)
    return -1 if state[S_ERROR] else state[S_POS]


def finish_stream(state, data: np.ndarray, trace, strict: bool) -> int:
    """``finish`` on a stream of ``data``: not strict, with TERMINATION_ZERO_BITS of zeros after the data for
    the stuffing bin to read, an error there placed at the end of the data at the latest."""
    if strict:
        return finish(state, data, trace, True)
    end = state[S_END]
    state[S_END] += TERMINATION_ZERO_BITS
    result = finish(state, np.concatenate([data, np.zeros(TERMINATION_ZERO_BITS // 8, dtype=np.uint8)]), trace,
                    False)
    state[S_ERROR_POS] = min(state[S_ERROR_POS], end)
    return result


@njit
def _read_bin(state, ctx, data, trace, ctx_start, rule, sign, bin_idx):
    """One bin of a multi-bin element: bypass when ctx_start < 0, else ctx_start + ctxIdxInc."""
    if ctx_start < 0:
        return decode_bypass(state, data, trace)
    return decode_decision(state, ctx, data, trace, ctx_start + ctx_inc(rule, bin_idx, sign))


@njit
def decode_fl(state, ctx, data, trace, ctx_start, rule, length):
    """FL (MSB first); -1 on error."""
    if length < 0 or length > MAX_FL_LENGTH:
        set_error(state, ERR_VALUE_TOO_LARGE)
        return -1
    value = 0
    for bin_idx in range(length):
        value = (value << 1) | _read_bin(state, ctx, data, trace, ctx_start, rule, 0, bin_idx)
    return -1 if state[S_ERROR] else value


@njit
def decode_u(state, ctx, data, trace, ctx_start, rule, max_value):
    """Unary with at most ``max_value`` ones; -1 on error."""
    value = 0
    while _read_bin(state, ctx, data, trace, ctx_start, rule, 0, value):
        value += 1
        if value > max_value:
            set_error(state, ERR_PREFIX_TOO_LONG)
            return -1
    return -1 if state[S_ERROR] else value


@njit
def _read_local(data, pos, count, end, error, error_pos):
    """Register-local read for the inlined loops: (bits, pos, error, error_pos). Past the end it reads zeros,
    leaves the position and records ERR_PAST_END at the first such read, as the state-array engine does."""
    if pos + count > end:
        if error == ERR_NONE:
            return 0, pos, ERR_PAST_END, pos
        return 0, pos, error, error_pos
    return _peek_bits(data, pos, count), pos + count, error, error_pos


@njit(inline="always")
def _max_leading_ones(k, max_value):
    """Largest EGk prefix a value <= max_value can have (reference.binarization.max_leading_ones, as a loop)."""
    ones = -1 - k
    bound = max_value + (1 << k)
    while bound:
        bound >>= 1
        ones += 1
    return ones


@njit
def decode_uegk(state, ctx, data, trace, ctx_start, rule, sign, c_max, k):
    """UEGk with the '<' reading (reference.binarization.decode_uegk), values up to MAX_EG_VALUE; -1 on error.

    The tag trees' delta elements are UEGk(0, 8) and UEGk(0, 5): every value costs at least 9 or 6 bins.
    So this loop keeps the engine registers in locals for the whole bin string (state[] is read once and
    written once; through memory every bin waited on the previous bin's stores) and walks the three parts
    of the binarisation (unary prefix up to cMax, Exp-Golomb prefix, suffix) as phases of one loop around
    a single copy of ``decode_bin`` (same arithmetic, same reads). With a trace it takes the bin-by-bin path.
    """
    if trace.shape[0]:
        return _decode_uegk_traced(state, ctx, data, trace, ctx_start, rule, sign, c_max, k)
    remaining_max = MAX_EG_VALUE - c_max
    max_ones = _max_leading_ones(k, remaining_max)
    end, bound_s = state[S_END], state[S_BOUND_S]
    rs1, rt1, value_s, value_t = state[S_RS1], state[S_RT1], state[S_VALUE_S], state[S_VALUE_T]
    value_d, b_flag, pos = state[S_VALUE_D], state[S_BFLAG], state[S_POS]
    error, error_pos = state[S_ERROR], state[S_ERROR_POS]
    run_bits, runs = state[S_ZERO_RUN_BITS], 0
    phase = 0 if c_max else 1                  # 0: unary prefix, 1: Exp-Golomb prefix, 2: suffix, 3: done
    ones = eg_ones = suffix = bins = left = 0
    while phase != 3:
        # ---- one bin: decode_bin + update_ctx on the local registers
        if ctx_start < 0:
            ctx_idx, pred_mps, lg_pmps = -1, 0, BYPASS_LG_PMPS >> 2
        else:
            ctx_idx = ctx_start + ctx_inc(rule, bins, sign)
            pred_mps, lg_pmps = ctx[ctx_idx, CTX_MPS], ctx[ctx_idx, CTX_LG_PMPS] >> 2
        if value_d or (b_flag == 1 and rs1 == bound_s):
            if value_t == 0 and run_bits:
                steps = zero_runs(data, pos, end, bound_s, run_bits)
                if steps:
                    runs += steps
                    end_run(state, state[S_BINS] + bins)
            rs1 = 0
            value_s = 0
            while value_t < 0x100 and value_s < bound_s:
                step = min(RANGE_BITS - BIT_LENGTH[value_t], bound_s - value_s) if value_t else 1
                bits, pos, error, error_pos = _read_local(data, pos, step, end, error, error_pos)
                value_t = (value_t << step) | bits
                value_s += step
            b_flag = 1 if value_t < 0x100 else 0
            value_t &= 0xFF
        if rt1 >= lg_pmps:
            rs2, rt2, s_flag = rs1, rt1 - lg_pmps, 0
        else:
            rs2, rt2, s_flag = rs1 + 1, 256 + rt1 - lg_pmps, 1
        if rs2 > value_s or (rs2 == value_s and value_t >= rt2 and b_flag == 0):      # LPS
            bin_val = 1 - pred_mps
            t_rlps = lg_pmps if s_flag == 0 else rt1 + lg_pmps
            if rs2 == value_s:
                value_t -= rt2
            else:
                bit, pos, error, error_pos = _read_local(data, pos, 1, end, error, error_pos)
                value_t = 256 + ((value_t << 1) | bit) - rt2
            shift = RANGE_BITS - BIT_LENGTH[t_rlps]
            bits = 0
            if shift:
                bits, pos, error, error_pos = _read_local(data, pos, shift, end, error, error_pos)
            value_t = (value_t << shift) | bits
            rt1 = (t_rlps << shift) & 0xFF
            value_d = 1
        else:                                                                            # MPS
            bin_val = pred_mps
            rs1, rt1, value_d = rs2, rt2, 0
        if ctx_idx >= 0:
            update_ctx(ctx, ctx_idx, bin_val)
        bins += 1
        # ---- the binarisation
        if phase == 0:
            if bin_val:
                ones += 1
                if ones == c_max:
                    phase = 1
            else:
                phase = 3
        elif phase == 1:
            if bin_val:
                eg_ones += 1
                if eg_ones > max_ones or error:
                    if error == ERR_NONE:
                        error, error_pos = ERR_PREFIX_TOO_LONG, pos
                    phase = 3
            else:
                left = eg_ones + k
                phase = 2 if left else 3
        else:
            suffix = (suffix << 1) | bin_val
            left -= 1
            if left == 0:
                phase = 3
    state[S_RS1], state[S_RT1], state[S_VALUE_S], state[S_VALUE_T] = rs1, rt1, value_s, value_t
    state[S_VALUE_D], state[S_BFLAG], state[S_POS] = value_d, b_flag, pos
    state[S_ERROR], state[S_ERROR_POS] = error, error_pos
    state[S_BINS] += bins
    state[S_ZERO_RUNS] += runs
    if error:
        return -1
    if ones < c_max:
        return ones
    value = (1 << (eg_ones + k)) - (1 << k) + suffix
    if value > remaining_max:
        set_error(state, ERR_VALUE_TOO_LARGE)
        return -1
    return c_max + value


@njit
def _decode_uegk_traced(state, ctx, data, trace, ctx_start, rule, sign, c_max, k):
    """decode_uegk bin by bin through decode_decision, recording every bin in ``trace``."""
    ones = 0
    while ones < c_max:
        if not _read_bin(state, ctx, data, trace, ctx_start, rule, sign, ones):
            return -1 if state[S_ERROR] else ones
        ones += 1
    remaining_max = MAX_EG_VALUE - c_max
    max_ones = _max_leading_ones(k, remaining_max)
    bin_idx = c_max
    eg_ones = 0
    while _read_bin(state, ctx, data, trace, ctx_start, rule, sign, bin_idx):
        bin_idx += 1
        eg_ones += 1
        if eg_ones > max_ones or state[S_ERROR]:
            set_error(state, ERR_PREFIX_TOO_LONG)
            return -1
    bin_idx += 1
    suffix = 0
    for _ in range(eg_ones + k):
        suffix = (suffix << 1) | _read_bin(state, ctx, data, trace, ctx_start, rule, sign, bin_idx)
        bin_idx += 1
    value = (1 << (eg_ones + k)) - (1 << k) + suffix
    if value > remaining_max:
        set_error(state, ERR_VALUE_TOO_LARGE)
    return -1 if state[S_ERROR] else c_max + value


@njit
def decode_program(state, ctx, data, trace, ops, out):
    """Decode one bin per entry of ``ops`` (ctxIdx >= 0, -1 bypass, -2 stuffing) into ``out``.

    For tests and benchmarks of the bare engine; returns the number of bins decoded before an error.
    """
    for i in range(ops.shape[0]):
        op = ops[i]
        if op >= 0:
            out[i] = decode_decision(state, ctx, data, trace, op)
        elif op == TRACE_BYPASS:
            out[i] = decode_bypass(state, data, trace)
        else:
            out[i] = decode_stuffing_bit(state, data, trace)
        if state[S_ERROR]:
            return i
    return ops.shape[0]


def raise_on_error(state: np.ndarray, element: str | None = None) -> None:
    """Turn ``state[S_ERROR]`` into a CodecError carrying the bit position where it happened."""
    code = int(state[S_ERROR])
    if code != ERR_NONE:
        raise CodecError(ERROR_MESSAGES[code], bit_position=int(state[S_ERROR_POS]), element=element)


class FastDecoder:
    """``AecDecoder``'s API over the njit functions (the same bins, trace and bit positions)."""

    def __init__(self, data: bytes, *, bit_offset: int = 0, num_contexts: int = NUM_CONTEXTS,
                 trace: bool = False, bound_s: int = BOUND_S, trace_capacity: int = 1 << 20) -> None:
        self.data = np.frombuffer(bytes(data), dtype=np.uint8)
        if not 0 <= bit_offset <= 8 * len(self.data):
            raise CodecError(f"bit_offset {bit_offset} outside the {len(self.data)}-byte buffer",
                             bit_position=bit_offset)
        self.state = new_state(self.data, bit_offset, bound_s)
        self.ctx = new_contexts(num_contexts)
        self._trace = np.zeros((trace_capacity, 2), dtype=np.int32) if trace else NO_TRACE
        raise_on_error(self.state)

    @property
    def bit_position(self) -> int:
        return int(self.state[S_POS])

    @property
    def bins_decoded(self) -> int:
        return int(self.state[S_BINS])

    @property
    def trace(self) -> list[tuple[int, int]] | None:
        if self._trace.shape[0] == 0:
            return None
        return [(int(c), int(b)) for c, b in self._trace[: self.state[S_TRACE_LEN]]]

    def _checked(self, value: int) -> int:
        raise_on_error(self.state)
        return int(value)

    def decode_decision(self, ctx_idx: int) -> int:
        if not 0 <= ctx_idx < self.ctx.shape[0]:
            raise IndexError(f"ctx_idx {ctx_idx} outside 0..{self.ctx.shape[0] - 1}")
        return self._checked(decode_decision(self.state, self.ctx, self.data, self._trace, ctx_idx))

    def decode_bypass(self) -> int:
        return self._checked(decode_bypass(self.state, self.data, self._trace))

    def decode_bypass_bits(self, count: int) -> int:
        return self._checked(decode_fl(self.state, self.ctx, self.data, self._trace, -1, INC_CONST, count))

    def decode_stuffing_bit(self) -> int:
        return self._checked(decode_stuffing_bit(self.state, self.data, self._trace))

    def finish(self, strict: bool = True) -> int:
        return self._checked(finish_stream(self.state, self.data, self._trace, strict))
