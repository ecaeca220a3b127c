"""The compiled encoder and binarisers (codec/compiled/aec_encoder.py): byte for byte the reference's streams."""
from __future__ import annotations

import random

import numpy as np
import pytest

from aipu.codec.compiled import aec_decoder, aec_encoder, contexts
from aipu.codec.reference.element_coder import ElementEncoder
from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.engine import AecEncoder
from tests.codec.bin_streams import BYPASS, UEGK_ELEMENTS, encode_ops, feed_ops, random_ops, random_streams


def test_njit_encoder_writes_the_python_encoders_bytes():
    for ops in random_streams():
        reference = encode_ops(ops)
        state, ctx = aec_encoder.new_encoder_state(), contexts.new_contexts()
        out = np.zeros(aec_encoder.output_capacity(len(ops)), dtype=np.uint8)
        aec_encoder.encode_program(state, ctx, out, np.array([c for c, _ in ops], dtype=np.int64),
                            np.array([b for _, b in ops], dtype=np.int64))
        length = aec_encoder.encoder_finish(state, out)
        assert state[aec_encoder.E_ERROR] == aec_decoder.ERR_NONE
        assert out[:length].tobytes() == reference


def test_fast_encoder_api_cost_and_fork():
    ops = random_ops(random.Random(21), 6000, num_ctx=NUM_CONTEXTS)
    quick, reference = aec_encoder.FastEncoder(), AecEncoder()
    for encoder in (quick, reference):
        feed_ops(encoder, ops)
    assert quick.cost_bits == pytest.approx(reference.cost_bits, abs=1e-9)
    probe_fast, probe_ref = quick.fork(), reference.fork()
    for ctx_idx, bin_val in ops[:500]:
        if ctx_idx >= 0:
            probe_fast.encode_decision(ctx_idx, bin_val)
            probe_ref.encode_decision(ctx_idx, bin_val)
    assert probe_fast.cost_bits == pytest.approx(probe_ref.cost_bits, abs=1e-9)
    assert quick.bins_encoded == reference.bins_encoded == len(ops)
    assert quick.finish() == reference.finish()
    with pytest.raises(ValueError):
        probe_fast.finish()
    with pytest.raises(ValueError):
        quick.encode_bypass(1)
    with pytest.raises(IndexError):
        aec_encoder.FastEncoder().encode_decision(NUM_CONTEXTS, 0)


def test_njit_binarisers_write_the_element_coders_bytes():
    rng = random.Random(339)
    reference = AecEncoder()
    writer = ElementEncoder(reference)
    state, ctx = aec_encoder.new_encoder_state(), contexts.new_contexts()
    out = np.zeros(1 << 16, dtype=np.uint8)
    for _ in range(1200):
        name = rng.choice(UEGK_ELEMENTS)
        sign = rng.getrandbits(1) if name in ("abs_delta", "oct_abs_q", "esc_abs_q") else 0
        value = rng.choice([0, 1, 5, 16, 17, 31, 32, rng.randint(0, 1000), rng.getrandbits(32)])
        writer.write(name, value, **({"sign": sign} if name in ("abs_delta", "oct_abs_q", "esc_abs_q") else {}))
        start, rule, c_max, k = contexts.uegk_params(name)
        aec_encoder.encode_uegk(state, ctx, out, start, rule, sign, c_max, k, value)
        depth = rng.randint(0, 9)
        writer.write("tag_start_depth_delta", depth, max_value=9)
        aec_encoder.encode_u(state, ctx, out, 360, contexts.INC_BIN_NONZERO, depth)
        field = rng.getrandbits(16)
        writer.write("sublayer_shape", field)
        aec_encoder.encode_fl(state, ctx, out, -1, contexts.INC_CONST, field, 16)
    length = aec_encoder.encoder_finish(state, out)
    assert state[aec_encoder.E_ERROR] == aec_decoder.ERR_NONE
    assert out[:length].tobytes() == reference.finish()


def test_njit_encoder_flags_a_full_buffer():
    state, ctx = aec_encoder.new_encoder_state(), contexts.new_contexts()
    out = np.zeros(4, dtype=np.uint8)
    bins = np.ones(200, dtype=np.int64)
    aec_encoder.encode_program(state, ctx, out, np.full(200, BYPASS, dtype=np.int64), bins)
    assert state[aec_encoder.E_ERROR] == aec_decoder.ERR_OUTPUT_FULL
