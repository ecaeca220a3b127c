"""The compiled AEC encoder and its FL / U / UEGk binarisers, as numba ``@njit`` functions over arrays.

The same algorithms as ``codec.reference.engine.AecEncoder`` and ``codec.reference.binarization``
(docs/codec-engine.md §3 derives the encoder), writing byte for byte the reference's streams. The encoder
has its own state (``new_encoder_state``) and writes into a caller-given uint8 ``out`` array
(``output_capacity(bins)`` bytes always suffice; an empty ``out`` only counts bits, like
``AecEncoder.fork``). ``FastEncoder`` wraps the functions in the ``AecEncoder`` API; the compiled
``FastElementWriter`` (``codec.compiled.element_io``) codes through it.
"""
from __future__ import annotations

import numpy as np

from ..reference.binarization import MAX_FL_LENGTH
from ..reference.elements import NUM_CONTEXTS
from ..reference.engine import BYPASS_LG_PMPS, LOW_FLUSH_BITS, RANGE_BITS, STUFFING_LG_PMPS, TRACE_BYPASS
from .aec_decoder import ERR_NONE, ERR_OUTPUT_FULL, bit_length
from .contexts import CTX_LG_PMPS, CTX_MPS, INC_CONST, ctx_inc, new_contexts, update_ctx
from .jit_cache import njit

# Encoder state: the normalised range 256..511, doubling count, low end and its width, bytes written.
E_RANGE, E_SHIFTS, E_LOW, E_LOW_BITS, E_OUT_LEN, E_BINS, E_ERROR = 0, 1, 2, 3, 4, 5, 6
ENCODER_STATE_SIZE = 7


def new_encoder_state() -> np.ndarray:
    state = np.zeros(ENCODER_STATE_SIZE, dtype=np.int64)
    state[E_RANGE] = 256 + 0xFF
    state[E_LOW_BITS] = RANGE_BITS
    return state


def output_capacity(bins: int) -> int:
    """Bytes that ``bins`` bins plus the terminator can need at most (an LPS costs at most 9 bits)."""
    return (9 * (bins + 1) + RANGE_BITS + 7) // 8 + 2


@njit
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


@njit
def encode_bin(state, out, bin_val, mps, lg_pmps_full):
    """One bin (reference.engine.AecEncoder._encode). An empty ``out`` only counts bits (a fork)."""
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
        renorm = RANGE_BITS - bit_length(lps_range)
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


@njit
def encode_decision(state, ctx, out, ctx_idx, bin_val):
    encode_bin(state, out, bin_val, ctx[ctx_idx, CTX_MPS], ctx[ctx_idx, CTX_LG_PMPS])
    update_ctx(ctx, ctx_idx, bin_val)


@njit
def encode_bypass(state, out, bin_val):
    encode_bin(state, out, bin_val, 0, BYPASS_LG_PMPS)


@njit
def encode_stuffing_bit(state, out, bin_val):
    encode_bin(state, out, bin_val, 0, STUFFING_LG_PMPS)


@njit
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


@njit
def encoder_cost_bits(state):
    """reference.engine.AecEncoder.cost_bits."""
    return state[E_SHIFTS] + RANGE_BITS - np.log2(state[E_RANGE])


@njit
def _write_bin(state, ctx, out, ctx_start, rule, sign, bin_idx, bin_val):
    if ctx_start < 0:
        encode_bypass(state, out, bin_val)
    else:
        encode_decision(state, ctx, out, ctx_start + ctx_inc(rule, bin_idx, sign), bin_val)


@njit
def encode_fl(state, ctx, out, ctx_start, rule, value, length):
    for bin_idx in range(length):
        _write_bin(state, ctx, out, ctx_start, rule, 0, bin_idx, (value >> (length - 1 - bin_idx)) & 1)


@njit
def encode_u(state, ctx, out, ctx_start, rule, value):
    for bin_idx in range(value):
        _write_bin(state, ctx, out, ctx_start, rule, 0, bin_idx, 1)
    _write_bin(state, ctx, out, ctx_start, rule, 0, value, 0)


@njit
def encode_uegk(state, ctx, out, ctx_start, rule, sign, c_max, k, value):
    """UEGk with the '<' reading (reference.binarization.encode_uegk); the caller checks
    0 <= value <= MAX_EG_VALUE."""
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


@njit
def encode_escapes(state, ctx, out, values, nz_ctx, sign_ctx, abs_start, abs_rule, c_max, k):
    """escape()'s elements for every escaped level in ``values`` (reference.sublayer_coder.SublayerCoder._escape):
    esc_nzflag, and for a non-zero level esc_sign and esc_abs_q; the caller checks the magnitudes."""
    for i in range(values.shape[0]):
        value = values[i]
        encode_decision(state, ctx, out, nz_ctx, 1 if value != 0 else 0)
        if value != 0:
            sign = 1 if value < 0 else 0
            encode_decision(state, ctx, out, sign_ctx, sign)
            encode_uegk(state, ctx, out, abs_start, abs_rule, sign, c_max, k, abs(value))


@njit
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
