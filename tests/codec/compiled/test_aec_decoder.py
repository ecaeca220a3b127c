"""The compiled decoder and de-binarisers (codec/compiled/aec_decoder.py) against the reference engine: the same
bins, traces, bit positions, contexts and errors."""
from __future__ import annotations

import random

import numpy as np
import pytest

from aipu.codec.compiled import aec_decoder, aec_encoder, contexts
from aipu.codec.errors import CodecError
from aipu.codec.reference.element_coder import ElementDecoder, ElementEncoder
from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.engine import AecDecoder, AecEncoder
from tests.codec.bin_streams import BYPASS, UEGK_ELEMENTS, decode_ops, encode_ops, random_ops, random_streams


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


@pytest.mark.parametrize("bound_s", [254, 2])
def test_njit_equals_python_per_bin(bound_s):
    for ops in random_streams():
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
    for ops in random_streams():
        data = encode_ops(ops)
        bins, trace, state, ctx, buffer = run_program(data, [c for c, _ in ops])
        assert bins.tolist() == [b for _, b in ops]
        reference = AecDecoder(data)
        decode_ops(reference, [c for c, _ in ops])
        assert int(state[aec_decoder.S_POS]) == reference.bit_position
        assert ctx[:, contexts.CTX_MPS].tolist() == reference.contexts.mps
        assert ctx[:, contexts.CTX_CYCNO].tolist() == reference.contexts.cycno
        assert ctx[:, contexts.CTX_LG_PMPS].tolist() == reference.contexts.lg_pmps
        assert aec_decoder.finish(state, buffer, trace, True) == 8 * len(data)


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
    assert aec_decoder.finish(state, buffer, trace, True) == 8 * len(data)

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
    out = np.zeros(len(ops), dtype=np.int64)
    done = aec_decoder.decode_program(state, ctx, truncated, aec_decoder.NO_TRACE, ops, out)
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
        assert aec_decoder.finish(state, buffer, trace, True) == reference.finish() == 8 * len(data)
        out = np.zeros(aec_encoder.output_capacity(len(ops)), dtype=np.uint8)
        enc_state = aec_encoder.new_encoder_state()
        ops_array = np.array([c for c, _ in ops], dtype=np.int64)
        bins_array = np.array([b for _, b in ops], dtype=np.int64)
        aec_encoder.encode_program(enc_state, contexts.new_contexts(), out, ops_array, bins_array)
        assert out[: aec_encoder.encoder_finish(enc_state, out)].tobytes() == data
