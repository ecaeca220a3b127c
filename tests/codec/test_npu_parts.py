"""Parts streams (docs/codec.md §11): a tile's stream split by output channels into independently decodable
npu-profile streams (the first whole, the others continuation parts) behind a header of their lengths. They round-trip for any split, their bins are the
general decoder's part by part, and every hostile header or part is a CodecError naming the element and its
place in the whole stream."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aipu.codec import CodecError
from aipu.codec.api import decode_stream
from aipu.codec.npu_profile import (CONTINUATION_HEADER, MAX_PARTS, PROFILE_HEADER, decode_parts,
                                   decode_parts_compiled, decode_parts_stream, decode_profile_stream,
                                   encode_parts_stream, encode_profile_stream, part_channels)
from aipu.codec.reference.elements import element_spec
from aipu.codec.reference.geometry import CTU_SIZES

QUICK = settings(max_examples=40, derandomize=True, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow])


def _levels(seed: int, shape) -> np.ndarray:
    rng = np.random.default_rng(seed)
    levels = np.round(rng.laplace(0, rng.choice([0.5, 4, 30]), size=shape))
    levels[rng.random(shape) < 0.4] = 0
    return np.clip(levels, -128, 127).astype(np.int8)


@st.composite
def tiles(draw):
    """(levels, parts, CTU size): a random tile of up to 24 output channels and a split of 1..8 parts."""
    shape = (draw(st.integers(1, 24)), draw(st.integers(1, 10)), draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    parts = draw(st.integers(1, min(8, shape[0])))
    return _levels(draw(st.integers(0, 2**32 - 1)), shape), parts, draw(st.sampled_from(CTU_SIZES))


@QUICK
@given(tiles())
def test_parts_streams_round_trip(tile):
    levels, parts, ctu = tile
    stream = encode_parts_stream(levels, parts, ctu)
    if parts == 1:
        assert stream == encode_profile_stream(levels, ctu)
    reference, compiled = decode_parts_stream(stream, levels.shape, parts), decode_parts_compiled(stream,
                                                                                                  levels.shape, parts)
    np.testing.assert_array_equal(reference.levels, levels)
    np.testing.assert_array_equal(compiled.levels, levels)
    assert (reference.bins, reference.morton_skips, reference.zero_run_cycles) == \
        (compiled.bins, compiled.morton_skips, compiled.zero_run_cycles)


def _header_bins(fields) -> int:
    return sum(element_spec(name).fixed_length for name, _ in fields)


def test_each_part_decodes_as_the_general_decoder_bin_by_bin():
    """The first part is a whole profile stream; a continuation part has the bins of the whole profile stream of
    its channels but for the header fields it leaves to the first part."""
    levels = _levels(5, (13, 7, 3, 3))
    header = _header_bins(PROFILE_HEADER)
    ctu_idx = _header_bins(PROFILE_HEADER[:[name for name, _ in PROFILE_HEADER].index("max_ctu3d_idx")])
    kept = slice(ctu_idx, ctu_idx + _header_bins(CONTINUATION_HEADER))
    parts = decode_parts(encode_parts_stream(levels, 5), levels.shape, 5,
                         lambda part, shape, continuation: (part, continuation))
    assert [(part.k0, part.k1) for part, _ in parts] == part_channels(13, 5) == [(0, 2), (2, 5), (5, 7), (7, 10),
                                                                                 (10, 13)]
    for part, (stream, continuation) in parts:
        general, profile = [], []
        _, _, _, bins = decode_stream(encode_profile_stream(levels[part.k0:part.k1]), trace=general)
        decoded = decode_profile_stream(stream, (part.k1 - part.k0, 7, 3, 3), profile, continuation=continuation)
        if continuation:
            general, bins = general[kept] + general[header:], bins - header + kept.stop - kept.start
        assert profile == general and decoded.bins == bins + 1
        np.testing.assert_array_equal(decoded.levels, levels[part.k0:part.k1])


def _refusal(stream: bytes, shape, parts: int) -> tuple[str, int]:
    with pytest.raises(CodecError) as caught:
        decode_parts_compiled(stream, shape, parts)
    return caught.value.element, caught.value.bit_position // 8


def test_a_hostile_header_is_refused_at_its_element():
    levels = _levels(1, (6, 3, 3, 3))
    stream = encode_parts_stream(levels, 3)
    lengths = struct.unpack_from("<3I", stream)
    assert _refusal(stream[:7], levels.shape, 3) == ("part 1 length", 7)
    assert _refusal(bytes(4) + stream[4:], levels.shape, 3) == ("part 0 length", 0)
    assert _refusal(stream[:-1], levels.shape, 3) == ("part 2 length", 8)                 # runs past the end
    assert _refusal(stream + b"\0", levels.shape, 3) == ("part 2 length", 8)              # sums to less
    swapped = struct.pack("<3I", lengths[0] + 1, lengths[1] - 1, lengths[2]) + stream[12:]
    element, _ = _refusal(swapped, levels.shape, 3)
    assert element not in ("part 0 length", "part 1 length")          # a part's own error, with its index
    for parts, reason in ((0, "outside 1..64"), (MAX_PARTS + 1, "outside 1..64"), (7, "exceeds out_c = 6")):
        with pytest.raises(CodecError, match=reason) as caught:
            decode_parts_stream(stream, levels.shape, parts)
        assert caught.value.element == "parts"
    with pytest.raises(CodecError, match="exceeds out_c"):
        encode_parts_stream(levels, 7)


def test_an_error_inside_a_part_names_the_part_and_its_place_in_the_whole_stream():
    levels = _levels(2, (8, 4, 3, 3))
    stream = encode_parts_stream(levels, 4)
    offset = 16 + sum(struct.unpack_from("<4I", stream)[:2])          # part 2's first byte
    corrupt = bytearray(stream)
    corrupt[offset + 2] ^= 0x10                                       # inside part 2's first CTU
    with pytest.raises(CodecError) as caught:
        decode_parts_stream(bytes(corrupt), levels.shape, 4)
    alone = bytes(corrupt[offset:offset + struct.unpack_from("<4I", stream)[2]])
    with pytest.raises(CodecError) as inside:
        decode_profile_stream(alone, (2, 4, 3, 3), continuation=True)
    assert caught.value.context["part"] == 2 and caught.value.element == inside.value.element
    assert caught.value.bit_position == 8 * offset + inside.value.bit_position


def _outcome(decode, stream: bytes, shape, parts: int) -> tuple:
    """A decoder's levels, or the element, byte and part of its refusal (a failed terminator only as such:
    the two engines word it differently, tests/codec/test_npu_profile.py)."""
    try:
        return ("decoded", decode(stream, shape, parts).levels.tobytes())
    except CodecError as error:
        assert error.bit_position is not None and 0 <= error.bit_position <= 8 * len(stream) + 64, str(error)
        if error.element in (None, "terminator"):
            return ("terminator", error.context.get("part"))
        return error.element, error.bit_position // 8, error.context.get("part")


@settings(max_examples=150, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(tiles(), st.data())
def test_random_truncated_and_bit_flipped_streams_are_named_codec_errors(tile, data):
    """Any mutation of a parts stream: the reference and the compiled decoder either both decode it or refuse
    it at the same element, byte and part; never another exception."""
    levels, parts, ctu = tile
    stream = bytearray(encode_parts_stream(levels, parts, ctu))
    header = 4 * parts if parts > 1 else len(stream)
    kind = data.draw(st.sampled_from(["flip header", "flip", "truncate", "random header", "append"]))
    if kind.startswith("flip"):
        position = data.draw(st.integers(0, (header if kind == "flip header" else len(stream)) - 1))
        stream[position] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "truncate":
        del stream[data.draw(st.integers(0, len(stream) - 1)):]
    elif kind == "random header":
        stream[:header] = data.draw(st.binary(min_size=header, max_size=header))
    else:
        stream += data.draw(st.binary(min_size=1, max_size=8))
    shape = levels.shape
    assert _outcome(decode_parts_stream, bytes(stream), shape, parts) == \
        _outcome(decode_parts_compiled, bytes(stream), shape, parts)
