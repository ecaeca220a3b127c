"""The compiled NNC payload's entry points: the same results and errors as ``reference.nnc``."""
from __future__ import annotations

import math

import numpy as np

from ...errors import CodecError
from ..reference.layer_coder import integer_levels
from ..reference.nnc import DEFAULT_UNARY_LENGTH, nnc_options
from . import kernels as k

ELEMENT_NAMES = {k.ELEMENT_SIG: "sig_flag", k.ELEMENT_SIGN: "sign_flag", k.ELEMENT_GREATER: "abs_level_greater_x",
                 k.ELEMENT_BYPASS: "bypass", k.ELEMENT_PARAMETER: "estimator_parameter_flag",
                 k.ELEMENT_REMAINDER: "remainder"}
LIMIT = nnc_options().law.limit
MESSAGES = {
    k.ERR_PAST_END: lambda detail: "reading past the end of the stream",
    k.ERR_LEVEL_FLAG: lambda detail: f"a level above {LIMIT} (abs_level_greater_x at X = {detail})",
    k.ERR_LEVEL_VALUE: lambda detail: f"a level of magnitude {detail} above {LIMIT}",
    k.ERR_TERMINATING: lambda detail: "the stream does not end here (terminating bin 0)",
    k.ERR_STOP_BIT: lambda detail: "no stop bit after the terminating bin",
    k.ERR_PADDING: lambda detail: "the bits after the stop bit are not zero",
    k.ERR_FIRST_BITS: lambda detail: f"the stream starts with {detail}, at least the first range {k.FIRST_RANGE}",
}
FIRST_OUTPUT_BYTES = 64


def _raise(state: np.ndarray) -> None:
    context = {} if state[k.S_WEIGHT] < 0 else {"weight": int(state[k.S_WEIGHT])}
    raise CodecError(MESSAGES[int(state[k.S_ERROR])](int(state[k.S_DETAIL])),
                     bit_position=int(state[k.S_ERROR_POSITION]), element=ELEMENT_NAMES.get(int(state[k.S_ELEMENT])),
                     **context)


def decode_nnc_layer(data: bytes, shape: tuple[int, ...], unary_length: int = DEFAULT_UNARY_LENGTH) -> np.ndarray:
    """reference.nnc.decode_nnc_layer, compiled."""
    nnc_options(unary_length)
    stream = np.frombuffer(bytes(data), np.uint8)
    levels = np.zeros(math.prod(shape), np.int32)
    state = np.zeros(k.STATE_SIZE, np.int64)
    k.decode_payload(stream, levels, unary_length, np.zeros((k.context_count(unary_length), 3), np.int32), state)
    if state[k.S_ERROR]:
        _raise(state)
    end = int(state[k.S_DETAIL])
    if end != 8 * len(stream):
        left = len(stream) - end // 8
        raise CodecError(f"{left} byte{'s' if left != 1 else ''} left after the end of the stream", bit_position=end)
    return levels.reshape(shape)


def choose_parameter_sets(levels: np.ndarray, unary_length: int) -> np.ndarray:
    """The parameter set of every context (reference.nnc.choose_parameter_sets, as an array in context order):
    each context's bins are gathered first (counted, then stored), then costed under every set."""
    count = k.context_count(unary_length)
    state, contexts, out = np.zeros(k.STATE_SIZE, np.int64), np.zeros((count, 3), np.int32), np.zeros(0, np.uint8)
    counts = np.zeros(count, np.int64)
    k.walk_levels(k.MODE_COUNT, levels, unary_length, state, out, contexts, counts, out)
    starts = np.zeros(count + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    bins, positions = np.zeros(int(starts[-1]), np.uint8), starts[:-1].copy()
    k.walk_levels(k.MODE_RECORD, levels, unary_length, state, out, contexts, positions, bins)
    chosen = np.zeros(count, np.int32)
    k.choose_parameter_sets(bins, starts, chosen, np.zeros((k.SETS, 2), np.int64), np.zeros(k.SETS, np.float64))
    return chosen


def encode_nnc_layer(levels, unary_length: int = DEFAULT_UNARY_LENGTH, choose_parameters: bool = True) -> bytes:
    """reference.nnc.encode_nnc_layer, compiled."""
    nnc_options(unary_length)
    flat = np.ascontiguousarray(integer_levels(levels, LIMIT).ravel())
    count = k.context_count(unary_length)
    chosen = choose_parameter_sets(flat, unary_length) if choose_parameters else np.zeros(count, np.int32)
    contexts = np.zeros((count, 3), np.int32)
    size = FIRST_OUTPUT_BYTES + flat.size // 2
    while True:
        out, state = np.zeros(size, np.uint8), np.zeros(k.STATE_SIZE, np.int64)
        k.encode_payload(flat, unary_length, chosen, contexts, out, state)
        if state[k.S_ERROR] != k.ERR_OUTPUT_FULL:
            return out[: int(state[k.S_POSITION])].tobytes()
        size *= 4
