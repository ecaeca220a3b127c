"""The compiled sublayer decoder (codec/compiled/sublayer_decoder.py) against the pure-Python reference.

Every stream is decoded by both. They must give the same header, levels, mode statistics and bin count
(both also check that the stream ends exactly at its last byte), or both raise CodecError; when both
errors carry a bit position, the positions agree.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aipu import codec
from aipu.codec.api import decode_stream
from aipu.codec.encoder import EncoderOptions, encode_stream
from aipu.codec.errors import CodecError
from aipu.codec.reference.engine import TERMINATION_ZERO_BITS
from aipu.codec.reference.headers import SCAN_KC, DecoderLimits, StreamHeader, Sublayer
from aipu.codec.reference.tree_coder import TREES


# Corrupt headers may claim large sublayers; both decoders get the same, smaller limits to keep the tests quick.
LIMITS = DecoderLimits(max_weights_per_sublayer=1 << 18, max_zdepth=256)


def decode_both(data: bytes, strict: bool = False):
    """Decode with both decoders; returns (header, layers, stats, bins) or the CodecError, after comparing."""
    outcomes = []
    for reference in (False, True):
        try:
            outcomes.append(decode_stream(data, LIMITS, reference=reference, strict=strict))
        except CodecError as error:
            assert str(error)
            outcomes.append(error)
    fast, ref = outcomes
    if isinstance(fast, CodecError) or isinstance(ref, CodecError):
        assert isinstance(fast, CodecError) and isinstance(ref, CodecError), (fast, ref)
        if fast.bit_position is not None and ref.bit_position is not None and fast.reason == ref.reason:
            assert fast.bit_position == ref.bit_position
        return fast
    assert fast[0] == ref[0]
    assert fast[2] == ref[2]                    # mode statistics
    assert fast[3] == ref[3]                    # bins
    for fast_layer, ref_layer in zip(fast[1], ref[1], strict=True):
        for fast_sub, ref_sub in zip(fast_layer, ref_layer, strict=True):
            assert fast_sub.shape == ref_sub.shape and fast_sub.dim == ref_sub.dim
            np.testing.assert_array_equal(fast_sub.levels, ref_sub.levels)
            assert fast_sub.step == ref_sub.step
    return fast


def levels_with_structure(rng, zdepth, channels, kernels):
    """Many distinct levels (codebooks escape), a zero band, a uniform block and empty planes."""
    levels = np.round(rng.laplace(0, 5, (zdepth, channels, kernels))).astype(np.int64)
    levels[:, :3, :] = 0
    levels[:, 3:6, :4] = 7
    if zdepth > 3:
        levels[[1, zdepth - 2]] = 0           # energy order moves them: zdep reordering
    return levels


def stream(levels, options, header=StreamHeader(integer_input=1, array1d_depth=9), bias=None, dim=4, shape=None):
    zdepth, channels, kernels = levels.shape
    shape = shape or (zdepth // 2 if zdepth % 2 == 0 else zdepth, 2 if zdepth % 2 == 0 else 1, channels, kernels)
    subs = [Sublayer(dim=dim, shape=shape, levels=levels)]
    if bias is not None:
        subs[0].include_bias_array1d = 1
        subs.append(Sublayer(dim=1, shape=(1, 1, 1, kernels), cmaxw=1, levels=bias))
    return encode_stream(header, [subs], options)


@pytest.mark.parametrize("tree", TREES)
def test_every_forced_mode_decodes_alike(tree):
    """Codebook on/off, start depth leaf/root, splits, zdep on/off, escape reorder on/off, per tree."""
    rng = np.random.default_rng(TREES.index(tree))
    levels = levels_with_structure(rng, 6, 21, 19)
    seen: dict[str, int] = {}
    for book, start, split, zdep, escape in itertools.product(("off", "on"), ("leaf", "root"), ("never", "always"),
                                                              ("off", "on"), ("off", "on")):
        if book == "off" and escape == "on":
            continue
        options = EncoderOptions(trees=(tree,), codebook=book, start_depth=start, split=split, zdep=zdep,
                                 escape_reorder=escape)
        encoded = stream(levels, options, bias=rng.integers(-200, 200, 19))
        _, layers, stats, bins = decode_both(encoded.data)
        np.testing.assert_array_equal(layers[0][0].levels, levels)
        assert bins == encoded.bins and stats == encoded.stats
        for key, count in stats[0].items():
            seen[key] = seen.get(key, 0) + count
    for key in (tree, "codebook", "direct", "predicted_codebook", "escape_reorder", "escapes", "start_depth",
                "zdep_reorder"):
        assert seen.get(key, 0) > 0, key


def test_automatic_modes_many_ctus_and_scan_orders():
    """SelectMapMode 3 (mixed trees per CTU), 8x8 CTUs, both scan orders, the CTU size adapted to the kernel."""
    rng = np.random.default_rng(5)
    levels = levels_with_structure(rng, 4, 30, 27)
    for max_ctu3d_idx, scan_order, adapt in ((3, 0, 0), (3, SCAN_KC, 0), (1, 0, 1), (0, SCAN_KC, 1)):
        header = StreamHeader(integer_input=1, max_ctu3d_idx=max_ctu3d_idx, enable_max_ctu3d_size=adapt)
        subs = [Sublayer(dim=4, shape=(2, 2, 30, 27), levels=levels, scan_order=scan_order)]
        encoded = encode_stream(header, [subs], EncoderOptions(max_split_trials=2, search="cu"))
        _, layers, stats, _ = decode_both(encoded.data)
        np.testing.assert_array_equal(layers[0][0].levels, levels)
        assert stats == encoded.stats
    assert stats[0].get("select_map_mode_3", 0) + stats[0].get("select_map_mode_2", 0) > 0


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (1, 1, 1, 9), (1, 1, 9, 1), (1, 1, 40, 3), (1, 5, 3, 2),
                                   (7, 7, 3, 5), (3, 3, 64, 65)])
def test_shape_classes_and_edge_sizes(shape):
    rng = np.random.default_rng(sum(shape))
    levels = np.round(rng.laplace(0, 2, (shape[0] * shape[1], shape[2], shape[3]))).astype(np.int64)
    dim = 4 if shape[0] * shape[1] > 1 else 2
    for tree in TREES:
        options = EncoderOptions(trees=(tree,), start_depth="auto", split="auto", search="cu")
        encoded = stream(levels, options, shape=shape, dim=dim)
        _, layers, _, _ = decode_both(encoded.data)
        np.testing.assert_array_equal(layers[0][0].levels, levels)


def test_container_layers_of_every_kind_decode_alike():
    """codec.encode's own placement: conv, conv1d, FC, a vector and a scalar, float and integer."""
    rng = np.random.default_rng(9)
    tensors = {"conv.weight": rng.laplace(0, 0.1, (6, 5, 3, 3)).astype(np.float32),
               "conv.bias": rng.normal(0, 1, 6).astype(np.float32),
               "c1d": rng.integers(-9, 9, (4, 3, 5)).astype(np.int8),
               "fc": rng.laplace(0, 0.1, (12, 33)).astype(np.float32),
               "vector": rng.integers(-100, 100, 17).astype(np.int32), "scalar": np.float32(2.5)}
    data = codec.encode(tensors, codec.CodecOptions(bitdepth=5, encoder=EncoderOptions(max_split_trials=2, search="cu")))
    infos, payload = codec.read_index(data)
    for info in infos:
        decode_both(data[payload + info.offset: payload + info.offset + info.length])


@pytest.mark.parametrize("tree", TREES)
def test_a_lower_level_limit_fails_in_both(tree):
    rng = np.random.default_rng(12)
    levels = levels_with_structure(rng, 2, 9, 9)
    levels[1, 8, 8] = 300
    encoded = stream(levels, EncoderOptions(trees=(tree,), codebook="off", split="never"))
    for reference in (False, True):
        with pytest.raises(CodecError):
            decode_stream(encoded.data, DecoderLimits(max_level=299), reference=reference)
        decode_stream(encoded.data, DecoderLimits(max_level=300), reference=reference)


def test_errors_carry_position_element_and_ctu():
    rng = np.random.default_rng(2)
    encoded = stream(levels_with_structure(rng, 4, 20, 20), EncoderOptions(trees=("tagtree",)))
    with pytest.raises(CodecError) as info:
        decode_stream(encoded.data[: len(encoded.data) // 2])
    assert info.value.bit_position is not None and info.value.element == "tagtree"
    assert info.value.context.get("ctu") == 0 and info.value.context.get("layer") == 0


@functools.cache
def rich_streams() -> tuple[bytes, ...]:
    """One stream per tree, each with codebooks (predicted and signalled), escapes, zdep reordering, splits."""
    rng = np.random.default_rng(4)
    streams = []
    for tree, codebook in zip(TREES, ("on", "off", "on", "on")):
        levels = levels_with_structure(rng, 6, 24, 16)
        book = rng.choice(np.array([-9, -4, 0, 4, 9, 15]), (6, 16, 16))
        outliers = rng.random(book.shape) < 0.05
        book[outliers] = rng.integers(30, 300, outliers.sum())
        levels[:, 8:, :] = book * np.arange(6, 0, -1)[:, None, None] // 3
        header = StreamHeader(integer_input=1, max_ctu3d_idx=3, array1d_depth=9)
        subs = [Sublayer(dim=4, shape=(3, 2, 24, 16), levels=levels, include_bias_array1d=1),
                Sublayer(dim=1, shape=(1, 1, 1, 16), cmaxw=1, levels=rng.integers(-50, 50, 16))]
        options = EncoderOptions(trees=(tree,), codebook=codebook, zdep="on", split="always", search="cu")
        streams.append(encode_stream(header, [subs], options).data)
    return tuple(streams)


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


STREAM_INDEX = st.integers(0, len(TREES) - 1)          # rich_streams() holds one stream per tree


def test_the_rich_streams_reach_every_path():
    seen: dict[str, int] = {}
    for data in rich_streams():
        for key, count in decode_both(data)[2][0].items():
            seen[key] = seen.get(key, 0) + count
    for key in (*TREES, "codebook", "direct", "predicted_codebook", "escapes", "escape_reorder", "zdep_reorder"):
        assert seen.get(key, 0) > 0, key


def test_every_truncation_fails_in_both_or_keeps_every_level():
    """Strict, every truncation fails; by default one that cuts only the terminator's flush decodes the same
    levels (the stuffing bin reads zeros past the end), any other fails."""
    for data in rich_streams():
        whole = decode_both(data)
        for cut in [*range(0, len(data), max(1, len(data) // 40)), len(data) - 1]:
            assert isinstance(decode_both(data[:cut], strict=True), CodecError)
            lenient = decode_both(data[:cut])
            if not isinstance(lenient, CodecError):
                assert cut >= len(data) - TERMINATION_ZERO_BITS // 8 and lenient[3] == whole[3]
                for cut_sub, sub in zip(lenient[1][0], whole[1][0], strict=True):
                    np.testing.assert_array_equal(cut_sub.levels, sub.levels)


@FUZZ
@given(index=STREAM_INDEX, flips=st.lists(st.integers(0, 10**6), min_size=1, max_size=6))
def test_bit_flips_give_the_same_result(index, flips):
    data = bytearray(rich_streams()[index])
    for bit in flips:
        bit %= 8 * len(data)
        data[bit // 8] ^= 0x80 >> (bit % 8)
    decode_both(bytes(data))


@FUZZ
@given(index=STREAM_INDEX, position=st.integers(0, 10**6), value=st.binary(min_size=1, max_size=8))
def test_overwritten_bytes_give_the_same_result(index, position, value):
    data = bytearray(rich_streams()[index])
    position %= len(data)
    data[position:position + len(value)] = value
    decode_both(bytes(data[:len(rich_streams()[index])]))


@FUZZ
@given(index=STREAM_INDEX, prefix=st.integers(0, 40), data=st.binary(min_size=1, max_size=400))
def test_random_tails_after_a_valid_header(index, prefix, data):
    """A real stream's first bytes and then garbage: the garbage is read by the sublayer loop."""
    decode_both(rich_streams()[index][:prefix] + data)


@pytest.mark.slow
@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), flips=st.lists(st.integers(0, 10**6), min_size=1, max_size=10),
       shape=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 40), st.integers(1, 40)))
def test_long_random_streams_and_flips(seed, flips, shape):
    """Random tensors in automatic mode, decoded intact and with bits flipped."""
    rng = np.random.default_rng(seed)
    levels = np.round(rng.laplace(0, rng.uniform(0.3, 20), (shape[0] * shape[1], shape[2], shape[3])))
    levels *= rng.random(levels.shape) < rng.uniform(0.2, 1)
    header = StreamHeader(integer_input=1, max_ctu3d_idx=int(rng.integers(0, 4)))
    subs = [Sublayer(dim=4, shape=shape, levels=levels.astype(np.int64))]
    data = encode_stream(header, [subs], EncoderOptions(max_split_trials=2, search="cu")).data
    decoded = decode_both(data)
    np.testing.assert_array_equal(decoded[1][0][0].levels, levels)
    flipped = bytearray(data)
    for bit in flips:
        flipped[(bit // 8) % len(data)] ^= 0x80 >> (bit % 8)
    decode_both(bytes(flipped))
