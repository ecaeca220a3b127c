"""Library API of the weight codec: tensors in, bytes out, and back.

Container (".nnr", docs/codec.md): the standard defines only the ``nnc()`` payload, without names or
framework layouts, so the codec wraps one ``nnc()`` stream *per layer* in a small index::

    b"AIPUNNR1" | u32 little-endian index length | index (UTF-8 JSON) | layer streams, back to back

The index lists every layer with the byte ``offset`` (from the start of the stream area) and ``length``
of its ``nnc()`` stream, the tensors it carries (name, dtype, original shape, role) and the encoder's
statistics. Each layer stream is a complete ``nnc()`` (nnc_header, one layer, terminator) with freshly
initialised contexts, so a layer decodes on its own: ``decode_layer`` (and the WDEC command) seeks to
``offset`` and decodes ``length`` bytes.
"""
from __future__ import annotations

import json
import struct
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .encoder import EncoderOptions, encode_stream
from .engine import AecDecoder
from .errors import CodecError, error_context
from .layout import Placement, from_standard, placement, to_standard
from .quantize import Quantized, integer_levels, kmeans_levels, quantize_uniform, reconstruct
from .syntax_fast import FastElementReader
from .syntax import (CTU_SIZES, SCAN_CK, DecoderLimits, DEFAULT_LIMITS, ElementReader, StreamHeader, Sublayer,
                     code_nnc)

MAGIC = b"AIPUNNR1"
_LENGTH = struct.Struct("<I")
FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")


@dataclass(frozen=True)
class CodecOptions:
    """How tensors are quantised and which coding tools the encoder may use."""

    bitdepth: int | None = 8            # uniform quantisation of float weights ...
    step: float | None = None           # ... or with this step size (overrides bitdepth)
    clusters: int | None = None         # k-means codebook quantisation with this many levels per layer
    bias_bitdepth: int = 16             # array1d_depth of float 1-D tensors
    max_ctu_size: int = 64              # 64, 32, 16 or 8 (max_ctu3d_idx)
    scan_order: int = SCAN_CK
    enable_escape_reorder: bool = True
    enable_zdep_reorder: bool = True
    enable_max_ctu3d_size: bool = False
    encoder: EncoderOptions = field(default_factory=EncoderOptions)
    progress: bool | None = None        # tqdm bar; None: only for models above PROGRESS_WEIGHTS

    def __post_init__(self) -> None:
        if self.max_ctu_size not in CTU_SIZES:
            raise ValueError(f"max_ctu_size must be one of {CTU_SIZES}, got {self.max_ctu_size}")


PROGRESS_WEIGHTS = 1 << 20


@dataclass
class LayerInfo:
    """One layer of a container: where its stream is, what it holds, what coding it used."""

    name: str
    offset: int
    length: int
    tensors: list[dict]                 # name, dtype, shape, role ("weight" | "bias" | "vector")
    weights: int = 0
    bins: int = 0
    modes: dict[str, int] = field(default_factory=dict)
    encode_seconds: float = 0.0
    decode_seconds: float | None = None

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.length / self.weights if self.weights else 0.0


# --------------------------------------------------------------------------------------------- grouping
def default_groups(tensors: dict[str, np.ndarray]) -> list[tuple[str, str | None]]:
    """Pairs (weight, bias): ``X.weight`` + ``X.bias`` (or ``X_W``/``X_B``) share a layer; the rest are alone."""
    groups, used = [], set()
    for name, array in tensors.items():
        if name in used:
            continue
        bias = None
        for w_suffix, b_suffix in ((".weight", ".bias"), ("_W", "_B"), ("weight", "bias")):
            if name.endswith(w_suffix):
                candidate = name[: -len(w_suffix)] + b_suffix
                if candidate in tensors and candidate not in used:
                    bias = candidate
                    break
        groups.append((name, bias))
        used.add(name)
        if bias:
            used.add(bias)
    return groups


def _is_integer(array: np.ndarray) -> bool:
    return array.dtype.kind in "iub"


def _quantize(array: np.ndarray, options: CodecOptions, one_d: bool) -> Quantized:
    if _is_integer(array):
        return integer_levels(array)
    if one_d:
        return quantize_uniform(array, bitdepth=options.bias_bitdepth, one_d=True)
    if options.clusters:
        return kmeans_levels(array, options.clusters)
    if options.step is not None:
        return quantize_uniform(array, step=options.step)
    return quantize_uniform(array, bitdepth=options.bitdepth)


def _check_array(name: str, array: np.ndarray) -> tuple[np.ndarray, Placement]:
    """The tensor as an array and its sublayer placement; ValueError naming the tensor if it cannot be coded."""
    array = np.asarray(array)
    if array.dtype.name not in FLOAT_DTYPES + INT_DTYPES:
        raise ValueError(f"tensor {name!r}: dtype {array.dtype} is not supported")
    try:
        return array, placement(array.shape)
    except ValueError as exc:
        raise ValueError(f"tensor {name!r}: {exc}") from None


# --------------------------------------------------------------------------------------------- encode
def _layer_sublayers(tensors: dict[str, np.ndarray], weight: str, bias: str | None, options: CodecOptions
                     ) -> tuple[StreamHeader, list[Sublayer], list[dict]]:
    arrays = [(name, *_check_array(name, tensors[name])) for name in (weight, bias) if name is not None]
    integer = _is_integer(arrays[0][1])
    header = StreamHeader(integer_input=int(integer), enable_escape_reorder=int(options.enable_escape_reorder),
                          enable_zdep_reorder=int(options.enable_zdep_reorder),
                          enable_max_ctu3d_size=int(options.enable_max_ctu3d_size),
                          max_ctu3d_idx=CTU_SIZES.index(options.max_ctu_size),
                          array1d_depth=options.bias_bitdepth)
    subs, described = [], []
    for role_index, (name, array, place) in enumerate(arrays):
        quant = _quantize(array, options, place.dim == 1)
        sub = Sublayer(dim=place.dim, shape=place.shape, cmaxw=quant.cmaxw, bitdepth=quant.bitdepth,
                       scan_order=options.scan_order, levels=to_standard(quant.levels, place), step=quant.step)
        if place.dim == 1 and integer:     # array1d_depth must hold |q| - 1 (Table 325)
            peak = int(np.max(np.abs(quant.levels))) if quant.levels.size else 0
            header.array1d_depth = max(peak - 1, 0).bit_length()
        subs.append(sub)
        role = "weight" if place.dim != 1 else ("bias" if role_index else "vector")
        described.append({"name": name, "dtype": array.dtype.name, "shape": list(array.shape), "role": role})
    if len(subs) == 2:
        subs[0].include_bias_array1d = 1
    return header, subs, described


def encode_with_info(tensors: dict[str, np.ndarray], options: CodecOptions | None = None,
                     groups: list[tuple[str, str | None]] | None = None) -> tuple[bytes, list[LayerInfo]]:
    """Encode tensors (one layer per weight[+bias] group); returns the container and per-layer info."""
    options = options or CodecOptions()
    groups = _valid_groups(tensors, groups if groups is not None else default_groups(tensors))
    total = sum(int(np.asarray(tensors[w]).size) for w, _ in groups)
    show = options.progress if options.progress is not None else total >= PROGRESS_WEIGHTS
    streams, infos, offset = [], [], 0
    bar = _progress(total, "encode", show)
    for weight, bias in groups:
        with error_context(layer=weight):
            started = time.perf_counter()
            header, subs, described = _layer_sublayers(tensors, weight, bias, options)
            stream = encode_stream(header, [subs], options.encoder)
            weights = sum(int(np.asarray(tensors[t["name"]]).size) for t in described)
            infos.append(LayerInfo(name=weight, offset=offset, length=len(stream.data), tensors=described,
                                   weights=weights, bins=stream.bins, modes=stream.stats[0],
                                   encode_seconds=time.perf_counter() - started))
            streams.append(stream.data)
            offset += len(stream.data)
            bar.update(int(np.asarray(tensors[weight]).size))
    bar.close()
    index = json.dumps({"version": 1, "layers": [_info_json(info) for info in infos]}).encode()
    return MAGIC + _LENGTH.pack(len(index)) + index + b"".join(streams), infos


def encode(tensors: dict[str, np.ndarray], options: CodecOptions | None = None,
           groups: list[tuple[str, str | None]] | None = None) -> bytes:
    """Encode tensors into a container (see the module docstring)."""
    return encode_with_info(tensors, options, groups)[0]


def _valid_groups(tensors: dict[str, np.ndarray], groups: list[tuple[str, str | None]]
                  ) -> list[tuple[str, str | None]]:
    """Keep a bias in its weight's layer only when the pairing is codable; otherwise code it alone."""
    result, seen = [], set()
    for weight, bias in groups:
        for name in (weight, bias):
            if name is None:
                continue
            if name not in tensors:
                raise ValueError(f"group names unknown tensor {name!r}")
            if name in seen:
                raise ValueError(f"tensor {name!r} is in two groups")
            seen.add(name)
        w, b = np.asarray(tensors[weight]), None if bias is None else np.asarray(tensors[bias])
        pairable = (b is not None and w.ndim >= 2 and b.ndim == 1 and b.shape[0] == w.shape[0]
                    and _is_integer(w) == _is_integer(b))
        result.append((weight, bias if pairable else None))
        if b is not None and not pairable:
            result.append((bias, None))
    missing = [name for name in tensors if name not in seen]
    return result + [(name, None) for name in missing]


def _info_json(info: LayerInfo) -> dict:
    data = asdict(info)
    data.pop("decode_seconds")
    return data


# --------------------------------------------------------------------------------------------- decode
def read_index(data: bytes) -> tuple[list[LayerInfo], int]:
    """The container's layer table and the byte position of the stream area; raises CodecError."""
    data = bytes(data)
    if len(data) < len(MAGIC) + _LENGTH.size or not data.startswith(MAGIC):
        raise CodecError("not an AIPU weight container (bad magic or too short)", bit_position=0)
    (length,) = _LENGTH.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + _LENGTH.size
    if start + length > len(data):
        raise CodecError(f"index length {length} runs past the end of the {len(data)}-byte container",
                         bit_position=8 * len(MAGIC))
    try:
        index = json.loads(data[start:start + length].decode())
        infos = [LayerInfo(**layer) for layer in index["layers"]]
    except (ValueError, TypeError, KeyError) as exc:
        raise CodecError(f"corrupt container index: {exc}", bit_position=8 * start) from None
    payload = start + length
    for info in infos:
        if (not isinstance(info.offset, int) or not isinstance(info.length, int) or info.offset < 0
                or info.length <= 0 or payload + info.offset + info.length > len(data)):
            raise CodecError(f"layer {info.name!r}: stream [{info.offset}, +{info.length}] outside the container")
        _check_tensor_entries(info)
    return infos, payload


def _check_tensor_entries(info: LayerInfo) -> None:
    if not isinstance(info.tensors, list) or not 1 <= len(info.tensors) <= 2:
        raise CodecError(f"layer {info.name!r}: corrupt tensor list in the index")
    for entry in info.tensors:
        if (not isinstance(entry, dict) or entry.get("dtype") not in FLOAT_DTYPES + INT_DTYPES
                or not isinstance(entry.get("shape"), list)
                or not all(isinstance(n, int) and n >= 0 for n in entry["shape"])):
            raise CodecError(f"layer {info.name!r}: corrupt tensor entry {entry!r} in the index")


def decode_stream(data: bytes, limits: DecoderLimits = DEFAULT_LIMITS, reference: bool = False,
                  trace: list[tuple[int, int]] | None = None
                  ) -> tuple[StreamHeader, list[list[Sublayer]], list[dict[str, int]], int]:
    """Decode one bare nnc() stream: header, layers (levels filled in), mode statistics, bins.

    The trees are decoded by the numba path (codec.syntax_fast) unless ``reference`` asks for the
    pure-Python decoder (codec.syntax over codec.engine); both give the same result. A ``trace`` list
    receives every bin as (ctxIdx, bin), -1 for bypass and -2 for the terminator (reference decoder),
    for comparing an RTL weight decoder bin by bin.
    """
    if reference or trace is not None:
        decoder = AecDecoder(data, trace=trace is not None)
        reader = ElementReader(decoder)
    else:
        reader = decoder = FastElementReader(data)
    try:
        header, layers, stats = code_nnc(reader, limits=limits)
    except CodecError as error:       # a header or syntax check: where the engine stood when it failed
        raise error.add_context(bit_position=decoder.bit_position)
    bins = decoder.bins_decoded          # without the terminating stuffing bin
    end = decoder.finish()
    if trace is not None:
        trace.extend(decoder.trace)
    if end != 8 * len(data):
        raise CodecError(f"{len(data) - end // 8} bytes left after the end of the stream", bit_position=end)
    return header, layers, stats, bins


def _levels_in_layout(sub: Sublayer, shape: tuple[int, ...], name: str) -> np.ndarray:
    """A decoded sublayer's levels in the tensor's own layout, after checking the stream agrees on the shape."""
    place = placement(shape)
    if place.shape != sub.shape or place.dim != sub.dim:
        raise CodecError(f"tensor {name!r}: stream shape {sub.shape} does not match the expected shape {shape}")
    return from_standard(sub.levels, place)


def decode_weight_stream(stream: bytes, shape: tuple[int, ...], limits: DecoderLimits = DEFAULT_LIMITS) -> np.ndarray:
    """One layer's bare nnc() stream, as the WDEC command fetches it from DRAM (a container layer's bytes at
    its index offset and length), to the integer levels (int64) of its weight tensor in the ONNX layout
    ``shape``. The levels are what the NPU computes with; a float layer's step size is the compiler's concern."""
    _, layers, _, _ = decode_stream(stream, limits)
    if len(layers) != 1 or not layers[0]:
        raise CodecError(f"a weight stream holds one layer, this one holds {len(layers)}")
    return _levels_in_layout(layers[0][0], tuple(shape), "weight")


def _decode_layer_stream(data: bytes, payload: int, info: LayerInfo, limits: DecoderLimits,
                         levels_only: bool = False) -> dict[str, np.ndarray]:
    stream = data[payload + info.offset: payload + info.offset + info.length]
    with error_context(layer=info.name):
        started = time.perf_counter()
        header, layers, _, _ = decode_stream(stream, limits)
        if len(layers) != 1 or len(layers[0]) != len(info.tensors):
            raise CodecError("the stream's layers do not match the container index")
        result = {}
        for sub, entry in zip(layers[0], info.tensors):
            levels = _levels_in_layout(sub, tuple(entry["shape"]), entry["name"])
            dtype = np.dtype(entry["dtype"])
            if levels_only:
                result[entry["name"]] = levels
                result[entry["name"] + ":step"] = np.float32(sub.step)
            elif header.integer_input:
                result[entry["name"]] = levels.astype(dtype)
            else:
                result[entry["name"]] = reconstruct(levels, sub.step).astype(dtype)
        info.decode_seconds = time.perf_counter() - started
    return result


def decode_with_info(data: bytes, limits: DecoderLimits = DEFAULT_LIMITS, progress: bool | None = None
                     ) -> tuple[dict[str, np.ndarray], list[LayerInfo]]:
    """Decode every layer of a container; returns the tensors and the per-layer info (with decode time)."""
    infos, payload = read_index(data)
    total = sum(info.weights for info in infos)
    bar = _progress(total, "decode", progress if progress is not None else total >= PROGRESS_WEIGHTS)
    tensors: dict[str, np.ndarray] = {}
    for info in infos:
        tensors.update(_decode_layer_stream(data, payload, info, limits))
        bar.update(info.weights)
    bar.close()
    return tensors, infos


def decode(data: bytes) -> dict[str, np.ndarray]:
    """Decode a container to ``{name: array}`` in the original shapes and dtypes."""
    return decode_with_info(data)[0]


def decode_layer(data: bytes, name_or_index: str | int, limits: DecoderLimits = DEFAULT_LIMITS,
                 levels: bool = False) -> dict[str, np.ndarray]:
    """Decode one layer (a weight and its bias) without touching the others; see the module docstring.

    ``levels=True`` returns the integer levels (int64, original layout) and, under ``name + ":step"``,
    the float32 step of dequantw, instead of the dequantised tensors: what a hardware weight decoder
    produces before its dequantisation multiply.
    """
    infos, payload = read_index(data)
    if isinstance(name_or_index, int):
        if not 0 <= name_or_index < len(infos):
            raise CodecError(f"layer index {name_or_index} outside 0..{len(infos) - 1}")
        info = infos[name_or_index]
    else:
        matches = [i for i in infos if i.name == name_or_index or any(t["name"] == name_or_index
                                                                       for t in i.tensors)]
        if not matches:
            raise CodecError(f"no layer named {name_or_index!r}")
        info = matches[0]
    return _decode_layer_stream(bytes(data), payload, info, limits, levels)


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, what: str, show: bool):
    if not show:
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, unit="w", unit_scale=True, desc=what)
