"""The container file (".nnr", docs/codec.md §3): its header, its index and the reader that checks every field.

    b"AIPUNNR3" | u32 LE index length | u32 LE CRC-32 of the index | index | layer streams

The index is UTF-8 JSON, deflated (raw DEFLATE, RFC 1951): every layer with the ``length`` and CRC-32 of its
stream, its format where it is not chapter 10's, and its tensors (name, dtype, original shape, role; a
pre-quantized tensor's ``quantization``; a DeepCABAC float tensor's ``step``). ``read_index`` checks the header,
the checksum and every field before any stream is touched; ``codec.api`` writes containers and decodes their
layers.
"""
from __future__ import annotations

import json
import math
import reprlib
import struct
import zlib
from dataclasses import dataclass, field

from .errors import CodecError
from .layout import placement
from .protection import MAGIC as PROTECTED_MAGIC
from .quantization import QuantizationError, float32_field, read_entry
from .reference.headers import DEFAULT_LIMITS, DecoderLimits

MAGIC = b"AIPUNNR3"
OLD_MAGICS = (b"AIPUNNR1", b"AIPUNNR2")  # without checksums; with a plain JSON index: refused, re-encode
HEADER = struct.Struct("<8sII")         # magic, index length, CRC-32 of the (deflated) index
MAX_INDEX_BYTES = 1 << 26               # what a deflated index may inflate to
FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")
MAX_NAME_LENGTH = 1024
NAME_RULE = f"a printable string of 1..{MAX_NAME_LENGTH} characters"
FORMATS = ("tai", "deepcabac")          # T/AI 115.1-2021 chapter 10 nnc() streams; DeepCABAC (NNC) payloads


@dataclass
class LayerInfo:
    """One layer of a container: where its stream is, what it holds, what coding it used."""

    name: str
    offset: int                         # from the start of the stream area: the lengths before it
    length: int
    tensors: list[dict]                 # name, dtype, shape, role ("weight" | "bias" | "vector"), [quantization]
    weights: int = 0
    bins: int = 0                       # bins and modes: the encoder's, or counted again by the decoder
    modes: dict[str, int] = field(default_factory=dict)
    crc32: int = 0                      # of the layer stream
    format: str = "tai"                 # one of FORMATS; stored only when not "tai"
    decode_seconds: float | None = None  # set by the decoder, never stored (the file is reproducible)

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.length / self.weights if self.weights else 0.0


def is_valid_name(name: object) -> bool:
    """A tensor or layer name the container can store (the CLI writes the names as .npz members)."""
    return isinstance(name, str) and 1 <= len(name) <= MAX_NAME_LENGTH and name.isprintable()


def role(dim: int, position: int) -> str:
    """A tensor's role in its layer: the weight, the weight's bias, or a 1-D tensor alone."""
    return "weight" if dim != 1 else ("bias" if position else "vector")


def pack_container(index: bytes, streams: bytes) -> bytes:
    """A container from its index (UTF-8 JSON) and the layer streams it describes: the header with the
    deflated index's length and CRC-32, the deflated index, the streams."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    packed = deflate.compress(index) + deflate.flush()
    return HEADER.pack(MAGIC, len(packed), zlib.crc32(packed)) + packed + streams


_LAYER_KEYS = ("name", "length", "crc32", "tensors")
_TENSOR_KEYS = ("name", "dtype", "shape", "role")
_OPTIONAL_TENSOR_KEYS = ("quantization", "step")


def index_entry(info: LayerInfo) -> dict:
    """A layer's index entry: what the reader needs and cannot derive."""
    entry = {key: getattr(info, key) for key in _LAYER_KEYS}
    return entry if info.format == "tai" else {**entry, "format": info.format}


def read_index(data: bytes, limits: DecoderLimits = DEFAULT_LIMITS) -> tuple[list[LayerInfo], int]:
    """The container's layer table and the byte position of the stream area; raises CodecError.

    The header, the index's CRC-32 and every index field are checked here, before any stream is touched;
    a layer stream's CRC-32 is checked when that layer is decoded.
    """
    data = bytes(data)
    if data[:len(MAGIC)] in OLD_MAGICS:
        raise CodecError(f"container format {data[:len(MAGIC)].decode()} has no checksums and is no longer read: "
                         "encode the weights again", bit_position=0)
    if data.startswith(PROTECTED_MAGIC):
        raise CodecError("a protected model (T/AI 115.1-2021 chapter 11): `aipu codec unprotect` it first",
                         bit_position=0)
    if len(data) < HEADER.size or not data.startswith(MAGIC):
        raise CodecError("not an AIPU weight container (bad magic or too short)", bit_position=0)
    _, length, checksum = HEADER.unpack_from(data)
    start = HEADER.size
    if start + length > len(data):
        raise CodecError(f"index length {length} runs past the end of the {len(data)}-byte container",
                         bit_position=8 * len(MAGIC))
    raw = data[start:start + length]
    if zlib.crc32(raw) != checksum:
        raise CodecError("the container index fails its CRC-32 check", bit_position=8 * start)
    index = _parse_json(_inflate(raw, start), start)
    payload = start + length
    try:
        return _layer_table(index, payload, len(data), limits), payload
    except CodecError as error:       # a field check: the position is the index's
        raise error.add_context(bit_position=8 * start)


def index_json(data: bytes) -> bytes:
    """The container's index as the JSON text it inflates to, after the header and checksum checks."""
    data = bytes(data)
    read_index(data)
    _, length, _ = HEADER.unpack_from(data)
    return _inflate(data[HEADER.size:HEADER.size + length], HEADER.size)


def _inflate(raw: bytes, start: int) -> bytes:
    """The deflated index ``raw`` (at byte ``start``) inflated, at most MAX_INDEX_BYTES of it."""
    inflate = zlib.decompressobj(-15)
    try:
        text = inflate.decompress(raw, MAX_INDEX_BYTES)
    except zlib.error as exc:
        raise CodecError(f"the container index is not deflate data: {exc}", bit_position=8 * start) from None
    if inflate.unconsumed_tail or (not inflate.eof and len(text) == MAX_INDEX_BYTES):
        raise CodecError(f"the container index inflates to more than {MAX_INDEX_BYTES} bytes",
                         bit_position=8 * start)
    if not inflate.eof or inflate.unused_data:
        raise CodecError("the container index does not end where its deflate data ends",
                         bit_position=8 * start)
    return text


def _parse_json(raw: bytes, start: int) -> object:
    """The inflated index ``raw`` (deflated at byte ``start``) as JSON; CodecError for anything json cannot read,
    at the index's start (a position inside the inflated text names no byte of the file)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CodecError(f"the container index is not UTF-8: {exc.reason} at its character {exc.start}",
                         bit_position=8 * start) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CodecError(f"the container index is not JSON: {exc.msg} at its character {exc.pos}",
                         bit_position=8 * start) from None
    except (ValueError, RecursionError) as exc:    # an integer of over 4300 digits; nesting deeper than the stack
        raise CodecError(f"the container index cannot be read: {reprlib.repr(str(exc))}",
                         bit_position=8 * start) from None


def _bad_field(where: str, value: object, expected: str) -> CodecError:
    return CodecError(f"container index: {where} = {reprlib.repr(value)}, expected {expected}")


def _check_keys(entry: object, keys: tuple[str, ...], where: str, optional: tuple[str, ...] = ()) -> dict:
    if not isinstance(entry, dict) or not set(keys) <= set(entry) <= set(keys + optional):
        also = f" (and optionally {', '.join(optional)})" if optional else ""
        raise _bad_field(where, entry, "an object with exactly the keys " + ", ".join(keys) + also)
    return entry


def _integer_field(entry: dict, key: str, where: str, low: int, high: int) -> int:
    value = entry[key]
    if type(value) is not int or not low <= value <= high:     # type(): a bool is not a count
        raise _bad_field(f"{where}.{key}", value, f"an integer in {low}..{high}")
    return value


def _new_name(entry: dict, where: str, seen: set[str]) -> str:
    name = entry["name"]
    if not is_valid_name(name):
        raise _bad_field(f"{where}.name", name, NAME_RULE)
    if name in seen:
        raise _bad_field(f"{where}.name", name, "a name not used before in the container")
    seen.add(name)
    return name


def _tensor_entry(entry: object, where: str, position: int, names: set[str]) -> tuple[dict, int]:
    """One tensor of the index, checked field by field; returns it and its number of weights."""
    tensor = _check_keys(entry, _TENSOR_KEYS, where, _OPTIONAL_TENSOR_KEYS)
    _new_name(tensor, where, names)
    if not isinstance(tensor["dtype"], str) or tensor["dtype"] not in FLOAT_DTYPES + INT_DTYPES:
        raise _bad_field(f"{where}.dtype", tensor["dtype"], "one of " + ", ".join(FLOAT_DTYPES + INT_DTYPES))
    shape = tensor["shape"]
    if not isinstance(shape, list) or any(type(n) is not int for n in shape):
        raise _bad_field(f"{where}.shape", shape, "a list of integers")
    try:
        place = placement(shape)
    except ValueError as exc:
        raise CodecError(f"container index: {where}.shape: {exc}") from None
    if tensor["role"] != role(place.dim, position):
        raise _bad_field(f"{where}.role", tensor["role"], repr(role(place.dim, position)))
    if "quantization" in tensor:
        read_entry(tensor["quantization"], f"container index: {where}", tensor["dtype"], shape)
    if "step" in tensor:
        try:
            float32_field(f"container index: {where}", "step", tensor["step"], (1,))
        except QuantizationError as error:
            raise _bad_field(f"{where}.{error.field}", error.value, error.expected) from None
    return tensor, math.prod(shape)


def _check_format(entry: dict, where: str) -> str:
    """A layer's format, and its tensors against it: a DeepCABAC layer holds one tensor, with a step if it is
    float; a chapter-10 layer's steps are in its stream."""
    layer_format = entry.get("format", "tai")
    if layer_format != "deepcabac":      # "tai" is never written: absent means chapter 10
        if "format" in entry:
            raise _bad_field(f"{where}.format", layer_format, "'deepcabac' (chapter 10 is written without one)")
        if any("step" in tensor for tensor in entry["tensors"]):
            raise _bad_field(f"{where}.tensors", entry["tensors"], "no step in a chapter-10 layer")
        return "tai"
    if len(entry["tensors"]) != 1:
        raise _bad_field(f"{where}.tensors", entry["tensors"], "one tensor in a DeepCABAC layer")
    tensor = entry["tensors"][0]
    if ("step" in tensor) != (tensor["dtype"] in FLOAT_DTYPES):
        raise _bad_field(f"{where}.tensors[0]", tensor, "a step if and only if the tensor is float")
    return layer_format


def _layer_table(index: object, payload: int, size: int, limits: DecoderLimits) -> list[LayerInfo]:
    """The index's layers, every field checked (types, ranges, names, shapes, streams tiling the payload)."""
    layers = _check_keys(index, ("layers",), "index")["layers"]
    if not isinstance(layers, list):
        raise _bad_field("layers", layers, "a list")
    infos: list[LayerInfo] = []
    layer_names: set[str] = set()
    tensor_names: set[str] = set()
    offset = total = 0
    for i, item in enumerate(layers):
        where = f"layers[{i}]"
        entry = _check_keys(item, _LAYER_KEYS, where, ("format",))
        name = _new_name(entry, where, layer_names)
        if not isinstance(entry["tensors"], list) or not 1 <= len(entry["tensors"]) <= 2:
            raise _bad_field(f"{where}.tensors", entry["tensors"], "a list of one or two tensors")
        tensors, weights = [], 0
        for j, tensor in enumerate(entry["tensors"]):
            checked, count = _tensor_entry(tensor, f"{where}.tensors[{j}]", j, tensor_names)
            tensors.append(checked)
            weights += count
        total += weights
        if total > limits.max_weights_per_container:
            raise CodecError(f"container index: the layers hold more than the decoder limit of "
                             f"{limits.max_weights_per_container} weights")
        length = _integer_field(entry, "length", where, 1, size)
        if payload + offset + length > size:
            raise CodecError(f"container index: {where}: stream [{offset}, +{length}] runs past the end of the file",
                             bit_position=8 * (payload + offset))
        infos.append(LayerInfo(name=name, offset=offset, length=length, tensors=tensors, weights=weights,
                               crc32=_integer_field(entry, "crc32", where, 0, (1 << 32) - 1),
                               format=_check_format(entry, where)))
        offset += length
    if payload + offset != size:
        raise CodecError(f"{size - payload - offset} bytes after the last layer stream",
                         bit_position=8 * (payload + offset))
    return infos
