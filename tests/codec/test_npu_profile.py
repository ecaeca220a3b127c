"""The npu profile: the encoder emits it, its decoder agrees with the general decoder bin by bin, and every
stream outside it is refused at the element that leaves it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from aipu.app.cli import main
from aipu.codec import CodecError
from aipu.codec.api import CodecOptions, decode_stream, encode, read_index
from aipu.codec.npu_profile import (CYCLE_SKIP, MARK_CUBE, MARK_LEAF, MARK_LEVEL, bin_cycles, cube_grid, cube_writes,
                                   decode_profile_compiled, decode_profile_stream, encode_profile_stream,
                                   encoder_options, morton_leaves, profile_cycles_compiled, profile_entries_compiled,
                                   with_profile)
from aipu.codec.reference.geometry import CTU_SIZES, tree_shapes
from aipu.codec.reference.tree_coder import children


def _streams(container: bytes) -> list[bytes]:
    infos, payload = read_index(container)
    return [container[payload + info.offset:payload + info.offset + info.length] for info in infos]


def _levels(rng: np.random.Generator, shape) -> np.ndarray:
    levels = np.round(rng.laplace(0, rng.choice([0.5, 4, 30]), size=shape))
    levels[rng.random(shape) < 0.4] = 0
    return np.clip(levels, -128, 127).astype(np.int8)


@pytest.mark.parametrize("seed", range(12))
def test_profile_streams_decode_as_the_general_decoder_bin_by_bin(seed):
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(1, 80)), int(rng.integers(1, 20)), int(rng.integers(1, 6)), int(rng.integers(1, 6)))
    if seed % 2:
        shape = (shape[1], shape[0], shape[2], shape[3])
    weights = _levels(rng, shape)
    (stream,) = _streams(encode({"w": weights}, encoder_options(int(rng.choice(CTU_SIZES)))))
    general: list = []
    _, layers, _, bins = decode_stream(stream, trace=general)
    profile: list = []
    decoded = decode_profile_stream(stream, shape, profile)
    np.testing.assert_array_equal(decoded.levels, weights)
    assert profile == general and decoded.bins == bins + 1       # + the terminating stuffing bin


def _outcome(decode, stream: bytes, shape) -> tuple:
    """What a decoder makes of a stream: its results, or where and why it refused. The engines word a
    failed terminator differently (the compiled one checks the padding at its end): only that it fails; the
    reference engine adds the bits it wanted to a read past the end."""
    try:
        result = decode(stream, shape)
    except CodecError as error:
        if error.element in (None, "terminator"):
            return ("terminator",)
        return error.reason.split(" (")[0], error.element, error.bit_position, error.context.get("ctu")
    return result.levels.tobytes(), result.bins, result.morton_skips, result.zero_run_cycles, tuple(result.leaf_runs)


@pytest.mark.parametrize("density", [0.0, 0.001])
def test_compiled_walk_counts_the_zero_run_cycles_of_sparse_layers(density):
    """Near-empty layers leave long runs of zero bits in the stream: the compiled walk counts the hardware's
    zero-run cycles as the reference does, and the leaves' cascade runs, which zero-run steps cut (then there
    are more runs than leaves)."""
    rng = np.random.default_rng(3)
    shape = (64, 32, 3, 3)
    stream = encode_profile_stream(np.where(rng.random(shape) < density, rng.integers(-20, 21, shape), 0), 64)
    decoded = decode_profile_stream(stream, shape)
    assert decoded.zero_run_cycles > 0 and (decoded.leaf_runs.sum() > decoded.levels.size) == (density > 0)
    assert _outcome(decode_profile_compiled, stream, shape) == _outcome(decode_profile_stream, stream, shape)
    _assert_same_cycles(stream, shape)


def _assert_same_cycles(stream: bytes, shape) -> None:
    """The compiled walk's bits per engine cycle are the reference's ``cycles`` list (None: a Morton skip)."""
    reference: list = []
    decode_profile_stream(stream, shape, cycles=reference)
    compiled = profile_cycles_compiled(stream, shape)
    assert [None if bits == CYCLE_SKIP else int(bits) for bits in compiled] == reference


@pytest.mark.parametrize("seed", range(8))
def test_compiled_cycles_are_the_reference_s(seed):
    """Random layers, tall or wide (Morton skips where a side is not a power of two), in random CTU sizes."""
    rng = np.random.default_rng(200 + seed)
    shape = (int(rng.integers(1, 70)), int(rng.integers(1, 20)), int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    _assert_same_cycles(encode_profile_stream(_levels(rng, shape), int(rng.choice(CTU_SIZES))), shape)


@pytest.mark.parametrize("bins_per_cycle", [1, 2, 4])
@pytest.mark.parametrize("kind", ["random", "trained_like", "sparse"])
def test_entries_of_b_bins_a_cycle_count_the_formula_s_cycles_and_the_levels(kind, bins_per_cycle):
    """The engine's cycles at B bins a cycle: as many as ``bin_cycles`` + Morton skips + zero-run cycles, their
    bits the stream's after the 9-bit start, one level-completing cycle per leaf; at B = 1 the bits are
    ``profile_cycles_compiled``'s."""
    rng = np.random.default_rng({"random": 7, "trained_like": 8, "sparse": 9}[kind])
    for _ in range(4):
        shape = (int(rng.integers(1, 60)), int(rng.integers(1, 30)), int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        if kind == "random":
            levels = _levels(rng, shape)
        elif kind == "trained_like":
            levels = np.where(rng.random(shape) < 0.3, 0, np.clip(np.round(rng.laplace(0, 8, shape)), -128, 127))
        else:
            levels = np.where(rng.random(shape) < 0.002, rng.integers(-20, 21, shape), 0)
        stream = encode_profile_stream(levels.astype(np.int8), int(rng.choice(CTU_SIZES)))
        counts = decode_profile_compiled(stream, shape)
        bits, marks, _ = profile_entries_compiled(stream, shape, bins_per_cycle)
        completes = marks & MARK_LEVEL
        skips = int(np.count_nonzero(bits == CYCLE_SKIP))
        assert len(bits) == bin_cycles(counts, bins_per_cycle) + counts.morton_skips + counts.zero_run_cycles
        assert skips == counts.morton_skips
        consumed = int(bits[bits != CYCLE_SKIP].astype(np.int64).sum())      # up to the stuffing bin, not the padding
        assert 0 <= 8 * len(stream) - 9 - consumed < 8
        one = profile_cycles_compiled(stream, shape)
        assert consumed == int(one[one != CYCLE_SKIP].astype(np.int64).sum())
        assert int(completes.sum()) == counts.levels.size and not marks[bits == CYCLE_SKIP].any()
        assert (marks[completes != 0] & MARK_LEAF).all()
        if bins_per_cycle == 1:
            np.testing.assert_array_equal(bits, one)


def _leaf_cubes(shape, ctu: int) -> list[tuple[int, int, int]]:
    """The cube (k >> 3, z >> 3, c >> 3) of each leaf in stream order: the CTUs (c outer, k inner), each CU's
    leaves in Morton order (the reference's walk)."""
    out_c, in_c, k_h, k_w = shape
    cubes = []
    for c0 in range(0, in_c, ctu):
        for k0 in range(0, out_c, ctu):
            for leaf in morton_leaves(k_h * k_w, min(ctu, in_c - c0), min(ctu, out_c - k0)):
                if leaf is not None:
                    z, y, x = leaf
                    cubes.append(((k0 + x) >> 3, z >> 3, (c0 + y) >> 3))
    return cubes


@pytest.mark.parametrize("seed", range(12))
def test_each_cube_s_entries_are_one_run_in_the_engine_s_cycles(seed):
    """Random shapes (edges off the 8-grid, up to 7x7 kernels, 1x1) and CTU sizes: the entries of each cube
    ordinal (counted by MARK_CUBE, on leaf cycles only) form one run, the ordinals follow the leaves' cubes in
    the reference's order, and every cube of the grid has one ordinal."""
    rng = np.random.default_rng(300 + seed)
    taps = [(1, 1), (3, 3), (1, 3), (5, 5), (7, 7), (2, 1)][seed % 6]
    shape = (int(rng.integers(1, 50)), int(rng.integers(1, 50)), *taps)
    ctu = int(rng.choice(CTU_SIZES))
    stream = encode_profile_stream(_levels(rng, shape), ctu)
    bits, marks, cubes = profile_entries_compiled(stream, shape, int(rng.choice([1, 2, 4])))
    leaf = (marks & MARK_LEAF) != 0
    assert not (marks[~leaf] & (MARK_CUBE | MARK_LEVEL)).any()
    ordinal = np.cumsum((marks & MARK_CUBE) != 0) - 1
    runs = ordinal[leaf]
    assert runs[0] == 0 and set(np.diff(runs).tolist()) <= {0, 1} and runs[-1] == len(cubes) - 1
    assert len(cubes) == np.prod(cube_grid(shape)) and len(set(map(tuple, cubes.tolist()))) == len(cubes)
    per_leaf = [tuple(cube) for cube in cubes[ordinal[(marks & MARK_LEVEL) != 0]].tolist()]
    assert per_leaf == _leaf_cubes(shape, ctu)


def test_cube_writes_count_each_row_s_weight_words():
    """Hand-counted: 8 channels a row at byte (k * taps + z) * in_c + c0 from wgt_addr; one write per WEIGHT word
    a row touches; rows only for kernels and taps inside the tensor."""
    one = np.array([[0, 0, 0]])
    assert cube_writes(one, 0, (8, 8, 1, 1), 256).tolist() == [8]                 # 8 rows of 8 bytes, one word each
    assert cube_writes(one, 0, (8, 8, 1, 1), 4).tolist() == [16]                  # two words each
    assert cube_writes(one, 2, (8, 8, 1, 1), 4).tolist() == [24]                  # bytes 2..9: three words each
    assert cube_writes(one, 0, (3, 5, 1, 1), 4).tolist() == [6]                   # bytes 0..4, 5..9, 10..14: 2 each
    # 3x3 kernel, in_c = 20: cube (0, 1, 2) holds tap 8 of kernels 0..7, channels 16..19
    rows = [(k * 9 + 8) * 20 + 16 for k in range(8)]
    assert cube_writes(np.array([[0, 1, 2]]), 0, (8, 20, 3, 3), 4).tolist() == [sum((a + 3) // 4 - a // 4 + 1
                                                                                   for a in rows)]
    assert cube_writes(np.array([[1, 0, 0], [0, 1, 0]]), 16, (10, 8, 3, 3), 16).tolist() == [2 * 8, 8 * 1]


@pytest.mark.parametrize("seed", range(10))
def test_compiled_walk_decodes_and_refuses_as_the_reference(seed):
    rng = np.random.default_rng(100 + seed)
    shape = (int(rng.integers(1, 40)), int(rng.integers(1, 12)), int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    stream = encode_profile_stream(_levels(rng, shape), int(rng.choice(CTU_SIZES)))
    variants = [stream, stream[:-1], stream[:len(stream) // 2], stream + b"\0"]
    for _ in range(8):
        flipped = bytearray(stream)
        flipped[int(rng.integers(len(flipped)))] ^= 1 << int(rng.integers(8))
        variants.append(bytes(flipped))
    for variant in variants:
        assert _outcome(decode_profile_compiled, variant, shape) == _outcome(decode_profile_stream, variant, shape)


def test_float_weights_quantised_in_the_profile():
    rng = np.random.default_rng(3)
    weights = rng.normal(0, 0.1, size=(8, 4, 3, 3)).astype(np.float32)
    (stream,) = _streams(encode({"w": weights}, with_profile(CodecOptions(bitdepth=6))))
    _, layers, _, _ = decode_stream(stream)
    decoded = decode_profile_stream(stream, weights.shape)
    np.testing.assert_array_equal(decoded.levels.transpose(2, 3, 1, 0).reshape(9, 4, 8), layers[0][0].levels)
    assert np.abs(decoded.levels).max() <= 63 and decoded.levels.any()


def test_leaf_order_is_the_trees_depth_first_walk():
    for extents in ((1, 1, 1), (9, 3, 5), (2, 17, 1), (25, 64, 64), (1, 7, 33)):
        shapes = tree_shapes(*extents, planar=False)

        def walk(depth, node):
            if depth == len(shapes) - 1:
                yield node
                return
            for child in children(shapes[depth + 1], *node, planar=False):
                yield from walk(depth + 1, child)

        leaves = [leaf for leaf in morton_leaves(*extents) if leaf is not None]
        assert leaves == list(walk(0, (0, 0, 0)))


@pytest.mark.parametrize("change, element", [
    (dict(enable_zdep_reorder=True), "enable_zdep_reorder"),
    (dict(scan_order=1), "sublayer_scan_order"),
    (dict(enable_max_ctu3d_size=True), "enable_max_ctu3d_size"),
])
@pytest.mark.parametrize("decode", [decode_profile_stream, decode_profile_compiled])
def test_header_outside_the_profile_is_refused_at_its_field(change, element, decode):
    weights = _levels(np.random.default_rng(1), (4, 3, 3, 3))
    (stream,) = _streams(encode({"w": weights}, replace(encoder_options(), **change)))
    with pytest.raises(CodecError, match="npu profile") as caught:
        decode(stream, weights.shape)
    assert caught.value.element == element


@pytest.mark.parametrize("decode", [decode_profile_stream, decode_profile_compiled])
def test_full_syntax_and_a_wrong_shape_are_refused(decode):
    weights = _levels(np.random.default_rng(2), (16, 16, 3, 3))
    for change in (dict(enable_zdep_reorder=False), dict(enable_zdep_reorder=False, max_ctu_size=8)):
        (stream,) = _streams(encode({"w": weights}, replace(CodecOptions(), **change)))
        with pytest.raises(CodecError, match="npu profile"):
            decode(stream, weights.shape)
    (stream,) = _streams(encode({"w": weights}, encoder_options()))
    with pytest.raises(CodecError, match="sublayer_shape S = 3, the command expects 1"):
        decode(stream, (16, 16, 3, 1))
    with pytest.raises(CodecError, match="reading past the end"):
        decode(stream[:-2], weights.shape)


def test_cli_encodes_the_profile_one_tensor_per_layer(tmp_path):
    rng = np.random.default_rng(4)
    weights, bias = _levels(rng, (6, 2, 3, 3)), rng.integers(-9, 9, size=6).astype(np.int8)
    np.savez(tmp_path / "w.npz", **{"conv.weight": weights, "conv.bias": bias})
    assert main(["codec", "encode", str(tmp_path / "w.npz"), "-o", str(tmp_path / "w.nnr"), "--profile", "npu"]) == 0
    weight_stream, _ = _streams((tmp_path / "w.nnr").read_bytes())
    np.testing.assert_array_equal(decode_profile_stream(weight_stream, weights.shape).levels, weights)
