"""Library round trips: decode(encode(x)) equals the quantised x exactly, for every shape class and value kind."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aipu import codec
from aipu.codec.api import decode_stream, default_groups
from aipu.codec.encoder import SEARCH_CHOICES, EncoderOptions, encode_stream
from aipu.codec.quantize import kmeans_levels, quantize_uniform, reconstruct
from aipu.codec.reference.elements import NUM_CONTEXTS
from aipu.codec.reference.headers import StreamHeader
from aipu.codec.reference.tree_coder import TREES
from tests.codec.syntax_streams import conv_sublayers


FAST = EncoderOptions(trees=("octree",), split="never", start_depth="root", zdep="off")


SHAPES = {"1x1": (24, 13, 1, 1), "3x3": (10, 7, 3, 3), "7x7": (5, 3, 7, 7), "depthwise": (12, 1, 3, 3),
          "fc": (70, 9), "bias": (70,), "conv1d": (6, 4, 5), "conv3d": (3, 2, 2, 2, 2), "scalar": ()}


def quantised(array, options):
    """What decode(encode(x)) must return: the quantised and dequantised x in x's dtype."""
    if array.dtype.kind in "iub":
        return array
    one_d = array.ndim <= 1
    if one_d:
        q = quantize_uniform(array, bitdepth=options.bias_bitdepth, one_d=True)
    elif options.clusters:
        q = kmeans_levels(array, options.clusters)
    elif options.step is not None:
        q = quantize_uniform(array, step=options.step)
    else:
        q = quantize_uniform(array, bitdepth=options.bitdepth)
    return reconstruct(q.levels, q.step).astype(array.dtype)


def check_round_trip(tensors, options):
    data = codec.encode(tensors, options)
    decoded = codec.decode(data)
    assert set(decoded) == set(tensors)
    for name, array in tensors.items():
        array = np.asarray(array)
        assert decoded[name].dtype == array.dtype and decoded[name].shape == array.shape, name
        np.testing.assert_array_equal(decoded[name], quantised(array, options), err_msg=name)
    return data


@pytest.mark.parametrize("kind", sorted(SHAPES))
@pytest.mark.parametrize("dtype", ["float32", "int8", "int32"])
def test_every_shape_class(kind, dtype):
    rng = np.random.default_rng(len(kind))
    shape = SHAPES[kind]
    if dtype == "float32":
        array = rng.laplace(0, 0.05, shape).astype(np.float32)
    else:
        info = np.iinfo(dtype)
        array = rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    check_round_trip({"t": array}, codec.CodecOptions(encoder=FAST))


@pytest.mark.parametrize("content", ["zeros", "equal", "sparse", "dense", "extremes"])
def test_value_patterns(content):
    rng = np.random.default_rng(1)
    shape = (33, 17, 3, 3)
    array = {"zeros": np.zeros(shape), "equal": np.full(shape, -0.25),
             "sparse": rng.normal(0, 1, shape) * (rng.random(shape) < 0.01),
             "dense": rng.uniform(-1, 1, shape),
             "extremes": rng.choice([-1.0, 1.0, 0.999], shape)}[content].astype(np.float32)
    options = codec.CodecOptions(bitdepth=5, encoder=EncoderOptions(trees=TREES, split="never"))
    check_round_trip({"w.weight": array, "w.bias": rng.normal(0, 1, 33).astype(np.float32)}, options)


def test_integer_levels_at_the_limits_are_lossless():
    big = np.array([[2**31 - 1, -2**31, 0, 1], [-1, 2**31 - 2, -(2**31 - 1), 7]], dtype=np.int64)
    check_round_trip({"w": big, "b": np.array([-2**31, 2**31 - 1], dtype=np.int32),
                      "u": np.array([0, 255, 1], dtype=np.uint8), "flags": np.array([True, False])},
                     codec.CodecOptions(encoder=FAST))
    with pytest.raises(ValueError):
        codec.encode({"w": np.array([2**40, 1], dtype=np.int64)})


@pytest.mark.parametrize("bitdepth", [1, 2, 8, 12])
def test_float_bit_depths_and_step_size(bitdepth):
    rng = np.random.default_rng(bitdepth)
    array = rng.normal(0, 0.3, (20, 5, 3, 3)).astype(np.float32)
    check_round_trip({"w": array}, codec.CodecOptions(bitdepth=bitdepth, encoder=FAST))
    q = quantize_uniform(array, bitdepth=bitdepth)
    # cmaxw is max|w| rounded up to 1/256, so the largest level is the top level or one below it
    assert (1 << bitdepth) - 2 <= np.abs(q.levels).max() <= (1 << bitdepth) - 1
    assert np.abs(reconstruct(q.levels, q.step) - array).max() <= q.step / 2 + 1e-6


def test_step_option_and_kmeans_codebook():
    rng = np.random.default_rng(2)
    array = rng.normal(0, 0.1, (16, 8, 3, 3)).astype(np.float64)
    q = quantize_uniform(array, step=0.01)
    assert abs(float(q.step) - 0.01) < 1e-4
    check_round_trip({"w": array}, codec.CodecOptions(step=0.01, encoder=FAST))
    clustered = kmeans_levels(array, 7)
    assert len(np.unique(clustered.levels)) <= 7
    options = codec.CodecOptions(clusters=7, encoder=EncoderOptions(trees=("octree",), split="never"))
    data, infos = codec.encode_with_info({"w": array}, options)
    assert infos[0].modes.get("codebook", 0) >= 1
    np.testing.assert_array_equal(codec.decode(data)["w"], quantised(array, options))


def test_decode_layer_by_name_and_index():
    rng = np.random.default_rng(4)
    tensors = {"a.weight": rng.normal(0, 1, (8, 4, 3, 3)).astype(np.float32),
               "a.bias": rng.normal(0, 1, 8).astype(np.float32),
               "b.weight": rng.integers(-5, 5, (6, 8)).astype(np.int8)}
    assert default_groups(tensors) == [("a.weight", "a.bias"), ("b.weight", None)]
    data = codec.encode(tensors, codec.CodecOptions(encoder=FAST))
    whole = codec.decode(data)
    layer = codec.decode_layer(data, "a.bias")
    assert set(layer) == {"a.weight", "a.bias"}
    np.testing.assert_array_equal(layer["a.bias"], whole["a.bias"])
    np.testing.assert_array_equal(codec.decode_layer(data, 1)["b.weight"], tensors["b.weight"])
    raw = codec.decode_layer(data, "a.weight", levels=True)
    q = quantize_uniform(tensors["a.weight"], bitdepth=8)
    np.testing.assert_array_equal(raw["a.weight"], q.levels)
    assert raw["a.weight:step"] == q.step
    infos, _ = codec.read_index(data)
    assert [info.name for info in infos] == ["a.weight", "b.weight"]
    with pytest.raises(codec.CodecError):
        codec.decode_layer(data, "nope")


REPRODUCIBLE = """
import sys
import numpy as np
from aipu import codec
rng = np.random.default_rng(9)
tensors = {"c.weight": rng.laplace(0, 0.1, (12, 6, 3, 3)).astype(np.float32),
           "c.bias": rng.normal(0, 1, 12).astype(np.float32), "q": rng.integers(-9, 9, (7, 5)).astype(np.int8)}
data = codec.encode(tensors) + codec.encode(tensors, codec.CodecOptions(clusters=5))
if __name__ == "__main__":
    sys.stdout.buffer.write(data)
"""


def test_encoding_is_reproducible():
    """The same tensors and options give the same bytes: here and in another process with another hash seed."""
    here: dict = {"__name__": "here"}
    exec(REPRODUCIBLE, here)
    there = subprocess.run([sys.executable, "-c", REPRODUCIBLE], capture_output=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    assert there == here["data"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(1, 19), min_size=1, max_size=4).filter(lambda s: np.prod(s) <= 3000),
       seed=st.integers(0, 2**32 - 1),
       sparsity=st.floats(0, 1), integer=st.booleans(), tree=st.sampled_from(TREES),
       codebook=st.sampled_from(["off", "on"]), split=st.sampled_from(["never", "always"]),
       search=st.sampled_from(SEARCH_CHOICES))
def test_property_random_tensors(shape, seed, sparsity, integer, tree, codebook, split, search):
    rng = np.random.default_rng(seed)
    array = rng.laplace(0, 3, shape) * (rng.random(shape) >= sparsity)
    array = np.round(array).astype(np.int16) if integer else array.astype(np.float32)
    encoder = EncoderOptions(trees=(tree,), codebook=codebook, split=split, start_depth="auto", zdep="auto",
                             search=search)
    check_round_trip({"t": array}, codec.CodecOptions(bitdepth=4, max_ctu_size=16, encoder=encoder))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(shape=st.lists(st.integers(1, 80), min_size=1, max_size=4).filter(
           lambda s: np.prod(s) < 60000 and (len(s) < 4 or s[2] * s[3] <= 4096)),
       seed=st.integers(0, 2**32 - 1), bitdepth=st.integers(1, 10))
def test_property_random_tensors_automatic_modes(shape, seed, bitdepth):
    rng = np.random.default_rng(seed)
    array = (rng.laplace(0, 1, shape) * (rng.random(shape) < 0.6)).astype(np.float32)
    check_round_trip({"t": array}, codec.CodecOptions(bitdepth=bitdepth))


def test_decode_layer_reads_only_its_own_stream():
    rng = np.random.default_rng(8)
    tensors = {"a": rng.normal(0, 1, (8, 5)).astype(np.float32), "b": rng.normal(0, 1, (4, 4, 3, 3))}
    data = bytearray(codec.encode(tensors, codec.CodecOptions(encoder=FAST)))
    infos, payload = codec.read_index(bytes(data))
    start = payload + infos[0].offset
    data[start:start + infos[0].length] = bytes(infos[0].length)      # wipe layer "a"
    expected = quantised(tensors["b"], codec.CodecOptions())
    np.testing.assert_array_equal(codec.decode_layer(bytes(data), "b")["b"], expected)
    with pytest.raises(codec.CodecError) as error:
        codec.decode_layer(bytes(data), "a")
    assert error.value.context.get("layer") == "a"


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threaded_decode_equals_one_thread_and_names_the_first_bad_layer(threads):
    rng = np.random.default_rng(10)
    tensors = {f"l{i}": np.round(rng.laplace(0, 3, (6, 4, 3, 3))).astype(np.int8) for i in range(5)}
    data = codec.encode(tensors, codec.CodecOptions(encoder=FAST))
    decoded, infos = codec.decode_with_info(data, threads=threads)
    assert list(decoded) == list(tensors) and all(np.array_equal(decoded[k], v) for k, v in tensors.items())
    assert [info.bins for info in infos] == [info.bins for info in codec.decode_with_info(data, threads=1)[1]]
    _, payload = codec.read_index(data)
    broken = bytearray(data)
    for layer in (1, 3):                     # two bad layers: the error is the first one's
        broken[payload + infos[layer].offset + 2] ^= 0xFF
    with pytest.raises(codec.CodecError) as error:
        codec.decode_with_info(bytes(broken), threads=threads)
    assert error.value.context.get("layer") == "l1"


def test_encoding_in_worker_processes_gives_the_same_bytes_and_errors(monkeypatch):
    monkeypatch.setattr(codec.api, "PARALLEL_WEIGHTS", 0)
    rng = np.random.default_rng(11)
    tensors = {f"l{i}": rng.normal(0, 1, (4 + i, 3, 3, 3)).astype(np.float32) for i in range(4)}
    options = codec.CodecOptions(encoder=FAST)
    assert codec.encode_with_info(tensors, options, workers=2)[0] == codec.encode(tensors, options)
    tensors["l2"][0, 0, 0, 0] = np.inf
    with pytest.raises(ValueError) as one:
        codec.encode(tensors, options)
    with pytest.raises(ValueError) as two:
        codec.encode_with_info(tensors, options, workers=2)
    assert str(one.value) == str(two.value) and "'l2'" in str(two.value)


def test_bin_trace_for_rtl_comparison():
    rng = np.random.default_rng(9)
    stream = encode_stream(StreamHeader(integer_input=1, array1d_depth=9), [conv_sublayers(rng)])
    trace: list[tuple[int, int]] = []
    _, _, _, bins = decode_stream(stream.data, trace=trace)
    assert len(trace) == bins + 1 and trace[-1] == (-2, 1)          # the terminating stuffing bin
    assert all(-1 <= ctx < NUM_CONTEXTS and bit in (0, 1) for ctx, bit in trace[:-1])
    assert trace[0][0] == -1                                          # headers are bypass bins
