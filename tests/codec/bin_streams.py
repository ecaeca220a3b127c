"""Bin sequences for the engine tests: random streams of (ctxIdx, bin), and feeding them through an engine.

A sequence is a list of (ctxIdx, bin) with ctxIdx -1 for a bypass bin and -2 for a stuffing bin, the trace
convention of both engines, so one sequence drives the reference engine and the compiled one alike.
"""
from __future__ import annotations

import functools
import random

from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.engine import TRACE_BYPASS, TRACE_STUFFING, AecEncoder

BYPASS, STUFFING = TRACE_BYPASS, TRACE_STUFFING


def feed_ops(encoder, ops: list[tuple[int, int]]) -> None:
    """ops: (ctxIdx, bin) with ctxIdx -1 = bypass, -2 = stuffing (the trace convention)."""
    for ctx_idx, bin_val in ops:
        if ctx_idx == BYPASS:
            encoder.encode_bypass(bin_val)
        elif ctx_idx == STUFFING:
            encoder.encode_stuffing_bit(bin_val)
        else:
            encoder.encode_decision(ctx_idx, bin_val)


def encode_ops(ops: list[tuple[int, int]], encoder: AecEncoder | None = None) -> bytes:
    encoder = encoder or AecEncoder()
    feed_ops(encoder, ops)
    return encoder.finish()


def decode_ops(decoder, ctx_sequence: list[int]) -> list[tuple[int, int]]:
    out = []
    for ctx_idx in ctx_sequence:
        if ctx_idx == BYPASS:
            out.append((ctx_idx, decoder.decode_bypass()))
        elif ctx_idx == STUFFING:
            out.append((ctx_idx, decoder.decode_stuffing_bit()))
        else:
            out.append((ctx_idx, decoder.decode_decision(ctx_idx)))
    return out


def random_ops(rng: random.Random, count: int, num_ctx: int = 16, bypass_share: float = 0.2,
               stuffing_share: float = 0.02) -> list[tuple[int, int]]:
    """Bins over contexts with skewed probabilities (p of a 1 from ~0 to ~1), mixed with bypass."""
    p_one = [rng.choice([rng.random() ** 4, 1 - rng.random() ** 4, rng.random()]) for _ in range(num_ctx)]
    ops = []
    for _ in range(count):
        draw = rng.random()
        if draw < bypass_share:
            ops.append((BYPASS, rng.getrandbits(1)))
        elif draw < bypass_share + stuffing_share:
            ops.append((STUFFING, int(rng.random() < 0.01)))
        else:
            ctx_idx = rng.randrange(num_ctx)
            ops.append((ctx_idx, int(rng.random() < p_one[ctx_idx])))
    return ops


@functools.cache
def random_streams() -> tuple[list[tuple[int, int]], ...]:
    """Random streams: many contexts, skewed probabilities, long runs, bypass mixes."""
    rng = random.Random(115)
    cases = [random_ops(rng, rng.randint(0, 3000), num_ctx=rng.choice([1, 4, 64, NUM_CONTEXTS]),
                        bypass_share=rng.choice([0.0, 0.2, 0.9])) for _ in range(25)]
    cases.append([(7, 1)] * 20_000 + [(7, 0)] + [(BYPASS, 1)] * 50)          # long MPS run
    cases.append([(STUFFING, 0)] * 80_000 + [(3, 1)])                       # zero run beyond boundS
    return tuple(cases)


# UEGk elements of every (cMax, k) pair and sign rule, for the element-level tests of both engines
UEGK_ELEMENTS = ["abs_predicted_diff", "abs_delta", "oct_index", "oct_abs_q", "uni_qmap_val", "tgtm_delta_index",
                 "tgtm_abs_q", "tgtm_delta_abs_q", "esc_abs_q", "qval_minus_one", "uni_index"]
