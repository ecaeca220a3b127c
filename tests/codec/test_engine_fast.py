"""The numba path (codec/compiled/) against the plain-Python engine: same bins, traces, bit positions."""
from __future__ import annotations

import random

import numpy as np
import pytest

from aipu.codec.reference import binarization as bz
from aipu.codec.compiled import aec_decoder, aec_encoder, contexts
from aipu.codec.reference.element_coder import ElementDecoder, ElementEncoder
from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.engine import AecDecoder, AecEncoder
from aipu.codec.errors import CodecError
from tests.codec.test_engine import BYPASS, STUFFING, decode_ops, encode_ops, feed_ops, random_ops


def run_program(data: bytes, ctx_sequence: list[int], bound_s: int = 254):
    """The whole sequence in one njit call; returns (bins, trace, state)."""
    buffer = np.frombuffer(data, dtype=np.uint8)
    state = aec_decoder.new_state(buffer, 0, bound_s)
    ctx = contexts.new_contexts()
    trace = np.zeros((len(ctx_sequence) + 1, 2), dtype=np.int32)
    ops = np.array(ctx_sequence, dtype=np.int64)
    out = np.zeros(len(ops), dtype=np.int64)
    done = aec_decoder.decode_program(state, ctx, buffer, trace, ops, out)
    assert done == len(ops)
    return out, trace, state, ctx, buffer


def streams():
    """Random streams: many contexts, skewed probabilities, long runs, bypass mixes."""
    rng = random.Random(115)
    cases = [random_ops(rng, rng.randint(0, 3000), num_ctx=rng.choice([1, 4, 64, NUM_CONTEXTS]),
                        bypass_share=rng.choice([0.0, 0.2, 0.9])) for _ in range(25)]
    cases.append([(7, 1)] * 20_000 + [(7, 0)] + [(BYPASS, 1)] * 50)          # long MPS run
    cases.append([(STUFFING, 0)] * 80_000 + [(3, 1)])                       # zero run beyond boundS
    return cases


@pytest.mark.parametrize("bound_s", [254, 2])
def test_njit_equals_python_per_bin(bound_s):
    for ops in streams():
        data = encode_ops(ops)
        reference = AecDecoder(data, trace=True, bound_s=bound_s)
        quick = aec_decoder.FastDecoder(data, trace=True, bound_s=bound_s, trace_capacity=len(ops) + 1)
        positions_ref, positions_fast = [], []
        for ctx_idx, bin_val in ops:
            got = decode_ops(reference, [ctx_idx]) + decode_ops(quick, [ctx_idx])
            assert got == [(ctx_idx, bin_val)] * 2
            positions_ref.append(reference.bit_position)
            positions_fast.append(quick.bit_position)
        assert positions_ref == positions_fast
        assert reference.finish() == quick.finish() == 8 * len(data)
        assert reference.trace == quick.trace
        assert reference.bins_decoded == quick.bins_decoded


def test_njit_program_equals_python():
    for ops in streams():
        data = encode_ops(ops)
        bins, trace, state, ctx, buffer = run_program(data, [c for c, _ in ops])
        assert bins.tolist() == [b for _, b in ops]
        reference = AecDecoder(data)
        decode_ops(reference, [c for c, _ in ops])
        assert int(state[aec_decoder.S_POS]) == reference.bit_position
        assert ctx[:, contexts.CTX_MPS].tolist() == reference.contexts.mps
        assert ctx[:, contexts.CTX_CYCNO].tolist() == reference.contexts.cycno
        assert ctx[:, contexts.CTX_LG_PMPS].tolist() == reference.contexts.lg_pmps
        assert aec_decoder.finish(state, buffer, trace) == 8 * len(data)


UEGK_ELEMENTS = ["abs_predicted_diff", "abs_delta", "oct_index", "oct_abs_q", "uni_qmap_val", "tgtm_delta_index",
                 "tgtm_abs_q", "tgtm_delta_abs_q", "esc_abs_q", "qval_minus_one", "uni_index"]


def test_njit_debinarisation_equals_element_coder():
    rng = random.Random(338)
    script = []
    for _ in range(1500):
        kind = rng.random()
        if kind < 0.6:
            name = rng.choice(UEGK_ELEMENTS)
            inputs = {"sign": rng.getrandbits(1)} if name in ("abs_delta", "oct_abs_q", "esc_abs_q") else {}
            value = rng.choice([0, 1, 5, 16, 17, rng.randint(0, 1000), rng.getrandbits(32)])
        elif kind < 0.8:
            name, inputs = "sublayer_cmaxw", {}
            value = rng.getrandbits(32)
        elif kind < 0.9:
            name, inputs = "bias_abs_q", {"length": rng.randint(0, 31)}
            value = rng.getrandbits(inputs["length"]) if inputs["length"] else 0
        else:
            name, inputs = "oct_start_depth_delta", {"max_value": 9}
            value = rng.randint(0, 9)
        script.append((name, value, inputs))
    encoder = AecEncoder()
    writer = ElementEncoder(encoder)
    for name, value, inputs in script:
        writer.write(name, value, **inputs)
    data = encoder.finish()

    buffer = np.frombuffer(data, dtype=np.uint8)
    state, ctx = aec_decoder.new_state(buffer), contexts.new_contexts()
    trace = np.zeros((200_000, 2), dtype=np.int32)
    for name, value, inputs in script:
        if name == "sublayer_cmaxw":
            got = aec_decoder.decode_fl(state, ctx, buffer, trace, -1, contexts.INC_CONST, 32)
        elif name == "bias_abs_q":
            got = aec_decoder.decode_fl(state, ctx, buffer, trace, -1, contexts.INC_CONST, inputs["length"])
        elif name == "oct_start_depth_delta":
            got = aec_decoder.decode_u(state, ctx, buffer, trace, 135, contexts.INC_BIN_NONZERO, 9)
        else:
            start, rule, c_max, k = contexts.uegk_params(name)
            got = aec_decoder.decode_uegk(state, ctx, buffer, trace, start, rule, inputs.get("sign", 0), c_max, k)
        assert got == value, name
    assert aec_decoder.finish(state, buffer, trace) == 8 * len(data)

    reference = AecDecoder(data, trace=True)
    reader = ElementDecoder(reference)
    for name, value, inputs in script:
        reader.read(name, **inputs)
    reference.finish()
    assert [tuple(row) for row in trace[: state[aec_decoder.S_TRACE_LEN]].tolist()] == reference.trace


def test_njit_errors_are_flagged_not_looped():
    data = encode_ops(random_ops(random.Random(4), 300))
    truncated = np.frombuffer(data[: len(data) // 2], dtype=np.uint8)
    state, ctx = aec_decoder.new_state(truncated), contexts.new_contexts()
    ops = np.array([c for c, _ in random_ops(random.Random(4), 300)], dtype=np.int64)
    done = aec_decoder.decode_program(state, ctx, truncated, aec_decoder.NO_TRACE, ops, np.zeros(len(ops), dtype=np.int64))
    assert done < len(ops) and state[aec_decoder.S_ERROR] == aec_decoder.ERR_PAST_END
    assert state[aec_decoder.S_POS] <= 8 * len(truncated)
    with pytest.raises(CodecError, match="past the end"):
        aec_decoder.raise_on_error(state, "oct_abs_q")

    # a stream of ones: a UEGk prefix longer than any 32-bit value
    ones = np.full(64, 0xFF, dtype=np.uint8)
    state, ctx = aec_decoder.new_state(ones), contexts.new_contexts()
    start, rule, c_max, k = contexts.uegk_params("tgtm_delta_abs_q")
    value = 0
    while value >= 0:
        value = aec_decoder.decode_uegk(state, ctx, ones, aec_decoder.NO_TRACE, -1, rule, 0, c_max, k)
    assert state[aec_decoder.S_ERROR] in (aec_decoder.ERR_PREFIX_TOO_LONG, aec_decoder.ERR_PAST_END)

    with pytest.raises(CodecError):
        aec_decoder.FastDecoder(b"\x00")
    quick = aec_decoder.FastDecoder(encode_ops([(BYPASS, 1), (BYPASS, 0)]))
    quick.decode_bypass()
    with pytest.raises(CodecError, match="terminat"):
        quick.finish()


def test_uegk_params_come_from_the_table():
    assert contexts.uegk_params("oct_abs_q") == (198, contexts.INC_CLAMP46, 16, 0)
    assert contexts.uegk_params("qval_minus_one") == (642, contexts.INC_CLAMP23, 8, 8)
    with pytest.raises(ValueError):
        contexts.uegk_params("split_flag")
    assert bz.MAX_EG_VALUE == (1 << 32) - 1


# --- the njit encoder ---------------------------------------------------------------------------------
def test_njit_encoder_writes_the_python_encoders_bytes():
    for ops in streams():
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


@pytest.mark.slow
def test_long_random_streams_both_paths():
    """Many long random streams: Python encoder -> njit and Python decoders, njit encoder -> same bytes."""
    rng = random.Random(2024)
    for _ in range(60):
        ops = random_ops(rng, rng.randint(10_000, 60_000), num_ctx=rng.choice([2, 32, NUM_CONTEXTS]),
                         bypass_share=rng.random() * 0.5, stuffing_share=rng.random() * 0.05)
        data = encode_ops(ops)
        bound_s = rng.choice([1, 7, 254])
        bins, trace, state, ctx, buffer = run_program(data, [c for c, _ in ops], bound_s=bound_s)
        assert bins.tolist() == [b for _, b in ops]
        reference = AecDecoder(data, trace=True, bound_s=bound_s)
        decode_ops(reference, [c for c, _ in ops])
        assert reference.bit_position == int(state[aec_decoder.S_POS])
        assert reference.trace == [tuple(row) for row in trace[: len(ops)].tolist()]
        assert aec_decoder.finish(state, buffer, trace) == reference.finish() == 8 * len(data)
        out = np.zeros(aec_encoder.output_capacity(len(ops)), dtype=np.uint8)
        enc_state = aec_encoder.new_encoder_state()
        aec_encoder.encode_program(enc_state, contexts.new_contexts(), out, np.array([c for c, _ in ops], dtype=np.int64),
                            np.array([b for _, b in ops], dtype=np.int64))
        assert out[: aec_encoder.encoder_finish(enc_state, out)].tobytes() == data
