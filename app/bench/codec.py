"""Codec benchmark: bits/weight against the order-0 entropy, speed, and the encoder's choice vs fixed modes.

Two weight sets. The trained one is the demo's digits CNN (app/models/digits_cnn.onnx, trained in this
repository), its Conv and Gemm kernels quantised uniformly per layer. The synthetic one is larger, for the
speed figures: Laplacian values with a per-output-channel scale drawn from a gamma distribution (the
heavy-tailed per-channel spread of trained conv nets), with 20 % of the output channels and 10 % of the
input channels pruned to zero, in three layer shapes (3x3 conv, 1x1 conv, fully connected). Both are
quantised uniformly to 6 bits per layer.
"""
from __future__ import annotations

import time

import numpy as np

from aipu.codec.api import CodecOptions, decode, decode_stream, decode_with_info, encode_with_info, read_index
from aipu.codec.encoder import FAST_OPTIONS, EncoderOptions
from aipu.codec.quantize import quantize_uniform
from aipu.codec.reference.tree_coder import TREES

BITDEPTH = 6
OPTIONS = ("compare",)
SHAPES = {"conv3x3": (48, 32, 3, 3), "conv1x1": (96, 48, 1, 1), "fc": (10, 384)}


def trained_like_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Laplacian weights, gamma-distributed per-output-channel scales, pruned channels (module docstring)."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in SHAPES.items():
        scales = rng.gamma(2.0, 0.02, (shape[0],) + (1,) * (len(shape) - 1))
        w = rng.laplace(0.0, 1.0, shape) * scales
        w[rng.random(shape[0]) < 0.2] = 0
        w[:, rng.random(shape[1]) < 0.1] = 0
        tensors[name] = w.astype(np.float32)
    return tensors


def embedded_model_weights() -> dict[str, np.ndarray]:
    """The float Conv and Gemm kernels of the demo's trained digits CNN."""
    import onnx

    from aipu.app.models.train_digits import MODEL_PATH

    model = onnx.load(MODEL_PATH)
    return {init.name: onnx.numpy_helper.to_array(init) for init in model.graph.initializer
            if init.name.endswith(".weight")}


def order0_entropy_bits(levels: np.ndarray) -> float:
    """Total order-0 entropy (bits) of the quantised levels."""
    _, counts = np.unique(levels, return_counts=True)
    p = counts / counts.sum()
    return float(-(counts * np.log2(p)).sum())


def _stream_bits(tensors, encoder: EncoderOptions) -> tuple[int, float, bytes]:
    started = time.perf_counter()
    data, infos = encode_with_info(tensors, CodecOptions(bitdepth=BITDEPTH, encoder=encoder))
    return 8 * sum(info.length for info in infos), time.perf_counter() - started, data


def decode_stream_reference(data: bytes) -> None:
    """Decode every layer of a container with the pure-Python reference decoder."""
    infos, payload = read_index(data)
    for info in infos:
        decode_stream(data[payload + info.offset: payload + info.offset + info.length], reference=True)


def fixed_mode_bits(tensors: dict[str, np.ndarray]) -> dict[str, int]:
    """Stream bits of every single fixed mode (one tree type, codebook on/off, start depth), no search."""
    fixed = {}
    for tree in TREES:
        for codebook in ("off", "on"):
            for start in ("leaf", "root"):
                options = EncoderOptions(trees=(tree,), codebook=codebook, start_depth=start, split="never",
                                         zdep="off")
                fixed[f"{tree}/codebook-{codebook}/start-{start}"] = _stream_bits(tensors, options)[0]
    return fixed


def trained_model_report() -> dict:
    """Compression of the trained digits CNN: encoder's choice vs entropy and vs the best fixed mode."""
    tensors = embedded_model_weights()
    weights = sum(t.size for t in tensors.values())
    entropy = sum(order0_entropy_bits(quantize_uniform(t, bitdepth=BITDEPTH).levels) for t in tensors.values())
    chosen_bits = _stream_bits(tensors, EncoderOptions())[0]
    fixed = fixed_mode_bits(tensors)
    best_fixed = min(fixed, key=fixed.get)
    return {"weights": f"trained digits CNN (app/models/digits_cnn.onnx) Conv+Gemm kernels, {BITDEPTH}-bit uniform",
            "weight_count": int(weights), "bits_per_weight": chosen_bits / weights,
            "order0_entropy_bits_per_weight": entropy / weights, "best_fixed_mode": best_fixed,
            "best_fixed_mode_bits_per_weight": fixed[best_fixed] / weights,
            "encoder_gain_vs_best_fixed_percent": 100.0 * (1 - chosen_bits / fixed[best_fixed])}


# --------------------------------------------------------------------------- decode speed on large layers
# ResNet-18-like shapes (3x3 convs 64..256 channels, a 1x1 downsample, the 512x1000 classifier): about
# 1.3 M weights, large enough that per-layer overheads vanish and small enough for the benchmark's budget.
LARGE_SHAPES = {"conv3x3_64": (64, 64, 3, 3), "conv3x3_128": (128, 128, 3, 3), "conv3x3_256": (256, 256, 3, 3),
                "downsample1x1": (256, 128, 1, 1), "fc": (1000, 512)}
LARGE_BITDEPTHS = (8, 6)


def large_layer_weights(seed: int = 1) -> dict[str, np.ndarray]:
    """Laplacian weights with gamma-distributed per-output-channel scales in the LARGE_SHAPES layers."""
    rng = np.random.default_rng(seed)
    return {name: (rng.laplace(0.0, 1.0, shape) * rng.gamma(2.0, 0.02, (shape[0],) + (1,) * (len(shape) - 1)))
            .astype(np.float32) for name, shape in LARGE_SHAPES.items()}


def _best_decode_seconds(data: bytes, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        decode_with_info(data, progress=False)
        times.append(time.perf_counter() - started)
    return min(times)


def large_decode_speeds() -> dict:
    """Decode M weights/s (best of 3) on the large layers: the encoder's choice, and each tree forced alone
    (codebook off, whole tree from the root, no splits: one fixed mode without trial encodes)."""
    tensors = large_layer_weights()
    weights = sum(t.size for t in tensors.values())
    report: dict = {"weights": "ResNet-18-like layers: Laplacian, per-channel gamma scales, uniform quantisation",
                    "weight_count": int(weights)}
    for bitdepth in LARGE_BITDEPTHS:
        by_tree, bits_by_tree = {}, {}
        for tree in TREES:
            options = EncoderOptions(trees=(tree,), codebook="off", start_depth="root", split="never", zdep="off")
            data, infos = encode_with_info(tensors, CodecOptions(bitdepth=bitdepth, encoder=options, progress=False))
            by_tree[tree] = weights / _best_decode_seconds(data) / 1e6
            bits_by_tree[tree] = 8 * sum(info.length for info in infos) / weights
        report[f"decode_by_tree_{bitdepth}bit_mweights_per_s"] = by_tree
        report[f"bits_per_weight_by_tree_{bitdepth}bit"] = bits_by_tree
        data, infos = encode_with_info(tensors, CodecOptions(bitdepth=bitdepth, progress=False))
        report[f"decode_chosen_{bitdepth}bit_mweights_per_s"] = weights / _best_decode_seconds(data) / 1e6
        report[f"bits_per_weight_chosen_{bitdepth}bit"] = 8 * sum(info.length for info in infos) / weights
    return report


def run(compare: str | None = None) -> dict:
    """The codec's own figures, or with ``compare="nncodec"`` this codec against NNCodec (codec_compare)."""
    if compare is not None:
        from . import codec_compare
        return codec_compare.run()
    tensors = trained_like_weights()
    weights = sum(t.size for t in tensors.values())
    entropy = sum(order0_entropy_bits(quantize_uniform(t, bitdepth=BITDEPTH).levels) for t in tensors.values())

    _, _, warm = _stream_bits({"warm-up": tensors["fc"][:2]}, EncoderOptions())   # load the numba code
    decode(warm)
    chosen_bits, encode_seconds, data = _stream_bits(tensors, EncoderOptions())
    started = time.perf_counter()
    decode(data)
    decode_seconds = time.perf_counter() - started
    started = time.perf_counter()
    decode_stream_reference(data)
    reference_seconds = time.perf_counter() - started

    fixed = fixed_mode_bits(tensors)
    best_fixed = min(fixed, key=fixed.get)
    _, fast_seconds, _ = _stream_bits(tensors, FAST_OPTIONS)
    per_cu_bits, per_cu_seconds, _ = _stream_bits(tensors, EncoderOptions(search="cu"))
    return {
        "weights": "synthetic trained-like: Laplacian, per-channel gamma scales, pruned channels; 6-bit uniform",
        "weight_count": int(weights),
        "bits_per_weight": chosen_bits / weights,
        "order0_entropy_bits_per_weight": entropy / weights,
        "best_fixed_mode": best_fixed,
        "best_fixed_mode_bits_per_weight": fixed[best_fixed] / weights,
        "encoder_gain_vs_best_fixed_percent": 100.0 * (1 - chosen_bits / fixed[best_fixed]),
        "fixed_modes_bits_per_weight": {name: bits / weights for name, bits in sorted(fixed.items())},
        "encode_mweights_per_s": weights / encode_seconds / 1e6,
        "encode_fixed_mode_mweights_per_s": weights / fast_seconds / 1e6,
        "per_cu_search": {"bits_per_weight": per_cu_bits / weights,
                          "encode_mweights_per_s": weights / per_cu_seconds / 1e6},
        "decode_mweights_per_s": weights / decode_seconds / 1e6,
        "decode_reference_mweights_per_s": weights / reference_seconds / 1e6,
        "coder": "numba sublayer decoder over the numba trees (codec.compiled); reference: codec.reference",
        "large_layers": large_decode_speeds(),
        "trained_model": trained_model_report(),
    }
