"""The npu profile: the encoder emits it, its decoder agrees with the general decoder bin by bin, and every
stream outside it is refused at the element that leaves it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from aipu.app.cli import main
from aipu.codec import CodecError
from aipu.codec.api import CodecOptions, decode_stream, encode, read_index
from aipu.codec.npu_profile import (CYCLE_SKIP, decode_profile_compiled, decode_profile_stream, encode_profile_stream,
                                   encoder_options, morton_leaves, profile_cycles_compiled, with_profile)
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
