"""Bad input never crashes, hangs or allocates without bound: it raises CodecError saying where."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import codec
from codec.api import decode_stream
from codec.encoder import EncoderOptions, encode_stream
from codec.engine import AecEncoder
from codec.errors import CodecError
from codec.syntax import (DecoderLimits, ElementWriter, StreamHeader, Sublayer, code_layer_header,
                          code_nnc_header)

UNLIMITED = DecoderLimits(max_weights_per_sublayer=1 << 80, max_zdepth=1 << 40)

FUZZ = settings(max_examples=200, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


def _valid_stream() -> bytes:
    rng = np.random.default_rng(0)
    levels = np.round(rng.laplace(0, 4, (9, 12, 10))).astype(np.int64)
    subs = [Sublayer(dim=4, shape=(3, 3, 12, 10), levels=levels, include_bias_array1d=1),
            Sublayer(dim=1, shape=(1, 1, 1, 10), cmaxw=1, levels=rng.integers(-9, 9, 10))]
    options = EncoderOptions(trees=("octree", "uni_tagtree"), split="auto", codebook="auto")
    return encode_stream(StreamHeader(integer_input=1, array1d_depth=5), [subs], options).data


VALID_STREAM = _valid_stream()


def _compile_every_tree() -> None:
    """Compile the numba trees before the timed examples (a cold numba cache takes seconds per function)."""
    levels = np.arange(-6, 6).reshape(1, 3, 4)
    for tree in ("octree", "unitree", "tagtree", "uni_tagtree"):
        for codebook in ("off", "on"):
            options = EncoderOptions(trees=(tree,), codebook=codebook, split="never", start_depth="root")
            sub = Sublayer(dim=2, shape=(1, 1, 3, 4), levels=levels)
            decode_stream(encode_stream(StreamHeader(integer_input=1), [[sub]], options).data)


_compile_every_tree()
VALID_CONTAINER = codec.encode({"conv.weight": np.random.default_rng(1).normal(0, 1, (6, 4, 3, 3)),
                                "conv.bias": np.arange(6, dtype=np.float32)},
                               codec.CodecOptions(encoder=EncoderOptions(split="never")))


def _decode_or_codec_error(data: bytes, container: bool) -> None:
    """Both decoders must agree: the same levels, or both a CodecError."""
    if container:
        try:
            codec.decode(data)
        except CodecError as error:
            assert str(error)            # says what and where
        return
    outcomes = []
    for reference in (False, True):
        try:
            _, layers, _, _ = decode_stream(data, reference=reference)
            outcomes.append([sub.levels for layer in layers for sub in layer])
        except CodecError as error:
            assert str(error)
            outcomes.append(None)
    if outcomes[0] is None or outcomes[1] is None:
        assert outcomes[0] is None and outcomes[1] is None
    else:
        for fast_levels, reference_levels in zip(*outcomes):
            np.testing.assert_array_equal(fast_levels, reference_levels)


def test_the_fuzz_seeds_decode():
    decode_stream(VALID_STREAM)
    assert set(codec.decode(VALID_CONTAINER)) == {"conv.weight", "conv.bias"}


@FUZZ
@given(data=st.binary(max_size=300))
def test_random_bytes(data):
    _decode_or_codec_error(data, container=False)


@FUZZ
@given(cut=st.integers(0, len(VALID_STREAM) - 1))
def test_truncated_stream(cut):
    with pytest.raises(CodecError):
        decode_stream(VALID_STREAM[:cut])


@FUZZ
@given(flips=st.lists(st.integers(0, 8 * len(VALID_STREAM) - 1), min_size=1, max_size=4))
def test_bit_flipped_stream(flips):
    data = bytearray(VALID_STREAM)
    for bit in flips:
        data[bit // 8] ^= 0x80 >> (bit % 8)
    _decode_or_codec_error(bytes(data), container=False)


@FUZZ
@given(position=st.integers(0, len(VALID_CONTAINER) - 1), value=st.integers(0, 255),
       cut=st.integers(0, len(VALID_CONTAINER)))
def test_corrupt_container(position, value, cut):
    data = bytearray(VALID_CONTAINER)
    data[position] = value
    _decode_or_codec_error(bytes(data[:cut]), container=True)


def test_empty_inputs():
    with pytest.raises(CodecError):
        decode_stream(b"")
    with pytest.raises(CodecError, match="magic"):
        codec.decode(b"")


def _stream_with_header(sublayers, header=StreamHeader(integer_input=1)) -> bytes:
    """A stream whose headers claim ``sublayers`` (no payload: the parser must refuse before reading it)."""
    encoder = AecEncoder()
    writer = ElementWriter(encoder)
    code_nnc_header(writer, header, 1)
    code_layer_header(writer, header, sublayers, UNLIMITED)
    return encoder.finish()


@pytest.mark.parametrize("shape", [(65535, 65535, 65535, 65535), (1, 1, 65535, 65535), (4097, 1, 8, 8)])
def test_absurd_shapes_are_refused_before_allocating(shape):
    data = _stream_with_header([Sublayer(dim=4, shape=shape)])
    with pytest.raises(CodecError, match="exceeds the decoder limits") as info:
        decode_stream(data)
    assert info.value.context.get("layer") == 0 and info.value.element == "sublayer_shape"


def _zero_extent_stream(shape, header) -> bytes:
    """A layer header claiming ``shape``, element by element (the encoder refuses a zero extent itself)."""
    encoder = AecEncoder()
    writer = ElementWriter(encoder)
    code_nnc_header(writer, header, 1)
    for name, value in [("total_sublayer", 1), ("sublayer_cmaxw", 0), ("sublayer_dim", 0), *(
            ("sublayer_shape", extent) for extent in shape), ("sublayer_scan_order", 0), ("sublayer_bitdepth", 8)]:
        writer.code(name, value)
    return encoder.finish() + bytes(16)


@pytest.mark.parametrize("max_ctu3d_size", [0, 1])
@pytest.mark.parametrize("shape", [(0, 3, 8, 8), (3, 0, 8, 8), (3, 3, 0, 8), (3, 3, 8, 0), (0, 3, 65535, 65535)])
def test_a_zero_extent_is_refused(shape, max_ctu3d_size):
    """R or S = 0 looped forever in tree_shapes; with enable_max_ctu3d_size, a division by zero."""
    data = _zero_extent_stream(shape, StreamHeader(integer_input=1, enable_max_ctu3d_size=max_ctu3d_size))
    for reference in (False, True):
        with pytest.raises(CodecError, match="has a zero extent") as info:
            decode_stream(data, reference=reference)
        assert info.value.element == "sublayer_shape" and info.value.bit_position is not None


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 3, 3), (2, 3, 4, 0, 5)])
def test_the_encoder_refuses_a_zero_dimension(shape):
    with pytest.raises(ValueError, match=r"tensor 'w': .* empty tensors cannot be coded"):
        codec.encode({"w": np.zeros(shape, dtype=np.float32)})


def test_bad_header_values():
    with pytest.raises(CodecError, match="total_sublayer"):
        encoder = AecEncoder()
        writer = ElementWriter(encoder)
        code_nnc_header(writer, StreamHeader(), 1)
        writer.code("total_sublayer", 0)
        decode_stream(encoder.finish())
    float_header = StreamHeader(integer_input=0)
    with pytest.raises(CodecError, match="zero step"):
        decode_stream(_stream_with_header([Sublayer(dim=2, shape=(1, 1, 2, 2), cmaxw=5, bitdepth=0)], float_header))


def test_trailing_garbage_is_reported():
    with pytest.raises(CodecError):
        decode_stream(VALID_STREAM + b"\x00")


@pytest.mark.slow
@settings(max_examples=3000, deadline=10000, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(min_size=20, max_size=3000), flips=st.lists(st.integers(0, 8 * len(VALID_STREAM) - 1),
                                                                   max_size=12))
def test_long_random_and_flipped_streams(data, flips):
    _decode_or_codec_error(data, container=False)
    flipped = bytearray(VALID_STREAM)
    for bit in flips:
        flipped[bit // 8] ^= 0x80 >> (bit % 8)
    _decode_or_codec_error(bytes(flipped), container=False)
