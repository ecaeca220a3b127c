"""The speed path: the AEC decoder and encoder and the FL / U / UEGk (de-)binarisations as numba ``@njit``.

Same algorithms as ``codec.engine.AecDecoder`` / ``AecEncoder`` (whose docstrings cite the standard), over
plain arrays so that a syntax parser or encoder compiled with ``@njit`` can call these functions directly:

* ``state``: int64[STATE_SIZE], the engine registers and bookkeeping (``new_state``);
* ``ctx``: int64[num_contexts, 3], columns CTX_MPS, CTX_CYCNO, CTX_LG_PMPS (``new_contexts``);
* ``data``: uint8[:], the stream;
* ``trace``: int32[capacity, 2] of (ctxIdx, bin), or an empty array for no trace.

numba cannot raise our CodecError with a position, so errors set ``state[S_ERROR]`` (ERR_* codes) and
the decoding functions then return -1; a caller checks the return value or ``state[S_ERROR]`` and
converts with ``raise_on_error``. After an error the engine keeps going on 0 bits, never past the end
of ``data``, so an njit parser can check once per element.

The encoder side has its own ``encoder state`` (``new_encoder_state``) and writes into a caller-given
uint8 ``out`` array (``output_capacity(bins)`` bytes always suffice; an empty ``out`` only counts bits, like
``AecEncoder.fork``).

``FastDecoder`` / ``FastEncoder`` wrap the functions in the ``AecDecoder`` / ``AecEncoder`` API (per-bin
calls from Python: for tests and mixed code, not for speed).
"""
from __future__ import annotations

from aipu.codec._jit import njit
import numpy as np

from aipu.codec.reference.binarization import MAX_EG_VALUE, MAX_FL_LENGTH
from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.engine import (BOUND_S, BYPASS_LG_PMPS, LG_PMPS_INIT, LG_PMPS_MAX, LOW_FLUSH_BITS, LPS_INCREMENT,
                          RANGE_BITS, STUFFING_LG_PMPS, TRACE_BYPASS, TRACE_STUFFING)
from aipu.codec.errors import CodecError

# state[] layout
S_RS1, S_RT1, S_VALUE_S, S_VALUE_T, S_VALUE_D, S_BFLAG = 0, 1, 2, 3, 4, 5
S_POS, S_END, S_BOUND_S, S_BINS, S_TRACE_LEN, S_ERROR, S_ERROR_POS = 6, 7, 8, 9, 10, 11, 12
STATE_SIZE = 13
# ctx[] columns
CTX_MPS, CTX_CYCNO, CTX_LG_PMPS = 0, 1, 2
# state[S_ERROR] codes
ERR_NONE, ERR_PAST_END, ERR_PREFIX_TOO_LONG, ERR_VALUE_TOO_LARGE, ERR_TRACE_FULL, ERR_TERMINATOR = 0, 1, 2, 3, 4, 5
ERROR_MESSAGES = {
    ERR_PAST_END: "reading past the end of the stream",
    ERR_PREFIX_TOO_LONG: "unary / Exp-Golomb prefix longer than any legal value needs",
    ERR_VALUE_TOO_LARGE: "decoded value exceeds its maximum",
    ERR_TRACE_FULL: "trace array full",
    ERR_TERMINATOR: "terminating stuffing bin is 0 or padding is not zero",
}
# ctxIdxInc rules of the multi-bin context-coded elements (contexts.INC_RULES), as codes for njit code
INC_CONST, INC_BIN_NONZERO, INC_CLAMP23, INC_CLAMP46 = 0, 1, 2, 3
_INC_CODES = {"0": INC_CONST, "binIdx?1:0": INC_BIN_NONZERO, "binIdx<23?binIdx+1:23": INC_CLAMP23,
              "binIdx<46?binIdx+2:46": INC_CLAMP46, "binIdx<46+sign?binIdx+2:46+sign": INC_CLAMP46}

# No function here allocates, so all are compiled without numba's reference counting (_nrt=False):
# with it, every call passing arrays costs atomic incref/decref pairs, which made a bin 3-6 times slower
# (measured: 60-80 ns against 11-26 ns per bin). An njit parser with reference counting may call them.
_njit = njit(_nrt=False)


def new_state(data: np.ndarray, bit_offset: int = 0, bound_s: int = BOUND_S) -> np.ndarray:
    """Engine state after 10.4.2.2's initialisation (valueT = read_bits(9)); check ``state[S_ERROR]``."""
    state = np.zeros(STATE_SIZE, dtype=np.int64)
    state[S_RT1] = 0xFF
    state[S_POS] = bit_offset
    state[S_END] = 8 * len(data)
    state[S_BOUND_S] = bound_s
    state[S_VALUE_D] = 1
    state[S_VALUE_T] = _read_bits(state, data, RANGE_BITS)
    return state


def new_contexts(count: int = NUM_CONTEXTS) -> np.ndarray:
    ctx = np.zeros((count, 3), dtype=np.int64)
    ctx[:, CTX_LG_PMPS] = LG_PMPS_INIT
    return ctx


NO_TRACE = np.zeros((0, 2), dtype=np.int32)


@_njit
def _fail(state, code):
    if state[S_ERROR] == ERR_NONE:
        state[S_ERROR] = code
        state[S_ERROR_POS] = state[S_POS]


@_njit
def _peek_bits(data, pos, count):
    """``count`` (1..9) bits MSB first at bit ``pos``, which the caller has checked against the end."""
    first = pos >> 3
    window = np.int64(data[first]) << 16
    if first + 1 < data.shape[0]:
        window |= np.int64(data[first + 1]) << 8
        if first + 2 < data.shape[0]:
            window |= np.int64(data[first + 2])
    return (window >> (24 - (pos & 7) - count)) & ((1 << count) - 1)


@_njit
def _read_bits(state, data, count):
    """read_bits(count) for count <= 9, MSB first, from a 3-byte window; past the end flags an error."""
    if count == 0:
        return 0
    pos = state[S_POS]
    if pos + count > state[S_END]:
        _fail(state, ERR_PAST_END)
        return 0
    state[S_POS] = pos + count
    return _peek_bits(data, pos, count)


_BIT_LENGTH = np.array([int(v).bit_length() for v in range(512)], dtype=np.int64)


@_njit
def _bit_length(value):
    """Bit length of a value below 512 (valueT while normalising, tRlps)."""
    return _BIT_LENGTH[value]


@_njit
def decode_bin(state, data, pred_mps, lg_pmps_full):
    """decode_decision without the context update (engine.AecDecoder._decode)."""
    lg_pmps = lg_pmps_full >> 2
    value_t = state[S_VALUE_T]
    bound_s = state[S_BOUND_S]
    if state[S_VALUE_D] or (state[S_BFLAG] == 1 and state[S_RS1] == bound_s):
        state[S_RS1] = 0
        value_s = 0
        while value_t < 0x100 and value_s < bound_s:
            step = min(RANGE_BITS - _bit_length(value_t), bound_s - value_s) if value_t else 1
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
        shift = RANGE_BITS - _bit_length(t_rlps)
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


@_njit
def update_ctx(ctx, ctx_idx, bin_val):
    """update_ctx (10.4.3.3.5), as engine.ContextModels.update."""
    cycno = ctx[ctx_idx, CTX_CYCNO]
    lg_pmps = ctx[ctx_idx, CTX_LG_PMPS]
    cwr = 3 if cycno <= 1 else (4 if cycno == 2 else 5)
    if bin_val != ctx[ctx_idx, CTX_MPS]:
        ctx[ctx_idx, CTX_CYCNO] = cycno + 1 if cycno <= 2 else 3
        lg_pmps += LPS_INCREMENT[cwr - 3]
        if lg_pmps > LG_PMPS_MAX:
            lg_pmps = 2047 - lg_pmps
            ctx[ctx_idx, CTX_MPS] = 1 - ctx[ctx_idx, CTX_MPS]
    else:
        if cycno == 0:
            ctx[ctx_idx, CTX_CYCNO] = 1
        lg_pmps -= (lg_pmps >> cwr) + (lg_pmps >> (cwr + 2))
    ctx[ctx_idx, CTX_LG_PMPS] = lg_pmps


@_njit
def _record(state, trace, ctx_idx, bin_val):
    if trace.shape[0] == 0:
        return
    n = state[S_TRACE_LEN]
    if n >= trace.shape[0]:
        _fail(state, ERR_TRACE_FULL)
        return
    trace[n, 0] = ctx_idx
    trace[n, 1] = bin_val
    state[S_TRACE_LEN] = n + 1


@_njit
def decode_decision(state, ctx, data, trace, ctx_idx):
    bin_val = decode_bin(state, data, ctx[ctx_idx, CTX_MPS], ctx[ctx_idx, CTX_LG_PMPS])
    update_ctx(ctx, ctx_idx, bin_val)
    _record(state, trace, ctx_idx, bin_val)
    return bin_val


@_njit
def decode_bypass(state, data, trace):
    bin_val = decode_bin(state, data, 0, BYPASS_LG_PMPS)
    _record(state, trace, TRACE_BYPASS, bin_val)
    return bin_val


@_njit
def decode_stuffing_bit(state, data, trace):
    bin_val = decode_bin(state, data, 0, STUFFING_LG_PMPS)
    _record(state, trace, TRACE_STUFFING, bin_val)
    return bin_val


@_njit
def finish(state, data, trace):
    """The terminator (engine.AecDecoder.finish); returns the bit position after it, or -1."""
    ok = decode_stuffing_bit(state, data, trace) == 1
    padding = (8 - (state[S_POS] & 7)) & 7
    if _read_bits(state, data, padding) != 0 or not ok:
        _fail(state, ERR_TERMINATOR)
    return -1 if state[S_ERROR] else state[S_POS]


@_njit
def ctx_inc(rule, bin_idx, sign):
    """ctxIdxInc of the rules shared by the multi-bin elements (INC_* codes)."""
    if rule == INC_CLAMP46:
        return bin_idx + 2 if bin_idx < 46 + sign else 46 + sign
    if rule == INC_CLAMP23:
        return bin_idx + 1 if bin_idx < 23 else 23
    if rule == INC_BIN_NONZERO:
        return 1 if bin_idx else 0
    return 0


@_njit
def inc_nz_neighbours(n0, n1):
    return n0 if n0 == n1 else 2


@_njit
def inc_coef_sign(c0):
    return 0 if c0 < 0 else (1 if c0 == 0 else 2)


@_njit
def inc_coef_pair(c0, c1):
    return 0 if (c0 != 0 and c1 != 0) else (1 if (c0 == 0 and c1 == 0) else 2)


@_njit
def _read_bin(state, ctx, data, trace, ctx_start, rule, sign, bin_idx):
    """One bin of a multi-bin element: bypass when ctx_start < 0, else ctx_start + ctxIdxInc."""
    if ctx_start < 0:
        return decode_bypass(state, data, trace)
    return decode_decision(state, ctx, data, trace, ctx_start + ctx_inc(rule, bin_idx, sign))


@_njit
def decode_fl(state, ctx, data, trace, ctx_start, rule, length):
    """FL (MSB first); -1 on error."""
    if length < 0 or length > MAX_FL_LENGTH:
        _fail(state, ERR_VALUE_TOO_LARGE)
        return -1
    value = 0
    for bin_idx in range(length):
        value = (value << 1) | _read_bin(state, ctx, data, trace, ctx_start, rule, 0, bin_idx)
    return -1 if state[S_ERROR] else value


@_njit
def decode_u(state, ctx, data, trace, ctx_start, rule, max_value):
    """Unary with at most ``max_value`` ones; -1 on error."""
    value = 0
    while _read_bin(state, ctx, data, trace, ctx_start, rule, 0, value):
        value += 1
        if value > max_value:
            _fail(state, ERR_PREFIX_TOO_LONG)
            return -1
    return -1 if state[S_ERROR] else value


@_njit
def _read_local(data, pos, count, end, error, error_pos):
    """Register-local read for the inlined loops: (bits, pos, error, error_pos). Past the end it reads zeros,
    leaves the position and records ERR_PAST_END at the first such read, as the state-array engine does."""
    if pos + count > end:
        if error == ERR_NONE:
            return 0, pos, ERR_PAST_END, pos
        return 0, pos, error, error_pos
    return _peek_bits(data, pos, count), pos + count, error, error_pos


@_njit
def decode_uegk(state, ctx, data, trace, ctx_start, rule, sign, c_max, k):
    """UEGk with the '<' reading (binarization.decode_uegk), values up to MAX_EG_VALUE; -1 on error.

    The tag trees' delta elements are UEGk(0, 8) and UEGk(0, 5): every value costs at least 9 or 6 bins.
    So this loop keeps the engine registers in locals for the whole bin string (state[] is read once and
    written once; through memory every bin waited on the previous bin's stores) and walks the three parts
    of the binarisation (unary prefix up to cMax, Exp-Golomb prefix, suffix) as phases of one loop around
    a single copy of ``decode_bin`` (same arithmetic, same reads). With a trace it takes the bin-by-bin path.
    """
    if trace.shape[0]:
        return _decode_uegk_traced(state, ctx, data, trace, ctx_start, rule, sign, c_max, k)
    remaining_max = MAX_EG_VALUE - c_max
    max_ones = -1 - k                          # binarization._max_leading_ones
    bound = remaining_max + (1 << k)
    while bound:
        bound >>= 1
        max_ones += 1
    end, bound_s = state[S_END], state[S_BOUND_S]
    rs1, rt1, value_s, value_t = state[S_RS1], state[S_RT1], state[S_VALUE_S], state[S_VALUE_T]
    value_d, b_flag, pos = state[S_VALUE_D], state[S_BFLAG], state[S_POS]
    error, error_pos = state[S_ERROR], state[S_ERROR_POS]
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
            rs1 = 0
            value_s = 0
            while value_t < 0x100 and value_s < bound_s:
                step = min(RANGE_BITS - _BIT_LENGTH[value_t], bound_s - value_s) if value_t else 1
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
            shift = RANGE_BITS - _BIT_LENGTH[t_rlps]
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
    if error:
        return -1
    if ones < c_max:
        return ones
    value = (1 << (eg_ones + k)) - (1 << k) + suffix
    if value > remaining_max:
        _fail(state, ERR_VALUE_TOO_LARGE)
        return -1
    return c_max + value


@_njit
def _decode_uegk_traced(state, ctx, data, trace, ctx_start, rule, sign, c_max, k):
    """decode_uegk bin by bin through decode_decision, recording every bin in ``trace``."""
    ones = 0
    while ones < c_max:
        if not _read_bin(state, ctx, data, trace, ctx_start, rule, sign, ones):
            return -1 if state[S_ERROR] else ones
        ones += 1
    remaining_max = MAX_EG_VALUE - c_max
    max_ones = -1 - k                          # binarization._max_leading_ones
    bound = remaining_max + (1 << k)
    while bound:
        bound >>= 1
        max_ones += 1
    bin_idx = c_max
    eg_ones = 0
    while _read_bin(state, ctx, data, trace, ctx_start, rule, sign, bin_idx):
        bin_idx += 1
        eg_ones += 1
        if eg_ones > max_ones or state[S_ERROR]:
            _fail(state, ERR_PREFIX_TOO_LONG)
            return -1
    bin_idx += 1
    suffix = 0
    for _ in range(eg_ones + k):
        suffix = (suffix << 1) | _read_bin(state, ctx, data, trace, ctx_start, rule, sign, bin_idx)
        bin_idx += 1
    value = (1 << (eg_ones + k)) - (1 << k) + suffix
    if value > remaining_max:
        _fail(state, ERR_VALUE_TOO_LARGE)
    return -1 if state[S_ERROR] else c_max + value


@_njit
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


def uegk_params(name: str) -> tuple[int, int, int, int]:
    """(ctx_start, INC_* rule, cMax, k) of a UEGk element of contexts.ELEMENTS, for njit parsers."""
    from aipu.codec.reference.elements import element_spec
    spec = element_spec(name)
    if spec.binarization != "UEGk":
        raise ValueError(f"element {name} is {spec.binarization}, not UEGk")
    return spec.ctx_start, _INC_CODES[spec.inc_rule], spec.c_max, spec.k


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

    def finish(self) -> int:
        return self._checked(finish(self.state, self.data, self._trace))



# --- the encoder (engine.AecEncoder, docs/codec-engine.md §3) ------------------------------------------
# Encoder state: the normalised range 256..511, doubling count, low end and its width, bytes written.
E_RANGE, E_SHIFTS, E_LOW, E_LOW_BITS, E_OUT_LEN, E_BINS, E_ERROR = 0, 1, 2, 3, 4, 5, 6
ENCODER_STATE_SIZE = 7
ERR_OUTPUT_FULL = 6
ERROR_MESSAGES[ERR_OUTPUT_FULL] = "output buffer full"


def new_encoder_state() -> np.ndarray:
    state = np.zeros(ENCODER_STATE_SIZE, dtype=np.int64)
    state[E_RANGE] = 256 + 0xFF
    state[E_LOW_BITS] = RANGE_BITS
    return state


def output_capacity(bins: int) -> int:
    """Bytes that ``bins`` bins plus the terminator can need at most (an LPS costs at most 9 bits)."""
    return (9 * (bins + 1) + RANGE_BITS + 7) // 8 + 2


@_njit
def _append_with_carry(state, out, top):
    """Append byte ``top & 0xFF``, adding ``top >> 8`` into the bytes already written."""
    n = state[E_OUT_LEN]
    if n >= out.shape[0]:
        if state[E_ERROR] == ERR_NONE:
            state[E_ERROR] = ERR_OUTPUT_FULL
        return
    out[n] = top & 0xFF
    state[E_OUT_LEN] = n + 1
    carry = top >> 8
    index = n - 1
    while carry and index >= 0:
        total = out[index] + carry
        out[index] = total & 0xFF
        carry = total >> 8
        index -= 1


@_njit
def encode_bin(state, out, bin_val, mps, lg_pmps_full):
    """One bin (engine.AecEncoder._encode). An empty ``out`` only counts bits (a fork)."""
    lg_pmps = lg_pmps_full >> 2
    rng = state[E_RANGE]
    surplus = rng - 256
    if surplus >= lg_pmps:
        mps_range = rng - lg_pmps
        lps_range = lg_pmps
        shift = 0
    else:
        mps_range = 512 + surplus - lg_pmps
        lps_range = surplus + lg_pmps
        shift = 1
    low = state[E_LOW]
    if bin_val == mps:
        state[E_RANGE] = mps_range
        low <<= shift
    else:
        renorm = RANGE_BITS - _bit_length(lps_range)
        state[E_RANGE] = lps_range << renorm
        low = ((low << shift) + mps_range) << renorm
        shift += renorm
    state[E_SHIFTS] += shift
    state[E_BINS] += 1
    low_bits = state[E_LOW_BITS] + shift
    if out.shape[0] == 0:
        low = 0
        low_bits = RANGE_BITS
    while low_bits >= LOW_FLUSH_BITS:
        keep = low_bits - 8
        _append_with_carry(state, out, low >> keep)
        low &= (1 << keep) - 1
        low_bits = keep
    state[E_LOW] = low
    state[E_LOW_BITS] = low_bits


@_njit
def encode_decision(state, ctx, out, ctx_idx, bin_val):
    encode_bin(state, out, bin_val, ctx[ctx_idx, CTX_MPS], ctx[ctx_idx, CTX_LG_PMPS])
    update_ctx(ctx, ctx_idx, bin_val)


@_njit
def encode_bypass(state, out, bin_val):
    encode_bin(state, out, bin_val, 0, BYPASS_LG_PMPS)


@_njit
def encode_stuffing_bit(state, out, bin_val):
    encode_bin(state, out, bin_val, 0, STUFFING_LG_PMPS)


@_njit
def encoder_finish(state, out):
    """The terminator (stuffing bin 1, the low end, 0-padding); returns the stream length in bytes."""
    encode_stuffing_bit(state, out, 1)
    low_bits = state[E_LOW_BITS]
    padding = (8 - (low_bits & 7)) & 7
    low = state[E_LOW] << padding
    keep = low_bits + padding - 8
    while keep >= 0:
        _append_with_carry(state, out, low >> keep)
        low &= (1 << keep) - 1
        keep -= 8
    return state[E_OUT_LEN]


@_njit
def encoder_cost_bits(state):
    """engine.AecEncoder.cost_bits."""
    return state[E_SHIFTS] + RANGE_BITS - np.log2(state[E_RANGE])


@_njit
def _write_bin(state, ctx, out, ctx_start, rule, sign, bin_idx, bin_val):
    if ctx_start < 0:
        encode_bypass(state, out, bin_val)
    else:
        encode_decision(state, ctx, out, ctx_start + ctx_inc(rule, bin_idx, sign), bin_val)


@_njit
def encode_fl(state, ctx, out, ctx_start, rule, value, length):
    for bin_idx in range(length):
        _write_bin(state, ctx, out, ctx_start, rule, 0, bin_idx, (value >> (length - 1 - bin_idx)) & 1)


@_njit
def encode_u(state, ctx, out, ctx_start, rule, value):
    for bin_idx in range(value):
        _write_bin(state, ctx, out, ctx_start, rule, 0, bin_idx, 1)
    _write_bin(state, ctx, out, ctx_start, rule, 0, value, 0)


@_njit
def encode_uegk(state, ctx, out, ctx_start, rule, sign, c_max, k, value):
    """UEGk with the '<' reading (binarization.encode_uegk); the caller checks 0 <= value <= MAX_EG_VALUE."""
    for bin_idx in range(min(value, c_max)):
        _write_bin(state, ctx, out, ctx_start, rule, sign, bin_idx, 1)
    if value < c_max:
        _write_bin(state, ctx, out, ctx_start, rule, sign, value, 0)
        return
    rest = value - c_max
    bin_idx = c_max
    ones = 0
    while rest >= (1 << (ones + k + 1)) - (1 << k):
        _write_bin(state, ctx, out, ctx_start, rule, sign, bin_idx, 1)
        bin_idx += 1
        ones += 1
    _write_bin(state, ctx, out, ctx_start, rule, sign, bin_idx, 0)
    bin_idx += 1
    suffix = rest - ((1 << (ones + k)) - (1 << k))
    for shift in range(ones + k - 1, -1, -1):
        _write_bin(state, ctx, out, ctx_start, rule, sign, bin_idx, (suffix >> shift) & 1)
        bin_idx += 1


@_njit
def encode_program(state, ctx, out, ops, bins):
    """Encode ``bins[i]`` with ``ops[i]`` (ctxIdx >= 0, -1 bypass, -2 stuffing); for tests and benchmarks."""
    for i in range(ops.shape[0]):
        op = ops[i]
        if op >= 0:
            encode_decision(state, ctx, out, op, bins[i])
        elif op == TRACE_BYPASS:
            encode_bypass(state, out, bins[i])
        else:
            encode_stuffing_bit(state, out, bins[i])


class FastEncoder:
    """``AecEncoder``'s API over the njit encoder (the same bytes); ``fork()`` counts bits only."""

    def __init__(self, *, num_contexts: int = NUM_CONTEXTS) -> None:
        self.state = new_encoder_state()
        self.ctx = new_contexts(num_contexts)
        self.out = np.zeros(4096, dtype=np.uint8)
        self._finished = False

    def fork(self) -> FastEncoder:
        clone = FastEncoder.__new__(FastEncoder)
        clone.state, clone.ctx = self.state.copy(), self.ctx.copy()
        clone.state[E_LOW], clone.state[E_LOW_BITS] = 0, RANGE_BITS
        clone.out = np.zeros(0, dtype=np.uint8)
        clone._finished = self._finished
        return clone

    @property
    def bins_encoded(self) -> int:
        return int(self.state[E_BINS])

    @property
    def cost_bits(self) -> float:
        return float(encoder_cost_bits(self.state))

    def reserve(self, bins: int) -> None:
        """Refuse after finish; grow the output so that ``bins`` more bins always fit."""
        if self._finished:
            raise ValueError("encoding after finish()")
        needed = int(self.state[E_OUT_LEN]) + output_capacity(bins)
        if self.out.shape[0] and needed > self.out.shape[0]:
            self.out = np.concatenate([self.out, np.zeros(max(needed, self.out.shape[0]), dtype=np.uint8)])

    def encode_decision(self, ctx_idx: int, bin_val: int) -> None:
        if not 0 <= ctx_idx < self.ctx.shape[0]:
            raise IndexError(f"ctx_idx {ctx_idx} outside 0..{self.ctx.shape[0] - 1}")
        if bin_val not in (0, 1):
            raise ValueError(f"bin must be 0 or 1, got {bin_val!r}")
        self.reserve(1)
        encode_decision(self.state, self.ctx, self.out, ctx_idx, bin_val)

    def encode_bypass(self, bin_val: int) -> None:
        self.encode_bypass_bits(bin_val, 1)

    def encode_bypass_bits(self, value: int, count: int) -> None:
        if not 0 <= count <= MAX_FL_LENGTH or not 0 <= value < (1 << count):
            raise ValueError(f"value {value} does not fit in {count} bypass bins")
        self.reserve(count)
        encode_fl(self.state, self.ctx, self.out, -1, INC_CONST, value, count)

    def encode_stuffing_bit(self, bin_val: int) -> None:
        if bin_val not in (0, 1):
            raise ValueError(f"bin must be 0 or 1, got {bin_val!r}")
        self.reserve(1)
        encode_stuffing_bit(self.state, self.out, bin_val)

    def finish(self) -> bytes:
        if self.out.shape[0] == 0:
            raise ValueError("a fork counts bits and has no stream to finish")
        self.reserve(1)
        self._finished = True
        length = encoder_finish(self.state, self.out)
        return self.out[:length].tobytes()


def run() -> dict:
    """``aipu bench codec-engine``: bins/s of the Python and njit encoders and decoders, njit UEGk values/s."""
    import time

    from aipu.codec.reference.element_coder import ElementEncoder
    from aipu.codec.reference.engine import AecDecoder, AecEncoder

    rng = np.random.default_rng(2021)
    count = 400_000
    num_ctx = 64
    p_one = rng.random(num_ctx) ** 3
    is_bypass = rng.random(count) < 0.2
    ctx_ids = rng.integers(0, num_ctx, count)
    ops = np.where(is_bypass, TRACE_BYPASS, ctx_ids).astype(np.int64)
    bins = np.where(is_bypass, rng.integers(0, 2, count), rng.random(count) < p_one[ctx_ids]).astype(np.int64)
    op_list, bin_list = ops.tolist(), bins.tolist()

    def best_of(repeats, func):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            func()
            times.append(time.perf_counter() - start)
        return min(times)

    encoder = AecEncoder()
    start = time.perf_counter()
    for op, bin_val in zip(op_list, bin_list):
        encoder.encode_bypass(bin_val) if op < 0 else encoder.encode_decision(op, bin_val)
    data = encoder.finish()
    encode_s = time.perf_counter() - start

    def python_decode():
        decoder = AecDecoder(data)
        for op in op_list:
            decoder.decode_bypass() if op < 0 else decoder.decode_decision(op)

    buffer = np.frombuffer(data, dtype=np.uint8)
    out = np.zeros(count, dtype=np.int64)

    def njit_decode():
        decode_program(new_state(buffer), new_contexts(), buffer, NO_TRACE, ops, out)

    def njit_encode():
        state, ctx = new_encoder_state(), new_contexts()
        out_bytes = np.zeros(output_capacity(count), dtype=np.uint8)
        encode_program(state, ctx, out_bytes, ops, bins)
        return out_bytes[:encoder_finish(state, out_bytes)].tobytes()

    if njit_encode() != data:
        raise AssertionError("njit encoder disagrees with the Python encoder")
    njit_encode_s = best_of(3, njit_encode)
    njit_decode()                      # compile / load the cache outside the timing
    python_s = best_of(1, python_decode)
    njit_s = best_of(3, njit_decode)
    if not np.array_equal(out, bins):
        raise AssertionError("njit decoder disagrees with the encoded bins")

    # oct_abs_q-like magnitudes (geometric, mostly small) through the njit UEGk de-binariser
    values = rng.geometric(0.3, 200_000).tolist()
    encoder = AecEncoder()
    writer = ElementEncoder(encoder)
    for value in values:
        writer.write("oct_abs_q", value, sign=0)
    uegk_data = np.frombuffer(encoder.finish(), dtype=np.uint8)
    start_idx, rule, c_max, k = uegk_params("oct_abs_q")
    values_array = np.array(values, dtype=np.int64)

    def njit_uegk():
        _uegk_many(new_state(uegk_data), new_contexts(), uegk_data, NO_TRACE, start_idx, rule, c_max, k,
                   values_array)

    njit_uegk()
    uegk_s = best_of(3, njit_uegk)
    return {
        "bins": count,
        "bits_per_bin": round(8 * len(data) / count, 4),
        "python_encode_bins_per_s": round(count / encode_s),
        "python_decode_bins_per_s": round(count / python_s),
        "njit_encode_bins_per_s": round(count / njit_encode_s),
        "njit_decode_bins_per_s": round(count / njit_s),
        "njit_uegk_values_per_s": round(len(values) / uegk_s),
    }


@_njit
def _uegk_many(state, ctx, data, trace, ctx_start, rule, c_max, k, expected):
    """Decode len(expected) UEGk values; raises if one differs (benchmark helper)."""
    for i in range(expected.shape[0]):
        if decode_uegk(state, ctx, data, trace, ctx_start, rule, 0, c_max, k) != expected[i]:
            raise ValueError("njit UEGk decode disagrees with the encoded values")
