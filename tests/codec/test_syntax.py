"""Chapter-10 syntax: every structure and path round-trips through encoder and decoder.

The encoder is forced into one mode at a time (EncoderOptions with a single candidate) and the decoder's
mode statistics prove the path was taken.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from aipu.codec.encoder import EncoderOptions, build_codebook, encode_stream
from aipu.codec.reference.engine import AecEncoder
from aipu.codec.errors import CodecError
from aipu.codec.api import decode_stream
from aipu.codec.reference.element_coder import ElementWriter
from aipu.codec.reference.geometry import CtuGeometry, ctu_geometries, get_bitdepth, tree_shapes
from aipu.codec.reference.headers import StreamHeader, Sublayer, code_layer_header, code_nnc_header, dequantw, step_size
from aipu.codec.reference.sublayer_coder import zdep_from_queue, zdep_queue
from aipu.codec.reference.tree_coder import TREES


def weight_levels(rng, zdepth, channels, kernels, spread=40, zero_rows=4):
    """Levels with many distinct values (> 31, so codebooks escape), a zero band and a uniform block."""
    levels = np.round(rng.laplace(0, spread / 6, (zdepth, channels, kernels))).astype(np.int64)
    levels[:, :zero_rows, :] = 0
    levels[:, zero_rows:zero_rows + 3, :5] = 7
    return levels


def round_trip(header, sublayers, options=None, layers=1):
    stream = encode_stream(header, [list(sublayers)] * layers, options or EncoderOptions())
    reference = encode_stream(header, [list(sublayers)] * layers, options or EncoderOptions(), reference=True)
    assert stream.data == reference.data        # the numba trees write exactly the reference's bytes
    for reference in (False, True):      # the numba trees and the pure-Python reference
        decoded_header, decoded, stats, bins = decode_stream(stream.data, reference=reference)
        assert bins == stream.bins
        assert decoded_header == header
        for layer in decoded:
            for source, result in zip(sublayers, layer):
                assert result.shape == source.shape and result.dim == source.dim
                np.testing.assert_array_equal(result.levels, source.levels)
    return stats, stream


def conv_sublayers(rng, r=3, s=3, c=20, k=13, bias=True):
    subs = [Sublayer(dim=4, shape=(r, s, c, k), cmaxw=100, bitdepth=8, levels=weight_levels(rng, r * s, c, k))]
    if bias:
        subs[0].include_bias_array1d = 1
        subs.append(Sublayer(dim=1, shape=(1, 1, 1, k), cmaxw=3, levels=rng.integers(-300, 300, k)))
    return subs


FORCED = list(itertools.product(TREES, ("off", "on"), ("leaf", "root"), ("never", "always")))


@pytest.mark.parametrize("tree,codebook,start,split", FORCED)
def test_every_tree_codebook_start_depth_and_split(tree, codebook, start, split):
    rng = np.random.default_rng(abs(hash((tree, codebook, start, split))) % 2**32)
    header = StreamHeader(integer_input=1, array1d_depth=9)
    options = EncoderOptions(trees=(tree,), codebook=codebook, start_depth=start, split=split, zdep="off")
    stats, _ = round_trip(header, conv_sublayers(rng), options)
    modes = stats[0]
    assert modes[tree] >= 1
    assert modes.get("codebook", 0) >= (1 if codebook == "on" else 0)
    assert modes.get("direct", 0) >= (1 if codebook == "off" else 0)
    assert (modes.get("start_depth", 0) > 0) == (start == "root")
    assert (modes[tree] > 1) == (split == "always")
    if codebook == "on":
        assert modes.get("escapes", 0) >= 1
        if split == "always":
            assert modes.get("predicted_codebook", 0) >= 1


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("reorder", ("on", "off"))
def test_escape_modes_and_plane_reordering(tree, reorder):
    rng = np.random.default_rng(7)
    header = StreamHeader(integer_input=1, array1d_depth=9)
    options = EncoderOptions(trees=(tree,), codebook="on", escape_reorder=reorder, zdep="on", split="never")
    subs = conv_sublayers(rng, r=3, s=2, c=11, k=17, bias=False)
    subs[0].levels[[1, 4]] = 0                      # empty planes: the energy order moves them last
    stats, _ = round_trip(header, subs, options)
    assert (stats[0].get("escape_reorder", 0) > 0) == (reorder == "on")
    assert stats[0]["zdep_reorder"] == 1


@pytest.mark.parametrize("tree", TREES)
def test_start_depth_at_the_leaves_with_odd_sizes(tree):
    """startDepth = leaf level: the uni-tagtree's 2x2 group rule, odd edges, 1-wide CUs."""
    rng = np.random.default_rng(3)
    header = StreamHeader(integer_input=1, array1d_depth=4)
    options = EncoderOptions(trees=(tree,), codebook="off", start_depth="leaf", split="never", zdep="off")
    for c, k in ((1, 1), (1, 7), (5, 1), (9, 3)):
        levels = rng.integers(-3, 4, (2, c, k))
        levels[:, ::2, ::2] = 2                     # uniform 2x2 groups next to non-uniform ones
        round_trip(header, [Sublayer(dim=3, shape=(1, 2, c, k), levels=levels)], options)


def test_automatic_choice_round_trips_and_uses_several_modes():
    rng = np.random.default_rng(11)
    header = StreamHeader(integer_input=1, array1d_depth=9)
    subs = conv_sublayers(rng, r=3, s=3, c=30, k=21)
    subs[0].levels[:, 10:, 10:] = 0
    stats, _ = round_trip(header, subs, EncoderOptions(), layers=2)
    assert len(stats) == 2 and sum(stats[0].get(tree, 0) for tree in TREES) >= 1


@pytest.mark.parametrize("max_ctu3d_idx", (0, 1, 2, 3))
@pytest.mark.parametrize("scan_order", (0, 1))
def test_ctu_sizes_and_scan_orders(max_ctu3d_idx, scan_order):
    rng = np.random.default_rng(max_ctu3d_idx * 2 + scan_order)
    header = StreamHeader(integer_input=1, max_ctu3d_idx=max_ctu3d_idx, array1d_depth=9)
    subs = conv_sublayers(rng, r=1, s=1, c=37, k=70)
    subs[0].scan_order = scan_order
    options = EncoderOptions(trees=("octree",), codebook="off", start_depth="root", split="always")
    round_trip(header, subs, options)


@pytest.mark.parametrize("shape", [(3, 3, 1, 24), (5, 5, 1, 9), (3, 3, 16, 1), (1, 1, 40, 40), (7, 7, 3, 10),
                                   (1, 3, 6, 6)])
def test_max_ctu3d_size_adapts_to_the_kernel(shape):
    """enable_max_ctu3d_size (10.5.4) including the depthwise C == 1 and K == 1 branches (A25)."""
    rng = np.random.default_rng(sum(shape))
    r, s, c, k = shape
    header = StreamHeader(integer_input=1, enable_max_ctu3d_size=1, array1d_depth=9)
    subs = [Sublayer(dim=4 if r > 1 else 3, shape=shape, levels=weight_levels(rng, r * s, c, k, zero_rows=0))]
    options = EncoderOptions(trees=("tagtree",), codebook="off", start_depth="root", split="always")
    round_trip(header, subs, options)


def test_layer_header_implicit_bias_and_inherited_vector_lengths():
    """Table 324: implicit bias after a weight, an explicit 1-D vector, then one that inherits its length."""
    rng = np.random.default_rng(5)
    header = StreamHeader(integer_input=1, array1d_depth=9)
    subs = conv_sublayers(rng, r=1, s=1, c=9, k=12)
    subs += [Sublayer(dim=1, shape=(1, 1, 1, 12), cmaxw=1, levels=rng.integers(-60, 60, 12)),
             Sublayer(dim=1, shape=(1, 1, 1, 12), cmaxw=1, levels=np.zeros(12, dtype=np.int64)),
             Sublayer(dim=2, shape=(1, 1, 4, 5), levels=rng.integers(-9, 9, (1, 4, 5)))]
    subs[2].levels[3] = -64
    stats, _ = round_trip(header, subs, EncoderOptions(trees=("octree",), split="never"))
    with pytest.raises(CodecError, match="inherited"):
        bad = subs[:3] + [Sublayer(dim=1, shape=(1, 1, 1, 5), cmaxw=1, levels=np.zeros(5, dtype=np.int64))]
        encode_stream(header, [bad], EncoderOptions())


def test_standalone_vector_layer_and_zero_cmaxw():
    header = StreamHeader(integer_input=1, array1d_depth=3)
    vector = Sublayer(dim=1, shape=(1, 1, 1, 6), cmaxw=8, levels=np.array([0, 1, -1, 8, -8, 5]))
    zeros = Sublayer(dim=1, shape=(1, 1, 1, 4), cmaxw=0, levels=np.zeros(4, dtype=np.int64))
    round_trip(header, [vector])
    round_trip(header, [zeros])


def test_float_header_step_sizes_follow_table_324():
    header = StreamHeader(integer_input=0, array1d_depth=10)
    subs = [Sublayer(dim=2, shape=(1, 1, 3, 4), cmaxw=300, bitdepth=6, levels=np.arange(12).reshape(1, 3, 4)),
            Sublayer(dim=1, shape=(1, 1, 1, 4), cmaxw=2, levels=np.array([1, -2, 0, 3]))]
    subs[0].include_bias_array1d = 1
    stream = encode_stream(header, [subs])
    _, layers, _, _ = decode_stream(stream.data)
    weight, bias = layers[0]
    assert weight.step == np.float32(np.float32(300) / np.float32(256)) / np.float32(63)
    assert bias.step == np.float32(2) / np.float32(1023)


def test_helpers_of_tables_317_to_321():
    assert [get_bitdepth(w) for w in (0, 1, 2, 3, 8, 4096)] == [1, 1, 2, 2, 4, 13]
    np.testing.assert_array_equal(dequantw(np.array([-3, 0, 2]), np.float32(0.5)), np.float32([-1.5, 0, 1.0]))
    assert step_size(255, 8, 1, False) == 1.0
    with pytest.raises(CodecError):
        step_size(255, 0, 0, False)
    assert tree_shapes(9, 8, 8, planar=False) == [(1, 1, 1), (2, 1, 1), (3, 2, 2), (5, 4, 4), (9, 8, 8)]
    assert tree_shapes(9, 5, 3, planar=True) == [(9, 1, 1), (9, 2, 1), (9, 3, 2), (9, 5, 3)]
    ctu = CtuGeometry(0, 0, 20, 64, 8, 8, 0)
    assert ctu.grids == [(1, 1), (1, 2), (2, 4), (3, 8)]
    assert ctu.cu_rect(2, 1, 3) == (16, 48, 4, 16)
    header = StreamHeader(enable_max_ctu3d_size=1)
    geometry = ctu_geometries(header, Sublayer(dim=4, shape=(3, 3, 64, 64)))
    assert (geometry[0].height, geometry[0].width, len(geometry)) == (16, 16, 16)


def test_zdep_queue_round_trips_random_permutations():
    rng = np.random.default_rng(0)
    for zdepth in range(1, 30):
        for _ in range(10):
            perm = (0, *(1 + rng.permutation(zdepth - 1)))
            assert tuple(zdep_from_queue(zdep_queue(perm))) == perm
    for bad in ([-1, 5, -2], [-1, 0, -2], [-1, 2, 2]):
        with pytest.raises(CodecError):
            zdep_from_queue(bad)


def test_codebook_builder_puts_predicted_entries_first():
    values = np.array([0, 0, 0, 5, 5, -5, 3, 9, 9, 9, 9])
    cbook, predicted = build_codebook(values, [7, 9, 0, 9])
    assert predicted == (1, 2)
    assert cbook[:2] == (9, 0) and set(cbook) == {0, 5, -5, 3, 9}


def test_encoder_rejects_what_the_syntax_cannot_carry():
    writer = ElementWriter(AecEncoder())
    code_nnc_header(writer, StreamHeader(), 1)
    with pytest.raises(ValueError):
        code_layer_header(writer, StreamHeader(), [Sublayer(dim=2, shape=(1, 1, 70000, 3))])


def test_bin_trace_for_rtl_comparison():
    rng = np.random.default_rng(9)
    stream = encode_stream(StreamHeader(integer_input=1, array1d_depth=9), [conv_sublayers(rng)])
    trace: list[tuple[int, int]] = []
    _, _, _, bins = decode_stream(stream.data, trace=trace)
    assert len(trace) == bins + 1 and trace[-1] == (-2, 1)          # the terminating stuffing bin
    assert all(-1 <= ctx < 690 and bit in (0, 1) for ctx, bit in trace[:-1])
    assert trace[0][0] == -1                                          # headers are bypass bins
