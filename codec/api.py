"""Library API of the weight codec: tensors in, bytes out, and back.

The container (".nnr", codec.container, docs/codec.md §3): the standard defines only the ``nnc()`` payload,
without names or framework layouts, so the codec wraps one ``nnc()`` stream *per layer* in a small checked
index. The streams lie back to back, so a layer's offset is the sum of the lengths before it. Each layer stream
is a complete ``nnc()`` (nnc_header, one layer, terminator) with freshly initialised contexts, so a layer
decodes on its own: ``decode_layer`` (and the WDEC command) seeks to its offset and decodes ``length`` bytes.
The encoder's statistics (bins, modes) are not stored: the decoder counts them again.

A layer may instead hold one tensor coded with DeepCABAC (``CodecOptions(format="deepcabac")``, the index's
``"format": "deepcabac"``): its stream is NNCodec's layer payload (codec.deepcabac), and a float tensor's entry
carries its step.

Every failure on a corrupt or crafted input is a CodecError whose bit position counts from the first byte
of the input the caller passed (the container, or the bare stream for ``decode_stream``).
"""
from __future__ import annotations

import base64
import json
import math
import os
import time
import zlib
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from aipu.sim.machine.errors import InputError

from .compiled.element_io import FastElementReader
from .container import (FLOAT_DTYPES, FORMATS, INT_DTYPES, NAME_RULE, LayerInfo, index_entry, is_valid_name,
                        pack_container, read_index, role)
from .deepcabac.compiled.nnc_coder import decode_nnc_layer, encode_nnc_layer
from .encoder import EncodedStream, EncoderOptions, encode_stream
from .errors import CodecError, check_stream_end, error_context
from .layout import Placement, from_standard, placement, to_standard
from .quantization import QuantParams, check_params, read_entry
from .quantize import MAX_BITDEPTH, Quantized, integer_levels, kmeans_levels, quantize_uniform, reconstruct
from .reference.element_coder import ElementReader
from .reference.engine import AecDecoder
from .reference.geometry import CTU_SIZES
from .reference.headers import DEFAULT_LIMITS, SCAN_CK, DecoderLimits, StreamHeader, Sublayer
from .reference.nnc import code_nnc


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
    format: str = "tai"                 # tai: chapter-10 nnc() streams; deepcabac: a tensor a layer, NNC payloads

    def __post_init__(self) -> None:
        """InputError (a ValueError) naming the option that no encoder can use."""
        if self.max_ctu_size not in CTU_SIZES:
            raise InputError("max_ctu_size", self.max_ctu_size, f"one of {', '.join(map(str, CTU_SIZES))}")
        if self.format not in FORMATS:
            raise InputError("format", self.format, f"one of {', '.join(FORMATS)}")
        for name in ("bitdepth", "bias_bitdepth"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or not 1 <= value <= MAX_BITDEPTH):
                raise InputError(name, value, f"an integer 1 .. {MAX_BITDEPTH}")
        if self.step is not None and not (isinstance(self.step, (int, float)) and math.isfinite(self.step)
                                          and self.step > 0):
            raise InputError("step", self.step, "a finite positive number")
        if self.clusters is not None and (not _is_int(self.clusters) or not 1 <= self.clusters <= MAX_CLUSTERS):
            raise InputError("clusters", self.clusters, f"an integer 1 .. {MAX_CLUSTERS}")


PROGRESS_WEIGHTS = 1 << 20
MAX_CLUSTERS = 1 << 16           # distinct levels k-means may keep on its 16-bit grid


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    if options.clusters is not None:
        return kmeans_levels(array, options.clusters)
    if options.step is not None:
        return quantize_uniform(array, step=options.step)
    return quantize_uniform(array, bitdepth=options.bitdepth)


def _check_array(name: str, array: np.ndarray) -> tuple[np.ndarray, Placement]:
    """The tensor as an array and its sublayer placement; ValueError naming the tensor if it cannot be coded."""
    array = np.asarray(array)
    if not is_valid_name(name):
        raise ValueError(f"tensor {name!r}: the name must be {NAME_RULE}")
    if array.dtype.name not in FLOAT_DTYPES + INT_DTYPES:
        raise ValueError(f"tensor {name!r}: dtype {array.dtype} is not supported")
    try:
        return array, placement(array.shape)
    except ValueError as exc:
        raise ValueError(f"tensor {name!r}: {exc}") from None


# --------------------------------------------------------------------------------------------- encode
def layer_sublayers(tensors: dict[str, np.ndarray], weight: str, bias: str | None, options: CodecOptions,
                    quantization: dict[str, QuantParams] | None = None
                    ) -> tuple[StreamHeader, list[Sublayer], list[dict]]:
    """One layer's stream header, sublayers and index entries; a quantized tensor is coded as q - zero_point."""
    quantization = quantization or {}
    arrays = [(name, *_check_array(name, tensors[name])) for name in (weight, bias) if name is not None]
    integer = _is_integer(arrays[0][1])
    header = StreamHeader(integer_input=int(integer), enable_escape_reorder=int(options.enable_escape_reorder),
                          enable_zdep_reorder=int(options.enable_zdep_reorder),
                          enable_max_ctu3d_size=int(options.enable_max_ctu3d_size),
                          max_ctu3d_idx=CTU_SIZES.index(options.max_ctu_size),
                          array1d_depth=options.bias_bitdepth)
    subs, described = [], []
    for position, (name, array, place) in enumerate(arrays):
        entry, _, quant = _quantized_tensor(name, array, place, position, options, quantization.get(name))
        described.append(entry)
        sub = Sublayer(dim=place.dim, shape=place.shape, cmaxw=quant.cmaxw, bitdepth=quant.bitdepth,
                       scan_order=options.scan_order, levels=to_standard(quant.levels, place), step=quant.step)
        if place.dim == 1 and integer:     # array1d_depth must hold |q| - 1 (Table 325)
            peak = int(np.max(np.abs(quant.levels))) if quant.levels.size else 0
            header.array1d_depth = max(peak - 1, 0).bit_length()
        subs.append(sub)
    if len(subs) == 2:
        subs[0].include_bias_array1d = 1
    return header, subs, described


def _quantized_tensor(name: str, array: np.ndarray, place: Placement, position: int, options: CodecOptions,
                      params: QuantParams | None) -> tuple[dict, np.ndarray, Quantized]:
    """A tensor's index entry, the array coded (q - zero_point for a quantized one) and its levels."""
    entry = {"name": name, "dtype": array.dtype.name, "shape": list(array.shape), "role": role(place.dim, position)}
    if params is not None:
        params = check_params(name, array, params)
        entry["quantization"] = params.entry()
        array = params.centred(array)
    try:
        return entry, array, _quantize(array, options, place.dim == 1)
    except ValueError as exc:          # a value the codec cannot carry, or a bad option: name the tensor
        raise ValueError(f"tensor {name!r}: {exc}") from None


def encode_with_info(tensors: dict[str, np.ndarray], options: CodecOptions | None = None,
                     groups: list[tuple[str, str | None]] | None = None,
                     quantization: dict[str, QuantParams] | None = None, workers: int = 1
                     ) -> tuple[bytes, list[LayerInfo]]:
    """Encode tensors (one layer per weight[+bias] group); returns the container and per-layer info.

    ``quantization`` gives pre-quantized integer tensors their scale and zero point: such a tensor is coded as
    q - zero_point and the index carries the parameters (codec.quantization). The same tensors and options
    always give the same bytes: the file holds no timings. The layers are independent streams, so above
    PARALLEL_WEIGHTS they may be encoded in up to ``workers`` processes (0: one per core), the largest first;
    the bytes, and the error a bad layer raises, are those of one process.
    """
    options = options or CodecOptions()
    unknown = [name for name in quantization or {} if name not in tensors]
    if unknown:
        raise ValueError(f"quantization names unknown tensor {unknown[0]!r}")
    groups = _valid_groups(tensors, groups if groups is not None else default_groups(tensors))
    if options.format == "deepcabac":         # DeepCABAC codes one tensor a layer
        groups = [(name, None) for group in groups for name in group if name is not None]
    total = sum(int(np.asarray(tensors[w]).size) for w, _ in groups)
    show = options.progress if options.progress is not None else total >= PROGRESS_WEIGHTS
    quantization = quantization or {}
    jobs = [({name: tensors[name] for name in (weight, bias) if name is not None}, weight, bias, options,
             {name: quantization[name] for name in (weight, bias) if name in quantization}) for weight, bias in groups]
    workers = min(workers or os.cpu_count() or 1, len(jobs)) if total >= PARALLEL_WEIGHTS else 1
    streams, infos, offset = [], [], 0
    bar = _progress(total, "encode", show)
    for job, (stream, described) in zip(jobs, _encoded_layers(jobs, workers)):
        weight = job[1]
        weights = sum(int(np.asarray(tensors[t["name"]]).size) for t in described)
        infos.append(LayerInfo(name=weight, offset=offset, length=len(stream.data), tensors=described,
                               weights=weights, bins=stream.bins, modes=stream.stats[0],
                               crc32=zlib.crc32(stream.data), format=options.format))
        streams.append(stream.data)
        offset += len(stream.data)
        bar.update(int(np.asarray(tensors[weight]).size))
    bar.close()
    index = json.dumps({"layers": [index_entry(info) for info in infos]}, separators=(",", ":")).encode()
    return pack_container(index, b"".join(streams)), infos


PARALLEL_WEIGHTS = 1 << 18       # below this a worker process costs more than it saves


def _encode_layer(job: tuple) -> tuple:
    """One layer's stream and tensor descriptions; ``job`` = (its tensors, weight, bias, options, quantization)."""
    tensors, weight, bias, options, quantization = job
    with error_context(layer=weight):
        if options.format == "deepcabac":
            return deepcabac_layer(tensors[weight], weight, options, quantization.get(weight))
        header, subs, described = layer_sublayers(tensors, weight, bias, options, quantization)
        return encode_stream(header, [subs], options.encoder), described


def deepcabac_layer(array: np.ndarray, name: str, options: CodecOptions, params: QuantParams | None = None
                    ) -> tuple[EncodedStream, list[dict]]:
    """One tensor as a DeepCABAC layer: its levels (quantised as for a chapter-10 layer) as NNCodec's payload, and
    its index entry, with the float32 step of a float tensor."""
    entry, array, quant = _quantized_tensor(name, *_check_array(name, array), 0, options, params)
    if not _is_integer(array):         # an all-zero tensor's step 0 would mean nothing: any positive step does
        step = np.float32(quant.step if quant.step > 0 else 1.0)
        entry["step"] = base64.b64encode(step.astype("<f4").tobytes()).decode()
    return EncodedStream(encode_nnc_layer(quant.levels), 0, [{"deepcabac": 1}]), [entry]


def _encoded_layers(jobs: list[tuple], workers: int):
    """``_encode_layer`` of every job, in order. With workers, in that many processes, the largest layers first;
    a layer that fails there is encoded again here, so that it raises exactly the error one process raises."""
    if workers <= 1:
        yield from map(_encode_layer, jobs)
        return
    import multiprocessing

    # fork: a worker starts with this process's compiled code and never re-runs the caller's main module
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method)) as pool:
        largest_first = sorted(range(len(jobs)), key=lambda i: -sum(a.size for a in jobs[i][0].values()))
        submitted = {i: pool.submit(_encode_layer, jobs[i]) for i in largest_first}
        try:
            for i in range(len(jobs)):
                try:
                    result = submitted[i].result()
                except Exception:       # noqa: BLE001 -- re-raised below, with its context, by the same code
                    result = _encode_layer(jobs[i])
                yield result
        finally:
            for future in submitted.values():
                future.cancel()


def encode(tensors: dict[str, np.ndarray], options: CodecOptions | None = None,
           groups: list[tuple[str, str | None]] | None = None,
           quantization: dict[str, QuantParams] | None = None) -> bytes:
    """Encode tensors into a container (see the module docstring and ``encode_with_info``)."""
    return encode_with_info(tensors, options, groups, quantization)[0]


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


# --------------------------------------------------------------------------------------------- decode
def decode_stream(data: bytes, limits: DecoderLimits = DEFAULT_LIMITS, reference: bool = False,
                  trace: list[tuple[int, int]] | None = None, strict: bool = False
                  ) -> tuple[StreamHeader, list[list[Sublayer]], list[dict[str, int]], int]:
    """Decode one bare nnc() stream: header, layers (levels filled in), mode statistics, bins.

    The stream ends with a stuffing bin of 1 (the standard defines no termination: docs/codec-engine.md,
    "Termination"); whatever follows it is ignored, as a conforming decoder ignores it, so streams flushed the
    way AVS2 encoders flush decode too. ``strict`` also requires this encoder's own end: zero padding to a byte
    and nothing after it.

    The sublayers are decoded by the compiled path (codec.compiled) unless ``reference`` asks for the
    pure-Python decoder (codec.reference); both give the same result. A ``trace`` list
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
    end = decoder.finish(strict)
    if trace is not None:
        trace.extend(decoder.trace)
    if strict:
        check_stream_end(data, end)
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
    with error_context(bit_position=0):     # the stream disagreeing with ``shape``: at its start
        _, layers, _, _ = decode_stream(stream, limits, strict=True)
        if len(layers) != 1:
            raise CodecError(f"a weight stream holds one layer, this one holds {len(layers)}")
        return _levels_in_layout(layers[0][0], tuple(shape), "weight")


def _decode_layer_stream(data: bytes, payload: int, info: LayerInfo, limits: DecoderLimits,
                         levels_only: bool = False, strict: bool = False) -> dict[str, np.ndarray]:
    start = payload + info.offset
    stream = data[start:start + info.length]
    started = time.perf_counter()
    try:
        if zlib.crc32(stream) != info.crc32:
            raise CodecError("the layer stream fails its CRC-32 check", bit_position=0)
        if info.format == "deepcabac":
            result = _deepcabac_tensor(stream, info.tensors[0], levels_only)
            info.modes, info.decode_seconds = {"deepcabac": 1}, time.perf_counter() - started
            return result
        header, layers, stats, info.bins = decode_stream(stream, limits, strict=strict)
        info.modes = stats[0] if stats else {}
        if len(layers) != 1 or len(layers[0]) != len(info.tensors):
            raise CodecError("the stream's layers do not match the container index")
        result = {}
        for sub, entry in zip(layers[0], info.tensors):
            levels = _levels_in_layout(sub, tuple(entry["shape"]), entry["name"])
            if levels_only:
                result[entry["name"]] = levels
                result[entry["name"] + ":step"] = np.float32(sub.step)
            else:
                result[entry["name"]] = _tensor(levels, sub.step, header.integer_input, entry)
    except CodecError as error:
        error.context["layer"] = info.name       # the stream's layer 0 is this container layer
        raise error.relocate(8 * start)
    info.decode_seconds = time.perf_counter() - started
    return result


def _deepcabac_tensor(stream: bytes, entry: dict, levels_only: bool) -> dict[str, np.ndarray]:
    """A DeepCABAC layer's tensor (or its levels and step) from its NNC payload and index ``entry``."""
    levels = decode_nnc_layer(stream, tuple(entry["shape"])).astype(np.int64)
    step = np.frombuffer(base64.b64decode(entry["step"]), "<f4")[0] if "step" in entry else np.float32(1.0)
    if levels_only:
        return {entry["name"]: levels, entry["name"] + ":step": np.float32(step)}
    return {entry["name"]: _tensor(levels, step, int("step" not in entry), entry)}


def _tensor(levels: np.ndarray, step: np.float32, integer_input: int, entry: dict) -> np.ndarray:
    """Decoded levels as the index ``entry``'s tensor: a quantized one's zero point added, in its dtype; a value
    the dtype cannot hold is an error, never a silent cast."""
    name, dtype = entry["name"], np.dtype(entry["dtype"])
    if bool(integer_input) != (dtype.kind in "iub"):
        raise CodecError(f"tensor {name!r}: dtype {dtype} in a stream with integer_input {integer_input}")
    if "quantization" in entry:
        params = read_entry(entry["quantization"], f"tensor {name!r}", dtype.name, entry["shape"])
        return params.restored(levels, dtype, name)
    values = levels if integer_input else reconstruct(levels, step)
    if dtype.kind == "f":
        low, high = float(np.finfo(dtype).min), float(np.finfo(dtype).max)
    else:
        low, high = (0, 1) if dtype.kind == "b" else (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    if values.size and not low <= values.min().item() <= values.max().item() <= high:
        raise CodecError(f"tensor {name!r}: a decoded value outside the range of {dtype}")
    return values.astype(dtype)


def decode_with_info(data: bytes, limits: DecoderLimits = DEFAULT_LIMITS, progress: bool | None = None,
                     strict: bool = False, threads: int | None = None
                     ) -> tuple[dict[str, np.ndarray], list[LayerInfo]]:
    """Decode every layer of a container; returns the tensors and the per-layer info (with decode time).
    ``strict``: each layer's stream must end as this encoder ends it (``decode_stream``).

    The layer streams are independent, so up to ``threads`` of them (default: one per core) decode at once
    (the compiled decoder runs without the GIL). The result, and the error raised for the first bad layer in
    index order, are those of decoding one layer after the other.
    """
    data = bytes(data)
    infos, payload = read_index(data, limits)
    total = sum(info.weights for info in infos)
    bar = _progress(total, "decode", progress if progress is not None else total >= PROGRESS_WEIGHTS)
    tensors: dict[str, np.ndarray] = {}
    workers = min(threads or os.cpu_count() or 1, len(infos))
    with ThreadPoolExecutor(max(workers, 1)) as pool:
        largest_first = sorted(range(len(infos)), key=lambda i: -infos[i].weights)   # no long layer left for last
        submitted = {i: pool.submit(_decode_layer_stream, data, payload, infos[i], limits, strict=strict)
                     for i in largest_first}
        futures = [submitted[i] for i in range(len(infos))]
        try:
            for info, future in zip(infos, futures):
                tensors.update(future.result())
                bar.update(info.weights)
        finally:
            for future in futures:
                future.cancel()
    bar.close()
    return tensors, infos


def decode(data: bytes, strict: bool = False) -> dict[str, np.ndarray]:
    """Decode a container to ``{name: array}`` in the original shapes and dtypes (``strict``: decode_stream's)."""
    return decode_with_info(data, strict=strict)[0]


def decode_layer(data: bytes, name_or_index: str | int, limits: DecoderLimits = DEFAULT_LIMITS,
                 levels: bool = False, strict: bool = False) -> dict[str, np.ndarray]:
    """Decode one layer (a weight and its bias) without touching the others; see the module docstring.

    ``levels=True`` returns the integer levels (int64, original layout) and, under ``name + ":step"``,
    the float32 step of dequantw, instead of the dequantised tensors: what a hardware weight decoder
    produces before its dequantisation multiply. A pre-quantized tensor's levels are q - zero_point.
    """
    infos, payload = read_index(data, limits)
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
    return _decode_layer_stream(bytes(data), payload, info, limits, levels, strict)


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
