"""numba kernels of the NNC payload: the same arithmetic, bins and contexts as ``reference.engine``,
``reference.binarization`` and ``reference.nnc``, over arrays.

Contexts are numbered in NNC's signalling order (``reference.nnc.signalled_contexts``): 3 sig_flag, 3
sign_flag, 2N abs_level_greater_x below the split (2j + negative), 31 above it, then the parameter flag's.
Each context is three int32 numbers: S0, the sum (S0plusS1) and the parameter set.

``state`` (int64[STATE_SIZE]) holds the coder's registers and the outcome: numba cannot raise a CodecError,
so a kernel stops at the first error, records its code (``ERR_*``), bit position, element (``ELEMENT_*``),
weight index and a detail number, and returns; ``nnc_coder`` raises it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...compiled.jit_cache import SourceKeyedJit
from ..reference.binarization import LEVEL_LIMIT
from ..reference.engine import FIRST_RANGE, HALF, RANGE_BITS, TERMINATION_WIDTH
from ..reference.nnc import CONTEXTS_ABOVE, PARAMETER_BITS, PARAMETER_PENALTY, lps_bits
from ..reference.tables import NNC_ADAPTATION_CURVE, NNC_LPS_RANGE, NNC_PARAMETER_SETS

# The decorator of every kernel: numba's cache, keyed by the package's sources (codec.compiled.jit_cache), in
# codec/deepcabac/__pycache__. No kernel allocates, so none needs numba's reference counting.
jit = SourceKeyedJit(Path(__file__).resolve().parent.parent, ("compiled/*.py", "reference/*.py"), _nrt=False)

LPS_RANGE = np.array(NNC_LPS_RANGE, np.int32)
CURVE = np.array(NNC_ADAPTATION_CURVE, np.int32)
PARAMETER_SETS = np.array(NNC_PARAMETER_SETS, np.int32)
COST = np.array(lps_bits(), np.float64)          # [level, is_lps]
SETS = len(NNC_PARAMETER_SETS)

# state[] layout: coder registers, then the outcome
S_RANGE, S_VALUE, S_POSITION, S_END, S_PENDING = 0, 1, 2, 3, 4
S_ERROR, S_ERROR_POSITION, S_ELEMENT, S_WEIGHT, S_DETAIL = 5, 6, 7, 8, 9
STATE_SIZE = 10
ERR_NONE, ERR_PAST_END, ERR_LEVEL_FLAG, ERR_LEVEL_VALUE, ERR_TERMINATING, ERR_STOP_BIT = 0, 1, 2, 3, 4, 5
ERR_PADDING, ERR_OUTPUT_FULL, ERR_FIRST_BITS = 6, 7, 8
ELEMENT_NONE, ELEMENT_SIG, ELEMENT_SIGN, ELEMENT_GREATER, ELEMENT_BYPASS, ELEMENT_PARAMETER = -1, 0, 1, 2, 3, 4
ELEMENT_REMAINDER = 5
MODE_ENCODE, MODE_COUNT, MODE_RECORD = 0, 1, 2        # what walk_levels does with each bin


def context_count(unary_length: int) -> int:
    return 6 + 2 * unary_length + CONTEXTS_ABOVE + 1


# --------------------------------------------------------------------------------------------- contexts
@jit(inline="always")
def init_context(contexts, c, parameter_set):
    contexts[c, 0] = PARAMETER_SETS[parameter_set, 3]
    contexts[c, 1] = PARAMETER_SETS[parameter_set, 2]
    contexts[c, 2] = parameter_set


@jit(inline="always")
def update_estimator(s0, total, parameter_set, bin_value):
    """(S0, sum) after ``bin_value``: reference.estimators.NncEstimator.update."""
    toward = 1 if bin_value else -1
    slow = total - 16 * s0
    s0 += toward * (CURVE[16 + ((toward * s0) >> 3)] >> (PARAMETER_SETS[parameter_set, 0] + 4))
    slow += toward * (CURVE[16 + ((toward * slow) >> 7)] >> PARAMETER_SETS[parameter_set, 1])
    return s0, slow + 16 * s0


@jit(inline="always")
def greater_context(unary_length, j, negative):
    return 6 + 2 * j + negative if j < unary_length else 6 + unary_length + j


# --------------------------------------------------------------------------------------------- decoder
@jit(inline="always")
def fail(state, error, position, element, detail):
    if state[S_ERROR] == ERR_NONE:
        state[S_ERROR], state[S_ERROR_POSITION], state[S_ELEMENT], state[S_DETAIL] = error, position, element, detail


@jit(inline="always")
def read_bits(state, data, count, element):
    """``count`` bits MSB first; past the end: an error at the end and 0."""
    position = state[S_POSITION]
    if position + count > state[S_END]:
        fail(state, ERR_PAST_END, state[S_END], element, 0)
        state[S_POSITION] = state[S_END]
        return 0
    value = 0
    for _ in range(count):
        value = (value << 1) | ((data[position >> 3] >> (7 - (position & 7))) & 1)
        position += 1
    state[S_POSITION] = position
    return value


@jit(inline="always")
def renormalised(coder_range):
    """The range doubled until it reaches HALF, and the number of doublings (both directions' renormalisation)."""
    shifts = 0
    while coder_range < HALF:
        coder_range <<= 1
        shifts += 1
    return coder_range, shifts


@jit(inline="always")
def decode_bin(state, data, contexts, c, element):
    s0, total, parameter_set = contexts[c, 0], contexts[c, 1], contexts[c, 2]
    coder_range = state[S_RANGE]
    lps_range = LPS_RANGE[(coder_range >> 5) & 7, abs(total >> 7)]
    mps_range = coder_range - lps_range
    mps = 1 if total >= 0 else 0
    if state[S_VALUE] < mps_range:
        bin_value, coder_range = mps, mps_range
    else:
        bin_value, coder_range = 1 - mps, lps_range
        state[S_VALUE] -= mps_range
    contexts[c, 0], contexts[c, 1] = update_estimator(s0, total, parameter_set, bin_value)
    coder_range, shifts = renormalised(coder_range)
    state[S_RANGE] = coder_range
    if shifts:
        state[S_VALUE] = (state[S_VALUE] << shifts) | read_bits(state, data, shifts, element)
    return bin_value


@jit(inline="always")
def decode_bypass(state, data, count, element):
    value = 0
    for _ in range(count):
        offset = (state[S_VALUE] << 1) | read_bits(state, data, 1, element)
        bin_value = 1 if offset >= state[S_RANGE] else 0
        state[S_VALUE] = offset - bin_value * state[S_RANGE]
        value = (value << 1) | bin_value
    return value


@jit(inline="always")
def decode_level(state, data, contexts, unary_length, previous):
    """One level after ``previous`` (reference.layer_coder.code_level with NNC's options)."""
    neighbour = 0 if previous == 0 else (1 if previous < 0 else 2)
    if not decode_bin(state, data, contexts, neighbour, ELEMENT_SIG):
        return 0
    negative = decode_bin(state, data, contexts, 3 + neighbour, ELEMENT_SIGN)
    k, x, j = 0, 1, 0
    while decode_bin(state, data, contexts, greater_context(unary_length, j, negative), ELEMENT_GREATER):
        if state[S_ERROR] != ERR_NONE:
            return 0
        if x >= LEVEL_LIMIT:
            fail(state, ERR_LEVEL_FLAG, state[S_POSITION], ELEMENT_GREATER, x)
            return 0
        if x > unary_length:
            k += 1
        x += 1 << k
        j += 1
    magnitude = x + 1 + decode_bypass(state, data, k, ELEMENT_BYPASS) - (1 << k)
    if magnitude > LEVEL_LIMIT and state[S_ERROR] == ERR_NONE:
        fail(state, ERR_LEVEL_VALUE, state[S_POSITION], ELEMENT_REMAINDER, magnitude)
    return -magnitude if negative else magnitude


@jit
def decode_payload(data, levels, unary_length, contexts, state):
    """NNC's payload of ``levels.size`` levels into ``levels`` (int32, flat); ``contexts`` int32[count, 3]."""
    state[S_RANGE], state[S_POSITION], state[S_END], state[S_WEIGHT] = FIRST_RANGE, 0, 8 * data.size, -1
    state[S_VALUE] = read_bits(state, data, RANGE_BITS, ELEMENT_NONE)
    if state[S_VALUE] >= FIRST_RANGE:
        fail(state, ERR_FIRST_BITS, 0, ELEMENT_NONE, state[S_VALUE])
    flag = contexts.shape[0] - 1
    for c in range(contexts.shape[0]):
        init_context(contexts, c, 0)
    for c in range(flag):
        parameter_set = 0
        if decode_bin(state, data, contexts, flag, ELEMENT_PARAMETER):
            parameter_set = 1 + decode_bypass(state, data, PARAMETER_BITS, ELEMENT_BYPASS)
        init_context(contexts, c, parameter_set)
    if state[S_ERROR] != ERR_NONE:
        return
    previous = 0
    for index in range(levels.size):
        previous = decode_level(state, data, contexts, unary_length, previous)
        if state[S_ERROR] != ERR_NONE:
            state[S_WEIGHT] = index
            return
        levels[index] = previous
    finish_payload(state, data)


@jit(inline="always")
def finish_payload(state, data):
    """reference.engine.ArithmeticDecoder.finish, then the end of the data."""
    state[S_RANGE] -= TERMINATION_WIDTH
    position = state[S_POSITION]
    if state[S_VALUE] < state[S_RANGE]:
        fail(state, ERR_TERMINATING, position, ELEMENT_NONE, 0)
        return
    stop = position - 1
    if not (data[stop >> 3] >> (7 - (stop & 7))) & 1:
        fail(state, ERR_STOP_BIT, stop, ELEMENT_NONE, 0)
        return
    end = (position + 7) // 8 * 8
    if read_bits(state, data, end - position, ELEMENT_NONE):
        fail(state, ERR_PADDING, stop + 1, ELEMENT_NONE, 0)
        return
    state[S_DETAIL] = end


# --------------------------------------------------------------------------------------------- encoder
# The reference encoder resolves one bit per shift and counts bits that wait on a carry. Here the low end's
# settled bits leave as whole bytes, and a later carry runs back into the bytes already written: the code
# value stays below 2^(shifts + 9) (module docstring of reference.engine), so it always stops inside them.
# state[S_VALUE] is the low end, a window of state[S_PENDING] + 9 bits below the written bytes.
@jit(inline="always")
def add_to_low(state, out, amount):
    low = state[S_VALUE] + amount
    top = 1 << (state[S_PENDING] + RANGE_BITS)
    if low >= top:
        low -= top
        place = state[S_POSITION] - 1
        while place >= 0 and out[place] == 0xFF:
            out[place] = 0
            place -= 1
        if place >= 0:
            out[place] += 1
    state[S_VALUE] = low


@jit(inline="always")
def shift_low(state, out, count):
    """``count`` renormalising shifts (at most 8), writing a byte once 8 bits are settled."""
    state[S_VALUE] <<= count
    state[S_PENDING] += count
    if state[S_PENDING] >= 8:
        state[S_PENDING] -= 8
        kept = state[S_PENDING] + RANGE_BITS
        write_byte(state, out, state[S_VALUE] >> kept)
        state[S_VALUE] &= (1 << kept) - 1


@jit(inline="always")
def write_byte(state, out, byte):
    if state[S_POSITION] >= out.size:
        fail(state, ERR_OUTPUT_FULL, 8 * state[S_POSITION], ELEMENT_NONE, 0)
        return
    out[state[S_POSITION]] = byte
    state[S_POSITION] += 1


@jit(inline="always")
def encode_bin(state, out, contexts, c, bin_value):
    s0, total, parameter_set = contexts[c, 0], contexts[c, 1], contexts[c, 2]
    coder_range = state[S_RANGE]
    lps_range = LPS_RANGE[(coder_range >> 5) & 7, abs(total >> 7)]
    coder_range -= lps_range
    if bin_value != (1 if total >= 0 else 0):
        add_to_low(state, out, coder_range)
        coder_range = lps_range
    contexts[c, 0], contexts[c, 1] = update_estimator(s0, total, parameter_set, bin_value)
    coder_range, shifts = renormalised(coder_range)
    state[S_RANGE] = coder_range
    if shifts:
        shift_low(state, out, shifts)


@jit(inline="always")
def encode_bypass(state, out, value, count):
    for place in range(count - 1, -1, -1):
        shift_low(state, out, 1)
        if (value >> place) & 1:
            add_to_low(state, out, state[S_RANGE])


@jit(inline="always")
def finish_encoding(state, out):
    """The terminating bin 1, then the low end's bits above its lowest 8, the stop bit and zero padding."""
    state[S_RANGE] -= TERMINATION_WIDTH
    add_to_low(state, out, state[S_RANGE])
    shift_low(state, out, 7)
    bits = state[S_PENDING] + 2
    value = (((state[S_VALUE] >> 8) << 1) | 1) << (-bits % 8)
    bits += -bits % 8
    for place in range(bits - 8, -1, -8):
        write_byte(state, out, (value >> place) & 0xFF)


@jit(inline="always")
def emit_bin(mode, state, out, contexts, c, bin_value, positions, bins):
    """A bin of the walk: coded (MODE_ENCODE), counted per context (MODE_COUNT) or stored in its context's
    run of ``bins`` (MODE_RECORD, ``positions[c]`` the next place of context c)."""
    if mode == MODE_ENCODE:
        encode_bin(state, out, contexts, c, bin_value)
        return
    if mode == MODE_RECORD:
        bins[positions[c]] = bin_value
    positions[c] += 1


@jit(inline="always")
def walk_level(mode, state, out, contexts, positions, bins, unary_length, previous, level):
    """The bins of one level after ``previous`` (reference.layer_coder.code_level with NNC's options)."""
    neighbour = 0 if previous == 0 else (1 if previous < 0 else 2)
    emit_bin(mode, state, out, contexts, neighbour, 1 if level != 0 else 0, positions, bins)
    if level == 0:
        return
    negative = 1 if level < 0 else 0
    emit_bin(mode, state, out, contexts, 3 + neighbour, negative, positions, bins)
    magnitude = -level if negative else level
    k, x, j = 0, 1, 0
    while True:
        greater = 1 if magnitude > x else 0
        emit_bin(mode, state, out, contexts, greater_context(unary_length, j, negative), greater, positions, bins)
        if not greater:
            break
        if x > unary_length:
            k += 1
        x += 1 << k
        j += 1
    if mode == MODE_ENCODE:
        encode_bypass(state, out, magnitude - (x + 1 - (1 << k)), k)


@jit
def walk_levels(mode, levels, unary_length, state, out, contexts, positions, bins):
    """Every level of the flat int64 ``levels`` in order; stops at an error (a full output)."""
    previous = 0
    for index in range(levels.size):
        walk_level(mode, state, out, contexts, positions, bins, unary_length, previous, levels[index])
        previous = levels[index]
        if state[S_ERROR] != ERR_NONE:
            return


@jit
def encode_payload(levels, unary_length, chosen, contexts, out, state):
    """NNC's payload of the flat int64 ``levels`` into the zeroed ``out``, with parameter set ``chosen[c]`` per
    context; ``state[S_POSITION]`` is then its length in bytes, or state[S_ERROR] says the output was full."""
    state[S_RANGE], state[S_VALUE], state[S_POSITION], state[S_PENDING] = FIRST_RANGE, 0, 0, 0
    flag = contexts.shape[0] - 1
    init_context(contexts, flag, 0)
    for c in range(flag):
        encode_bin(state, out, contexts, flag, 1 if chosen[c] else 0)
        if chosen[c]:
            encode_bypass(state, out, chosen[c] - 1, PARAMETER_BITS)
        init_context(contexts, c, chosen[c])
    walk_levels(MODE_ENCODE, levels, unary_length, state, out, contexts, chosen[:0], out[:0])
    if state[S_ERROR] == ERR_NONE:
        finish_encoding(state, out)


# --------------------------------------------------------------------------------------------- parameter choice
@jit
def choose_parameter_sets(bins, starts, chosen, states, costs):
    """reference.nnc.choose_parameter_sets over each context's bins, ``bins[starts[c]:starts[c + 1]]`` in coding
    order: ``chosen[c]`` for every context. All nine sets follow each bin together (``states`` int64[SETS, 2]
    and ``costs`` float64[SETS] are scratch), nine independent chains a core overlaps."""
    for c in range(starts.size - 1):
        for parameter_set in range(SETS):
            states[parameter_set, 0] = PARAMETER_SETS[parameter_set, 3]
            states[parameter_set, 1] = PARAMETER_SETS[parameter_set, 2]
            costs[parameter_set] = 0.0
        for place in range(starts[c], starts[c + 1]):
            bin_value = bins[place]
            for parameter_set in range(SETS):
                s0, total = states[parameter_set, 0], states[parameter_set, 1]
                costs[parameter_set] += COST[abs(total >> 7), 1 if bin_value != (1 if total >= 0 else 0) else 0]
                states[parameter_set, 0], states[parameter_set, 1] = update_estimator(s0, total, parameter_set,
                                                                                      bin_value)
        best, best_cost = 0, costs[0]
        for parameter_set in range(1, SETS):
            if costs[parameter_set] + PARAMETER_PENALTY < best_cost:
                best, best_cost = parameter_set, costs[parameter_set] + PARAMETER_PENALTY
        chosen[c] = best
