"""Bad input never crashes, hangs or allocates without bound: it raises CodecError saying where.

Every case runs in a ``Sandbox`` (tests/codec/sandbox.py): a forked child process under an address-space
limit, which the test kills when a case takes too long. A hang, a runaway allocation, a crash, or any
exception other than a CodecError with a bit position inside the input fails the test and shows the input
in hex; the machine never notices.

The inputs:
* random bytes, truncations and bit flips of a valid stream;
* structured streams (``RandomElements``): stream and layer headers drawn by hypothesis with their edge
  values, then random element values that the decoder's own path through the syntax asks for, coded
  exactly, cut off after a random number of elements and followed by random bytes; this is the class of
  input that found the zero-extent hang of issue 6;
* every one-byte corruption and every truncation of a container, and index mutations with a recomputed CRC,
  also aimed at the quantization entries of a container of pre-quantized tensors;
* the crafted inputs of issue 6, through the library and through ``aipu codec decode|info``.

The default suite runs a derandomized quick subset; ``-m slow`` runs the long random versions.
"""
from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import random
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from aipu import codec
from aipu.codec.api import decode_stream
from aipu.codec.container import HEADER, MAGIC, MAX_INDEX_BYTES, index_json, pack_container
from aipu.codec.encoder import EncoderOptions, encode_stream
from aipu.codec.errors import CodecError
from aipu.codec.reference.element_coder import ElementWriter
from aipu.codec.reference.elements import element_spec
from aipu.codec.reference.engine import AecEncoder
from aipu.codec.reference.headers import StreamHeader, Sublayer, code_nnc_header
from aipu.codec.reference.nnc import code_nnc
from tests.sandbox import Sandbox, run_case, run_cli

QUICK = settings(max_examples=100, derandomize=True, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow])
LONG = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------------------------- the sandbox
@pytest.fixture(scope="module")
def sandbox():
    """One sandbox per module, forked after the numba code is loaded (a cold cache takes seconds per function)."""
    _compile_every_tree()
    box = Sandbox()
    yield box
    box.close()


def _attempt(decode) -> tuple:
    """('decoded', digest of the parts ``decode`` yields) or ('error', reason, bit position, message); any
    other exception propagates. Arrays are hashed in place: a legitimate sublayer may hold 256 MiB."""
    digest = hashlib.sha256()
    try:
        for part in decode():
            digest.update(part if isinstance(part, np.ndarray) else repr(part).encode())
    except CodecError as error:
        return ("error", error.reason, error.bit_position, str(error))
    return ("decoded", digest.hexdigest())


def _stream_parts(data: bytes, reference: bool, strict: bool = False):
    """What decode_stream returns, with the mode statistics in one order (the decoders count in their own)."""
    header, layers, stats, bins = decode_stream(data, reference=reference, strict=strict)
    yield header, [sorted(counts.items()) for counts in stats], bins
    for sub in (sub for layer in layers for sub in layer):
        yield sub.dim, sub.shape, sub.step
        yield np.ascontiguousarray(sub.levels)


def decode_stream_both(data: bytes, strict: bool = False) -> tuple:
    """Child side: both decoders' outcomes, one after the other."""
    return tuple(_attempt(lambda reference=reference: _stream_parts(data, reference, strict))
                 for reference in (False, True))


def _container_parts(data: bytes):
    for name, array in sorted(codec.decode(data).items()):
        yield name, array.dtype.name, array.shape
        yield np.ascontiguousarray(array)


def decode_container(data: bytes) -> tuple:
    """Child side: the container decode's outcome."""
    return _attempt(lambda: _container_parts(data))


def assert_located(result: tuple, data: bytes) -> None:
    """An error result carries a bit position inside the input."""
    if result[0] == "error":
        position = result[2]
        assert position is not None and 0 <= position <= 8 * len(data), f"{result[3]}\ninput: {data.hex()}"


def check_stream(sandbox: Sandbox, data: bytes, strict: bool = False) -> tuple:
    """Both decoders give the same levels, or both a located CodecError (at one position for one reason)."""
    fast, reference = run_case(sandbox, functools.partial(decode_stream_both, strict=strict), data)
    assert fast[0] == reference[0] and (fast[0] == "error" or fast == reference), \
        f"fast {fast[:2]}, reference {reference[:2]}\ninput: {data.hex()}"
    if fast[0] == "error":
        assert_located(fast, data)
        assert_located(reference, data)
        if fast[1] == reference[1]:
            assert fast[2] == reference[2], f"{fast[3]} / {reference[3]}\ninput: {data.hex()}"
    return fast


def check_container(sandbox: Sandbox, data: bytes) -> tuple:
    result = run_case(sandbox, decode_container, data)
    assert_located(result, data)
    return result


# --------------------------------------------------------------------------------------------- seeds
# Built on first use, so that collecting the suite encodes nothing.
@functools.cache
def valid_stream() -> bytes:
    rng = np.random.default_rng(0)
    levels = np.round(rng.laplace(0, 4, (9, 12, 10))).astype(np.int64)
    subs = [Sublayer(dim=4, shape=(3, 3, 12, 10), levels=levels, include_bias_array1d=1),
            Sublayer(dim=1, shape=(1, 1, 1, 10), cmaxw=1, levels=rng.integers(-9, 9, 10))]
    options = EncoderOptions(trees=("octree", "uni_tagtree"), split="auto", codebook="auto", search="cu")
    return encode_stream(StreamHeader(integer_input=1, array1d_depth=5), [subs], options).data



def _compile_every_tree() -> None:
    """Compile or load the numba decoder before the sandbox forks (a cold cache takes seconds per function)."""
    levels = np.arange(-6, 6).reshape(1, 3, 4)
    for tree in ("octree", "unitree", "tagtree", "uni_tagtree"):
        for codebook in ("off", "on"):
            options = EncoderOptions(trees=(tree,), codebook=codebook, split="never", start_depth="root")
            sub = Sublayer(dim=2, shape=(1, 1, 3, 4), levels=levels)
            decode_stream(encode_stream(StreamHeader(integer_input=1), [[sub]], options).data)
    codec.decode(deepcabac_container())


@functools.cache
def valid_container() -> bytes:
    return codec.encode({"conv.weight": np.random.default_rng(1).normal(0, 1, (6, 4, 3, 3)),
                         "conv.bias": np.arange(6, dtype=np.float32),
                         "q": np.arange(-20, 20, dtype=np.int8).reshape(5, 8)},
                        codec.CodecOptions(encoder=EncoderOptions(split="never")))


def index_end() -> int:
    """Where the valid container's index ends and its layer streams begin."""
    return HEADER.size + HEADER.unpack_from(valid_container())[1]


@functools.cache
def valid_index() -> dict:
    """The valid container's index; shared, so a test copies it before changing it."""
    return json.loads(index_json(valid_container()))


def valid_streams() -> bytes:
    return valid_container()[index_end():]


def container_with(index: object, streams: bytes | None = None) -> bytes:
    """A container whose index is ``index`` (an object, or raw JSON text) with a correct CRC, and the valid
    container's layer streams unless ``streams`` are given."""
    raw = index.encode() if isinstance(index, str) else json.dumps(index, separators=(",", ":")).encode()
    return pack_container(raw, valid_streams() if streams is None else streams)


def test_the_fuzz_seeds_decode(sandbox):
    assert check_stream(sandbox, valid_stream())[0] == "decoded"
    assert check_container(sandbox, valid_container())[0] == "decoded"
    assert container_with(valid_index()) == valid_container()


# --------------------------------------------------------------------------------------------- raw streams
@QUICK
@given(data=st.binary(max_size=300))
def test_random_bytes(sandbox, data):
    check_stream(sandbox, data)


def test_truncations_of_a_stream(sandbox):
    stream = valid_stream()
    for cut in range(0, len(stream), 3):
        assert check_stream(sandbox, stream[:cut])[0] == "error"


@QUICK
@given(flips=st.deferred(lambda: st.lists(st.integers(0, 8 * len(valid_stream()) - 1), min_size=1, max_size=4)))
def test_bit_flipped_stream(sandbox, flips):
    data = bytearray(valid_stream())
    for bit in flips:
        data[bit // 8] ^= 0x80 >> (bit % 8)
    check_stream(sandbox, bytes(data))


def test_empty_inputs_and_trailing_garbage(sandbox):
    assert check_stream(sandbox, b"")[0] == "error"
    assert check_stream(sandbox, valid_stream() + b"\x00") == check_stream(sandbox, valid_stream())
    assert check_stream(sandbox, valid_stream() + b"\x00", strict=True)[1].endswith("after the end of the stream")
    assert "magic" in check_container(sandbox, b"")[1]


# --------------------------------------------------------------------------------------------- structured streams
class _Enough(Exception):
    """The element budget of a structured stream is spent."""


def _random_value(rng: random.Random, name: str, inputs: dict[str, int]) -> int:
    """A value the element can code: small mostly, the largest now and then."""
    spec = element_spec(name)
    if spec.binarization == "FL":
        length = spec.fixed_length if spec.fixed_length is not None else inputs["length"]
        if length > 1 and rng.random() < 0.7:
            return rng.randint(0, min(12, (1 << length) - 1))
        return rng.getrandbits(length)
    if spec.binarization == "U":
        return min(inputs["max_value"], int(rng.expovariate(0.7)))
    if rng.random() < 0.03:
        return rng.getrandbits(rng.randint(1, 32))
    return int(rng.expovariate(0.3))


class RandomElements:
    """An ElementIO that takes the decoder's path through the syntax (``decoding``) but invents each value
    (header elements from ``plan`` first) and codes it, so the stream decodes to exactly these elements.
    After ``budget`` elements it stops."""

    decoding = True

    def __init__(self, plan: dict[str, list[int]], seed: int, budget: int):
        self.plan = {name: list(values) for name, values in plan.items()}
        self.rng = random.Random(seed)
        self.budget = budget
        self.writer = ElementWriter(AecEncoder())

    def code(self, name: str, value: int = 0, **inputs: int) -> int:
        if not self.budget:
            raise _Enough
        self.budget -= 1
        queue = self.plan.get(name)
        return self.writer.code(name, queue.pop(0) if queue else _random_value(self.rng, name, inputs), **inputs)


def structured_stream(case: tuple) -> bytes:
    """Child side: the stream of a (plan, seed, budget, tail) case; the syntax stops at its own checks."""
    plan, seed, budget, tail = case
    source = RandomElements(plan, seed, budget)
    with contextlib.suppress(CodecError, _Enough):
        code_nnc(source)
    return source.writer.engine.finish() + tail


# Header elements with the values worth reaching, as weighted choices: typical values (first: hypothesis
# shrinks towards them) most of the time, the edges now and then (zero extents, the decoder limits, the
# largest field values).
SMALL = list(range(1, 13))
HEADER_VALUES = {
    "integer_input": [1, 0],
    "total_trainable_layer": [1] * 5 + [2, 2, 0, 3],
    "enable_escape_reorder": [1, 0],
    "enable_zdep_reorder": [1, 0],
    "enable_max_ctu3d_size": [0, 1],
    "max_ctu3d_idx": [0, 1, 2, 3],
    "array1d_depth": list(range(32)),
    "total_sublayer": [1] * 4 + [2] * 3 + [0, 3, 15],
    "sublayer_cmaxw": list(range(20)) + [255, 1000, 1 << 20, (1 << 32) - 1],
    "sublayer_dim": [0, 2, 3, 1],
    "sublayer_shape": SMALL * 4 + [0, 16, 63, 64, 65, 300, 4096, 4097, 65535],
    "include_bias_array1d": [0, 1],
    "sublayer_scan_order": [0, 1],
    "sublayer_bitdepth": SMALL * 2 + [0, 31],
}
# One value per field and sublayer (a few spare): a field the plan runs out of gets random values.
PLANS = st.fixed_dictionaries({name: st.lists(st.sampled_from(values), min_size=4 if name == "sublayer_shape" else 1,
                                              max_size=12)
                               for name, values in HEADER_VALUES.items()})


def structured_cases(max_budget: int, max_tail: int):
    """(plan, seed, element budget, tail bytes); the budget gets past the headers (random bytes cut them)."""
    return st.tuples(PLANS, st.integers(0, 2**64 - 1), st.integers(30, max_budget), st.binary(max_size=max_tail))


ONE_LAYER = {"total_trainable_layer": [1], "total_sublayer": [1], "sublayer_dim": [0], "integer_input": [1]}


@QUICK
@given(case=structured_cases(max_budget=300, max_tail=32))
@example(case=({**ONE_LAYER, "sublayer_shape": [0, 3, 8, 8]}, 1, 300, b""))        # issue 6: R = 0 hung
@example(case=({**ONE_LAYER, "sublayer_shape": [3, 0, 8, 8], "enable_max_ctu3d_size": [1]}, 2, 300, b""))
def test_structured_streams(sandbox, case):
    check_stream(sandbox, run_case(sandbox, structured_stream, case))


def test_structured_streams_reach_the_trees(sandbox):
    """The generator goes deep: some streams decode whole sublayers, others fail inside the CTUs."""
    plan = {"total_trainable_layer": [1], "total_sublayer": [1], "sublayer_dim": [2], "sublayer_shape": [9, 20],
            "sublayer_bitdepth": [8], "integer_input": [1]}
    results = [check_stream(sandbox, run_case(sandbox, structured_stream, (plan, seed, 100_000, b"")))
               for seed in range(30)]
    assert any(r[0] == "decoded" for r in results)
    assert any(r[0] == "error" and "ctu" in r[3] for r in results)


# --------------------------------------------------------------------------------------------- crafted headers
def crafted_stream(shape: tuple[int, int, int, int], header: StreamHeader = StreamHeader(integer_input=1),
                   sublayers: int = 1, cmaxw: int = 0, bitdepth: int = 8, tail: bytes = bytes(16)) -> bytes:
    """nnc_header and a layer of ``sublayers`` dim-4 sublayers claiming ``shape``, ``cmaxw`` and ``bitdepth``,
    element by element (the encoder itself refuses what these claim), then ``tail``."""
    writer = ElementWriter(AecEncoder())
    code_nnc_header(writer, header, 1)
    writer.code("total_sublayer", sublayers)
    for index in range(sublayers):
        writer.code("sublayer_cmaxw", cmaxw)
        writer.code("sublayer_dim", 0)
        for extent in shape:
            writer.code("sublayer_shape", extent)
        if index + 1 < sublayers:
            writer.code("include_bias_array1d", 0)
        writer.code("sublayer_scan_order", 0)
        writer.code("sublayer_bitdepth", bitdepth)
    return writer.engine.finish() + tail


ZERO_EXTENTS = [(0, 3, 8, 8), (3, 0, 8, 8), (3, 3, 0, 8), (3, 3, 8, 0), (0, 0, 0, 0), (0, 3, 65535, 65535)]


@pytest.mark.parametrize("max_ctu3d_size", [0, 1])
@pytest.mark.parametrize("shape", ZERO_EXTENTS)
def test_a_zero_extent_is_refused(sandbox, shape, max_ctu3d_size):
    """Issue 6: R or S = 0 looped forever in tree_shapes; with enable_max_ctu3d_size, a division by zero."""
    header = StreamHeader(integer_input=1, enable_max_ctu3d_size=max_ctu3d_size)
    data = crafted_stream(shape, header)
    result = check_stream(sandbox, data)
    assert result[0] == "error" and result[1] == f"sublayer_shape {shape} has a zero extent"
    assert "element sublayer_shape" in result[3] and "layer 0" in result[3]


@pytest.mark.parametrize("shape,sublayers,limit", [
    ((65535, 65535, 65535, 65535), 1, "exceeds the decoder limits"), ((1, 1, 65535, 65535), 1, "decoder limits"),
    ((4097, 1, 8, 8), 1, "decoder limits"), ((1, 1, 4096, 8192), 3, "per stream")])
def test_absurd_shapes_are_refused_before_allocating(sandbox, shape, sublayers, limit):
    result = check_stream(sandbox, crafted_stream(shape, sublayers=sublayers))
    assert result[0] == "error" and limit in result[1] and "element sublayer_shape" in result[3]


def test_bad_header_values(sandbox):
    writer = ElementWriter(AecEncoder())
    code_nnc_header(writer, StreamHeader(), 1)
    writer.code("total_sublayer", 0)
    assert "total_sublayer" in check_stream(sandbox, writer.engine.finish())[1]
    float_header = StreamHeader(integer_input=0)
    assert "zero step" in check_stream(sandbox, crafted_stream((1, 1, 2, 2), float_header, cmaxw=5, bitdepth=0))[1]


def encode_tensor(shape: tuple[int, ...]) -> bytes:
    """Child side: encode one tensor of ``shape``."""
    return codec.encode({"w": np.zeros(shape, dtype=np.float32)})


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 3, 3), (8, 4, 0, 3), (2, 3, 4, 0, 5)])
def test_the_encoder_refuses_a_zero_dimension(sandbox, shape):
    """Issue 6: the encoder ran out of memory in the same loop."""
    outcome = sandbox.run(encode_tensor, shape)
    assert outcome[0] == "raised" and outcome[1].startswith(f"ValueError: tensor 'w': tensor shape {shape}")
    assert "empty tensors cannot be coded" in outcome[1]


# --------------------------------------------------------------------------------------------- containers
@pytest.mark.parametrize("container_format", ["tai", "deepcabac"])
def test_every_byte_of_a_container_is_checked(sandbox, container_format):
    """Any one-byte change, any truncation and any appended byte is a located CodecError (the CRCs)."""
    container = valid_container() if container_format == "tai" else deepcabac_container()
    for position in range(len(container)):
        for change in (0x01, 0x80, 0xFF):
            data = bytearray(container)
            data[position] ^= change
            assert check_container(sandbox, bytes(data))[0] == "error"
    for cut in range(len(container)):
        assert check_container(sandbox, container[:cut])[0] == "error"
    assert check_container(sandbox, container + b"\x00")[1] == "1 bytes after the last layer stream"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from([0, -1, 1, 2**31, 2**32, 2**63, 10**40]) |
    st.floats(allow_nan=False) | st.text(max_size=6) | st.sampled_from(["", "int8", "uint8", "float16", "conv.bias"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=6)


def _paths(value: object, path: tuple = ()) -> list[tuple]:
    """Every path into a JSON value (dict keys and list indices), the root included."""
    paths = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            paths += _paths(child, path + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            paths += _paths(child, path + (index,))
    return paths


@functools.cache
def index_paths() -> list[tuple]:
    return _paths(valid_index())


@st.composite
def mutated_indexes(draw, base=valid_index, paths=lambda: index_paths()[1:], values=JSON_VALUES):
    """The index ``base()`` with one value at one of ``paths()`` replaced, its key removed or a key added."""
    index = json.loads(json.dumps(base()))
    path = draw(st.sampled_from(paths()))
    parent = index
    for key in path[:-1]:
        parent = parent[key]
    action = draw(st.sampled_from(["replace", "remove", "add"]))
    if action == "replace":
        parent[path[-1]] = draw(values)
    elif action == "remove":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(st.text(max_size=4))] = draw(values)
    else:
        parent.insert(path[-1], draw(values))
    return index


@QUICK
@given(index=mutated_indexes())
def test_index_mutations(sandbox, index):
    """A crafted index with a correct CRC: every field is checked (decoding it unchanged is allowed too)."""
    check_container(sandbox, container_with(index))


@functools.cache
def quantized_container() -> bytes:
    """Pre-quantized tensors: uint8 per output channel with its int32 bias, int8 per tensor without scale."""
    rng = np.random.default_rng(2)
    tensors = {"w": rng.integers(0, 256, (4, 3, 3, 3)).astype(np.uint8),
               "b": rng.integers(-900, 900, 4).astype(np.int32), "q": np.arange(-20, 20, dtype=np.int8).reshape(5, 8)}
    quantization = {"w": codec.QuantParams(np.array([120, 128, 130, 255]), np.float32([0.5, 0.25, 1e-3, 3]), 0),
                    "b": codec.QuantParams(np.zeros(4, np.int64), np.float32([0.1, 0.2, 0.3, 0.4]), 0),
                    "q": codec.QuantParams(np.array([-3]))}
    return codec.encode(tensors, codec.CodecOptions(encoder=EncoderOptions(split="never")), [("w", "b"), ("q", None)],
                        quantization)


@functools.cache
def quantized_index() -> dict:
    return json.loads(index_json(quantized_container()))


@functools.cache
def quantization_paths() -> list[tuple]:
    """Every path into the quantized container's quantization entries, the entries themselves included."""
    return [path for path in _paths(quantized_index()) if "quantization" in path]


# Values a quantization entry must refuse or take: float32's edges, NaN and the infinities, the dtypes' ranges.
QUANTIZATION_VALUES = JSON_VALUES | st.sampled_from(
    [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-45, 3.4028234663852886e38, 3.5e38, 0.1, 0.5, -128,
     127, 128, 255, 256, 65535, 2**31 - 1, -2**31, 3, 4, -1]).flatmap(
    lambda value: st.sampled_from([value, [value], [value] * 4, [value] * 5]))


def quantized_streams() -> bytes:
    return quantized_container()[HEADER.size + HEADER.unpack_from(quantized_container())[1]:]


@QUICK
@given(index=mutated_indexes(quantized_index, quantization_paths, QUANTIZATION_VALUES))
def test_quantization_entry_mutations(sandbox, index):
    """Every malformed quantization entry is a located CodecError (a valid change may decode)."""
    check_container(sandbox, container_with(index, quantized_streams()))


@functools.cache
def deepcabac_container() -> bytes:
    """DeepCABAC layers: a float conv weight and its bias, an int8 tensor, a pre-quantized uint8 one."""
    rng = np.random.default_rng(3)
    tensors = {"conv.weight": rng.normal(0, 1, (6, 4, 3, 3)).astype(np.float32),
               "conv.bias": np.arange(6, dtype=np.float32), "q": np.arange(-20, 20, dtype=np.int8).reshape(5, 8),
               "u": rng.integers(0, 256, (4, 9)).astype(np.uint8)}
    quantization = {"u": codec.QuantParams(np.array([128]), np.float32([0.02]))}
    return codec.encode(tensors, codec.CodecOptions(format="deepcabac"), quantization=quantization)


@functools.cache
def deepcabac_index() -> dict:
    return json.loads(index_json(deepcabac_container()))


def deepcabac_streams() -> bytes:
    return deepcabac_container()[HEADER.size + HEADER.unpack_from(deepcabac_container())[1]:]


# Values a DeepCABAC layer must refuse or take: formats, steps (base64 float32) and the quantization values.
DEEPCABAC_VALUES = QUANTIZATION_VALUES | st.sampled_from(
    ["deepcabac", "tai", "DeepCABAC", "AACAPw==", "AAAAAA==", "AADAfw==", "AACAPwAAgD8=", "AACA", "float32", "int8"])


@QUICK
@given(index=mutated_indexes(deepcabac_index, lambda: _paths(deepcabac_index())[1:], DEEPCABAC_VALUES))
def test_deepcabac_index_mutations(sandbox, index):
    """A DeepCABAC container's index with a field changed: every malformed format, step or tensor list is a
    located CodecError (a valid change may decode)."""
    check_container(sandbox, container_with(index, deepcabac_streams()))


def _layer(changes: dict, layer: int = 0, tensor: int | None = None) -> dict:
    index = json.loads(json.dumps(valid_index()))
    target = index["layers"][layer] if tensor is None else index["layers"][layer]["tensors"][tensor]
    for key, value in changes.items():
        if value is None:
            del target[key]
        else:
            target[key] = value
    return index


def _quantization(**changes) -> bytes:
    """The quantized container with fields of its first tensor's quantization entry changed."""
    index = json.loads(json.dumps(quantized_index()))
    index["layers"][0]["tensors"][0]["quantization"].update(changes)
    return container_with(index, quantized_streams())


def _zero_extent_container(max_ctu3d_size: int) -> bytes:
    """The index claims a valid 8x3x3x3 weight; its stream's header claims R = 0 (issue 6)."""
    stream = crafted_stream((0, 3, 3, 8), StreamHeader(integer_input=1, enable_max_ctu3d_size=max_ctu3d_size),
                            tail=b"")
    index = {"layers": [{"name": "w", "length": len(stream), "crc32": zlib.crc32(stream),
                         "tensors": [{"name": "w", "dtype": "int8", "shape": [8, 3, 3, 3], "role": "weight"}]}]}
    return container_with(index, stream)


def _deflated(text: bytes) -> bytes:
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    return deflate.compress(text) + deflate.flush()


def _raw_index(packed: bytes) -> bytes:
    """A container whose index bytes are ``packed`` as they stand (a correct length and CRC-32)."""
    return HEADER.pack(MAGIC, len(packed), zlib.crc32(packed)) + packed + valid_streams()


def _flipped(position: int) -> bytes:
    data = bytearray(valid_container())
    data[position] ^= 0x04
    return bytes(data)


def _int_layer() -> int:
    return next(i for i, layer in enumerate(valid_index()["layers"]) if layer["tensors"][0]["dtype"] == "int8")


# Issue 6's inputs, each built on use, with the words of its one-line error.
CRAFTED_CONTAINERS = {
    "zero R": (lambda: _zero_extent_container(0), "has a zero extent"),
    "zero R, max CTU size": (lambda: _zero_extent_container(1), "has a zero extent"),
    "no layer name": (lambda: container_with(_layer({"name": None})), "layers[0] = "),
    "length x": (lambda: container_with(_layer({"length": "x"})), "layers[0].length = 'x'"),
    "old keys": (lambda: container_with(_layer({"offset": 0})), "exactly the keys name, length, crc32, tensors"),
    "huge shape": (lambda: container_with(_layer({"shape": [10**30, 3]}, tensor=0)), "exceeds the 16-bit"),
    "zero shape": (lambda: container_with(_layer({"shape": [6, 0, 3, 3]}, tensor=0)), "empty tensors cannot be coded"),
    "no layers": (lambda: container_with({"layers": []}), "bytes after the last layer stream"),
    "silent cast": (lambda: container_with(_layer({"dtype": "uint8"}, _int_layer(), 0)), "outside the range of uint8"),
    "integer as float": (lambda: container_with(_layer({"dtype": "float32"}, _int_layer(), 0)), "integer_input 1"),
    "duplicate name": (lambda: container_with(_layer({"name": "conv.bias"}, _int_layer(), 0)), "not used before"),
    "flipped index": (lambda: _flipped(HEADER.size + 5),
                     "the container index fails its CRC-32"),
    "flipped stream": (lambda: _flipped(len(valid_container()) - 3), "the layer stream fails its CRC-32 check"),
    "deep JSON": (lambda: container_with('{"layers": ' + "[" * 100_000 + "]" * 100_000 + "}"), "cannot be read"),
    "huge number": (lambda: container_with('{"layers": [' + "9" * 5000 + "]}"), "cannot be read"),
    "not JSON": (lambda: container_with('{"layers": [}'), "is not JSON"),
    "not UTF-8": (lambda: pack_container(b'{"layers": ["\xff"]}', valid_streams()), "is not UTF-8"),
    "version 1": (lambda: b"AIPUNNR1" + valid_container()[len(MAGIC):], "no longer read"),
    "version 2": (lambda: b"AIPUNNR2" + valid_container()[len(MAGIC):], "no longer read"),
    "protected": (lambda: b"AIPUNNRP" + valid_container()[len(MAGIC):], "`aipu codec unprotect` it first"),
    "not deflate": (lambda: _raw_index(b"\xff\xff\xff\xff"), "is not deflate data"),
    "deflate and more": (lambda: _raw_index(_deflated(b'{"layers":[]}') + b"x"), "does not end where"),
    "truncated deflate": (lambda: _raw_index(_deflated(b'{"layers":[]}')[:-2]), "does not end where"),
    "deflate bomb": (lambda: _raw_index(_deflated(b" " * (MAX_INDEX_BYTES + 1))), "inflates to more than"),
    "NaN scale": (lambda: _quantization(scale=base64.b64encode(np.full(4, np.nan, "<f4").tobytes()).decode()),
                  "quantization.scale[0] = nan"),
    "scale list": (lambda: _quantization(scale=[0.5] * 4), "expected base64 of little-endian float32"),
    "zero point wraps": (lambda: _quantization(zero_point=[255] * 4), "zero point is outside the range of uint8"),
}


@pytest.mark.parametrize("name", CRAFTED_CONTAINERS)
def test_crafted_containers(sandbox, name):
    build, words = CRAFTED_CONTAINERS[name]
    result = check_container(sandbox, build())
    assert result[0] == "error" and words in result[3], result


def test_a_stream_error_counts_from_the_container_start(sandbox):
    """A corrupt layer stream behind a matching CRC: the position lies inside that layer's bytes."""
    index = json.loads(json.dumps(valid_index()))
    layer = index["layers"][-1]
    offset = sum(entry["length"] for entry in index["layers"][:-1])
    streams = bytearray(valid_streams())
    streams[offset + 3] ^= 0xFF
    layer["crc32"] = zlib.crc32(streams[offset:offset + layer["length"]])
    data = container_with(index, bytes(streams))
    result = check_container(sandbox, data)
    assert result[0] == "error" and f"layer {layer['name']}" in result[3]
    assert 8 * (index_end() + offset) <= result[2] <= 8 * len(data)


@pytest.mark.parametrize("command", ["decode", "info"])
def test_crafted_containers_through_the_cli(sandbox, tmp_path, command):
    """`aipu codec decode|info` print one line naming the error, its position and the file, and exit 2."""
    for name, (build, words) in CRAFTED_CONTAINERS.items():
        path = tmp_path / "crafted.nnr"
        path.write_bytes(build())
        argv = ["codec", command, str(path)] + (["-o", str(tmp_path / "out.npz")] if command == "decode" else [])
        code, _, err = run_case(sandbox, run_cli, argv)
        assert code == 2 and err.count("\n") == 1 and err.startswith("aipu codec: error: "), (name, err)
        assert words in err and "bit " in err and f"file {path}" in err, (name, err)


# --------------------------------------------------------------------------------------------- long runs
@pytest.mark.slow
@LONG
@given(data=st.binary(min_size=20, max_size=3000),
       flips=st.deferred(lambda: st.lists(st.integers(0, 8 * len(valid_stream()) - 1), max_size=12)))
def test_long_random_and_flipped_streams(sandbox, data, flips):
    check_stream(sandbox, data)
    flipped = bytearray(valid_stream())
    for bit in flips:
        flipped[bit // 8] ^= 0x80 >> (bit % 8)
    check_stream(sandbox, bytes(flipped))


@pytest.mark.slow
@LONG
@given(case=structured_cases(max_budget=5000, max_tail=400))
def test_long_structured_streams(sandbox, case):
    check_stream(sandbox, run_case(sandbox, structured_stream, case))


@pytest.mark.slow
@LONG
@given(index=mutated_indexes(quantized_index, quantization_paths, QUANTIZATION_VALUES))
def test_long_quantization_entry_mutations(sandbox, index):
    check_container(sandbox, container_with(index, quantized_streams()))


@pytest.mark.slow
@LONG
@given(index=mutated_indexes(deepcabac_index, lambda: _paths(deepcabac_index())[1:], DEEPCABAC_VALUES))
def test_long_deepcabac_index_mutations(sandbox, index):
    check_container(sandbox, container_with(index, deepcabac_streams()))


@pytest.mark.slow
@LONG
@given(index=mutated_indexes(), position=st.deferred(lambda: st.integers(0, len(valid_container()) - 1)),
       value=st.integers(0, 255))
def test_long_index_mutations_and_overwritten_bytes(sandbox, index, position, value):
    check_container(sandbox, container_with(index))
    data = bytearray(valid_container())
    data[position] = value
    check_container(sandbox, bytes(data))
