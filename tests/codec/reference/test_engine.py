"""The AEC engine (codec/reference/engine.py): hand-traced cases, round trips, termination, errors."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.codec.errors import CodecError
from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.engine import AecDecoder, AecEncoder, ContextModels
from tests.codec.bin_streams import BYPASS, STUFFING, decode_ops, encode_ops, random_ops


def assert_round_trip(ops, bound_s: int = 254) -> bytes:
    data = encode_ops(ops)
    decoder = AecDecoder(data, trace=True, bound_s=bound_s)
    assert decode_ops(decoder, [c for c, _ in ops]) == ops
    assert decoder.trace == ops
    assert decoder.finish() == 8 * len(data)
    assert decoder.bins_decoded == len(ops) + 1
    return data


def test_update_ctx_hand_trace():
    # 10.4.3.3.5 from the initial state mps 0, cycno 0, lgPmps 1023:
    # bin 0 (= mps): cwr = 3 (cycno <= 1); cycno 0 -> 1; lgPmps = 1023 - (1023>>3) - (1023>>5) = 1023-127-31 = 865
    # bin 0: cwr = 3; cycno stays 1; 865 - 108 - 27 = 730
    # bin 1 (!= mps): cwr = 3; cycno 1 -> 2; 730 + 197 = 927 (<= 1023: mps stays 0)
    # bin 1: cwr = 4 (cycno 2); cycno -> 3; 927 + 95 = 1022 (still <= 1023)
    # bin 1: cwr = 5 (cycno 3); cycno stays 3; 1022 + 46 = 1068 > 1023 -> lgPmps = 2047-1068 = 979, mps = 1
    contexts = ContextModels(1)
    expected = [(0, 1, 865), (0, 1, 730), (0, 2, 927), (0, 3, 1022), (1, 3, 979)]
    for bin_val, state in zip([0, 0, 1, 1, 1], expected):
        contexts.update(0, bin_val)
        assert contexts.state(0) == state


def test_hand_trace_empty_stream():
    # Encoder: R = 511 (rS1 0, rT1 0xFF), low 0. Terminator = stuffing bin 1, lgPmps 4 -> lg 1:
    # rT1 255 >= 1 (sFlag 0): MPS part 510, LPS part 1 -> low = 510, R = 1, 8 shifts -> low = 510 << 8,
    # 9 + 8 = 17 bits = 1 1111 1110 0000 0000, padded to 24: FF 00 00.
    # Decoder: valueT = read_bits(9) = 510; valueD = 1 -> valueT >= 0x100: valueS 0, bFlag 0, valueT 254.
    # rT1 255 >= lg 1: rS2 0, rT2 254; rS2 == valueS and valueT 254 >= 254 -> LPS, bin = !mps = 1.
    # valueT = 254 - 254 = 0; tRlps = 1 -> 8 shifts reading bits 9..16; position 17, padding to 24.
    data = AecEncoder().finish()
    assert data == bytes([0xFF, 0x00, 0x00])
    decoder = AecDecoder(data)
    assert decoder.bit_position == 9
    assert decoder.finish() == 24


def test_hand_trace_one_bypass_bin():
    # Encoder, bypass 1 (lg = 1024 >> 2 = 256): rT1 255 < 256 (sFlag 1): split one exponent further,
    # low <<= 1, MPS part 256 + 255 + 256 - 256 = 511, LPS part 255 + 256 = 511.
    # LPS: low = 0 + 511, R = 511 (no renormalisation). Stream bits so far: 10.
    # Terminator: rT1 255 >= 1: low = (511 + 510) << 8 = 1021 << 8, 18 bits = 11111111 01 00000000,
    # padded: FF 40 00.
    # Decoder: valueT = 111111110b = 510 -> valueS 0, valueT 254. lg 256 > rT1 255: rS2 1, rT2 255,
    # sFlag 1. rS2 1 > valueS 0 -> LPS: bin 1; tRlps = 255 + 256 = 511; rS2 != valueS so
    # valueT = 256 + ((254 << 1) | bit 9 = 1) - 255 = 510; no shift; rT1 = 511 & 0xFF = 255.
    # Terminator: valueT 510 -> 254, rT2 254 -> LPS (bin 1), 8 bits read: position 18, padded 24.
    data = encode_ops([(BYPASS, 1)])
    assert data == bytes([0xFF, 0x40, 0x00])
    decoder = AecDecoder(data, trace=True)
    assert decoder.decode_bypass() == 1
    assert decoder.bit_position == 10
    assert decoder.finish() == 24
    assert decoder.trace == [(BYPASS, 1), (STUFFING, 1)]


def test_hand_trace_context_bins():
    # Context 0 coding 0, 0, 1 (lgPmps 1023, 865, 730 per test_update_ctx_hand_trace).
    # Encoder: bin 0, lg 255: rT1 255 >= 255: R = 511 - 255 = 256.
    #          bin 0, lg 216: rT1 0 < 216: one exponent further, MPS part 256+0+256-216 = 296, low 0.
    #          bin 1, lg 182: rT1 40 < 182: MPS part 256+40+256-182 = 370, LPS part 40+182 = 222:
    #                 low = 370, R = 222 -> 1 shift: R 444, low 740; 12 bits.
    #          terminator: rT1 188 >= 1: low = (740 + 443) << 8 = 1183 << 8 (20 bits) -> 0100 1001 1111 0000 0000,
    #                 padded: 49 F0 00.
    # Decoder: valueT = 010010011b = 147 < 0x100 -> one more bit (bit 9 = 1): 295, valueS 1, valueT 39.
    #   bin 0: rT1 255 >= 255: rS2 0 < valueS 1 -> MPS (0); rS1 0, rT1 0.
    #   bin 1: rT1 0 < 216: rS2 1, rT2 40; rS2 == valueS, valueT 39 < 40 -> MPS (0); rS1 1, rT1 40.
    #   bin 2: rT1 40 < 182: rS2 2, rT2 114; rS2 2 > valueS 1 -> LPS (1); tRlps = 40 + 182 = 222;
    #          valueT = 256 + ((39 << 1) | bit 10 = 1) - 114 = 221; one shift: tRlps 444,
    #          valueT = 221 << 1 | bit 11 = 443; rT1 = 188; position 12.
    #   terminator: valueT 443 -> 187; rT2 = 188 - 1 = 187 -> LPS; 8 bits: position 20, padded 24.
    ops = [(0, 0), (0, 0), (0, 1)]
    data = encode_ops(ops)
    assert data == bytes([0x49, 0xF0, 0x00])
    decoder = AecDecoder(data)
    assert [decoder.decode_decision(0) for _ in range(3)] == [0, 0, 1]
    assert decoder.bit_position == 12
    assert decoder.contexts.state(0) == (0, 2, 927)
    assert decoder.finish() == 24


op_strategy = st.one_of(
    st.tuples(st.just(BYPASS), st.integers(0, 1)),
    st.tuples(st.just(STUFFING), st.integers(0, 1)),
    st.tuples(st.integers(0, NUM_CONTEXTS - 1), st.integers(0, 1)),
    st.tuples(st.integers(0, 3), st.integers(0, 1)),          # a few hot contexts that adapt
)


@settings(max_examples=150, deadline=None)
@given(st.lists(op_strategy, max_size=400))
def test_round_trip_hypothesis(ops):
    assert_round_trip(ops)


@pytest.mark.parametrize("seed", range(12))
def test_round_trip_skewed_mixes(seed):
    rng = random.Random(seed)
    assert_round_trip(random_ops(rng, rng.randint(1, 4000), num_ctx=rng.choice([1, 8, NUM_CONTEXTS])))


@pytest.mark.parametrize("bound_s", [1, 2, 3, 8, 254, 1000])
def test_bins_do_not_depend_on_bound_s(bound_s):
    """boundS only moves when bits are fetched (the note of T/AI 115.1-2021 10.4.2.2); 1..3 exercise bFlag."""
    rng = random.Random(bound_s)
    for _ in range(4):
        assert_round_trip(random_ops(rng, 1500), bound_s=bound_s)


def test_long_zero_run_beyond_bound_s():
    # 100 000 stuffing bins of 0 shrink the interval by ~0.0037 bit each: ~370 zero bits, more than
    # boundS = 254, so the decoder sets bFlag and renormalises again when rS1 reaches boundS.
    ops = [(STUFFING, 0)] * 100_000 + [(BYPASS, 1), (0, 1)]
    data = assert_round_trip(ops)
    assert len(data) * 8 > 254 + 100
    assert data[:31] == bytes(31)


def test_long_mps_run_on_adapted_context():
    ops = [(5, 1)] * 30_000 + [(5, 0)] + [(5, 1)] * 1000
    assert_round_trip(ops)


def test_stream_at_bit_offset_and_with_trailing_data():
    ops = random_ops(random.Random(7), 500)
    data = encode_ops(ops)
    # a buffer holding the 3 bits 101, the stream, 5 padding bits and two trailing bytes
    bits = (0b101 << (8 * len(data) + 5)) | (int.from_bytes(data, "big") << 5)
    buffer = bits.to_bytes(len(data) + 1, "big") + b"\xAA\x55"
    decoder = AecDecoder(buffer, bit_offset=3)
    assert decode_ops(decoder, [c for c, _ in ops]) == ops
    end = decoder.finish()
    assert end == 3 + 8 * len(data) + 5          # padding to the byte boundary of the buffer
    assert end % 8 == 0


def test_decoder_reads_exactly_the_stream():
    """After the terminator the decoder has fetched every written bit but no more (docs: termination)."""
    rng = random.Random(3)
    for count in (0, 1, 5, 50, 700):
        ops = random_ops(rng, count)
        data = encode_ops(ops)
        decoder = AecDecoder(data)
        decode_ops(decoder, [c for c, _ in ops])
        decoder.decode_stuffing_bit()
        assert 8 * len(data) - 8 < decoder.bit_position <= 8 * len(data)


def test_fork_measures_cost_without_touching_the_encoder():
    encoder = AecEncoder()
    for ctx_idx, bin_val in random_ops(random.Random(1), 300):
        if ctx_idx >= 0:
            encoder.encode_decision(ctx_idx, bin_val)
    before = encoder.cost_bits
    probe = encoder.fork()
    for _ in range(64):
        probe.encode_bypass(1)
    assert probe.cost_bits - before == pytest.approx(64, abs=0.02)   # a bypass bin costs one bit
    assert encoder.cost_bits == before
    likely, unlikely = encoder.fork(), encoder.fork()
    for _ in range(20):
        likely.encode_decision(0, encoder.contexts.mps[0])
        unlikely.encode_decision(0, 1 - encoder.contexts.mps[0])
    assert likely.cost_bits < unlikely.cost_bits
    with pytest.raises(ValueError):
        probe.finish()


def test_cost_bits_matches_stream_length():
    rng = random.Random(11)
    for _ in range(5):
        encoder = AecEncoder()
        data = encode_ops(random_ops(rng, 3000), encoder)
        # the terminator adds ~8 bits and the padding up to 7
        assert 0 <= 8 * len(data) - encoder.cost_bits <= 8 + 9 + 7


def test_encoder_rejects_bad_bins():
    encoder = AecEncoder()
    with pytest.raises(ValueError):
        encoder.encode_decision(0, 2)
    with pytest.raises(ValueError):
        encoder.encode_bypass_bits(8, 3)
    encoder.finish()
    with pytest.raises(ValueError):
        encoder.encode_bypass(0)


def test_context_index_checked():
    with pytest.raises(IndexError, match="ctx_idx -1"):
        AecEncoder().encode_decision(-1, 0)
    with pytest.raises(IndexError, match=f"ctx_idx {NUM_CONTEXTS}"):
        AecDecoder(AecEncoder().finish()).decode_decision(NUM_CONTEXTS)


def test_bypass_bits_msb_first():
    encoder = AecEncoder()
    encoder.encode_bypass_bits(0b1011001, 7)
    decoder = AecDecoder(encoder.finish(), trace=True)
    assert decoder.decode_bypass_bits(7) == 0b1011001
    assert [b for _, b in decoder.trace] == [1, 0, 1, 1, 0, 0, 1]


def test_empty_and_short_input_raise():
    for data in (b"", b"\x01"):
        with pytest.raises(CodecError, match="past the end"):
            AecDecoder(data)


def test_truncated_stream_raises():
    rng = random.Random(5)
    for _ in range(20):
        ops = random_ops(rng, rng.randint(0, 400))
        data = encode_ops(ops)
        for cut in (1, len(data) // 2 + 1):
            decoder_data = data[:-cut]
            with pytest.raises(CodecError):
                decoder = AecDecoder(decoder_data)
                decode_ops(decoder, [c for c, _ in ops])
                decoder.finish()


def test_decoding_garbage_never_hangs():
    rng = random.Random(9)
    for _ in range(30):
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(2, 40)))
        decoder = AecDecoder(data)
        with pytest.raises(CodecError):
            for _ in range(100_000):
                decoder.decode_decision(rng.randrange(10)) if rng.random() < 0.7 else decoder.decode_bypass()


def test_all_zero_stream_runs_out():
    decoder = AecDecoder(bytes(64))
    with pytest.raises(CodecError, match="past the end"):
        while True:
            decoder.decode_bypass()


def test_wrong_terminator_raises():
    data = encode_ops([(BYPASS, 1), (BYPASS, 0)])
    decoder = AecDecoder(data)
    decoder.decode_bypass()              # one bin short: the stuffing bin lands inside the data
    with pytest.raises(CodecError):
        decoder.finish()
