"""`aipu demo`: the main job end to end on the embedded default model.

Until the ONNX compiler exists, the default model is a small float CNN defined here (three conv
layers with fused ReLU: a strided stem, a depthwise layer and a pointwise layer, deterministic
weights). The demo calibrates and quantizes it (uint8 activations, per-channel int8 weights, M/2^N
requant), lowers the chain to one command program, writes and disassembles it, runs it on the
functional interpreter, checks the result bit for bit against the golden model and against the float
model, and compresses the weights with the chapter-10 codec.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from sim import golden
from sim.arch import DEFAULT, DType, Rounding


@dataclass(frozen=True)
class FloatConv:
    """One float conv + ReLU layer of the default model."""

    name: str
    w: np.ndarray            # [K, C/groups, KH, KW] float64
    bias: np.ndarray         # [K]
    stride: int
    pad: int
    groups: int


def default_model(seed: int = 115) -> tuple[np.ndarray, list[FloatConv]]:
    """The embedded model and its calibration input: 3x32x32 image -> 16 -> depthwise 16 -> 32 channels."""
    rng = np.random.default_rng(seed)

    def weights(shape, fan_in):
        # Laplacian weights with per-output-channel spread: the shape trained conv weights have.
        spread = rng.uniform(0.5, 1.5, (shape[0], 1, 1, 1)) * np.sqrt(2.0 / fan_in)
        return rng.laplace(0.0, 1.0, shape) * spread / np.sqrt(2.0)

    layers = [
        FloatConv("stem", weights((16, 3, 3, 3), 27), rng.normal(0, 0.05, 16), stride=2, pad=1, groups=1),
        FloatConv("depthwise", weights((16, 1, 3, 3), 9), rng.normal(0, 0.05, 16), stride=1, pad=1, groups=16),
        FloatConv("pointwise", weights((32, 16, 1, 1), 16), rng.normal(0, 0.05, 32), stride=1, pad=0, groups=1),
    ]
    yy, xx = np.mgrid[0:32, 0:32] / 32.0
    image = np.stack([np.sin(6 * xx + 2 * c) * np.cos(5 * yy - c) for c in range(3)]) * 0.5 + 0.5
    image = np.clip(image + rng.normal(0, 0.05, image.shape), 0.0, 1.0)
    return image[None], layers


def float_conv_relu(x: np.ndarray, layer: FloatConv) -> np.ndarray:
    """The float reference: grouped 2-D convolution, bias, ReLU (NCHW, float64)."""
    p = layer.pad
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    kh, kw = layer.w.shape[2:]
    windows = sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::layer.stride, ::layer.stride]
    n, c, oh, ow = windows.shape[:4]
    g = layer.groups
    grouped = windows.reshape(n, g, c // g, oh, ow, kh, kw)
    w = layer.w.reshape(g, -1, c // g, kh, kw)
    out = np.einsum("ngchwij,gkcij->ngkhw", grouped, w).reshape(n, -1, oh, ow)
    return np.maximum(out + layer.bias.reshape(1, -1, 1, 1), 0.0)


def quantize_model(image: np.ndarray, model: list[FloatConv]):
    """Calibrate on the image and build the quantized layers (compiler.tiling.ConvLayer).

    Activations: uint8, zero point 0 (every tensor is post-ReLU or an image in [0, 1]), scale from the
    calibrated maximum. Weights: int8 symmetric per output channel. Bias: int32 at x_scale*w_scale.
    Requant: M/2^N per channel (golden.quantize_multiplier), round half up, clamp [0, 255] = ReLU.
    """
    from compiler.tiling import ConvLayer

    x_scale = float(image.max()) / 255.0
    x_q = np.clip(golden.round_half_away(image / x_scale), 0, 255).astype(np.uint8)
    activations, quantized, float_outputs = x_q, [], []
    current = image
    for layer in model:
        current = float_conv_relu(current, layer)
        float_outputs.append(current)
        y_scale = float(current.max()) / 255.0
        w_scale = np.abs(layer.w).reshape(layer.w.shape[0], -1).max(axis=1) / 127.0
        w_q = np.clip(golden.round_half_away(layer.w / w_scale.reshape(-1, 1, 1, 1)), -127, 127).astype(np.int8)
        bias_q = golden.round_half_away(layer.bias / (x_scale * w_scale)).astype(np.int32)
        multiplier, shift = golden.quantize_multiplier(x_scale * w_scale / y_scale)
        quantized.append(ConvLayer(x=activations, w=w_q, bias=bias_q, multiplier=multiplier, shift=shift,
                                   out_type=DType.UINT8, rounding=Rounding.HALF_UP, stride=(layer.stride,) * 2,
                                   padding=(layer.pad,) * 4, groups=layer.groups))
        activations = quantized[-1].reference()       # the next layer's input (golden, layer by layer)
        x_scale = y_scale
    return quantized, float_outputs, x_scale


def run_demo(out_dir: Path, listing_lines: int = 24) -> dict:
    from compiler.tiling import lower_conv_layers
    from sim.interpreter import run

    import codec

    out_dir.mkdir(parents=True, exist_ok=True)
    image, model = default_model()
    layers, float_outputs, y_scale = quantize_model(image, model)

    lowered = lower_conv_layers(layers, DEFAULT)
    program_path = out_dir / "model.aipu"
    lowered.program.write(program_path)
    listing = lowered.program.disassemble()
    (out_dir / "model.lst").write_text(listing)

    started = time.perf_counter()
    result = run(lowered.program, lowered.memory())
    interpret_seconds = time.perf_counter() - started
    npu_output = lowered.read_output(result.memory)
    golden_output = layers[-1].reference()
    mismatches = int(np.count_nonzero(npu_output != golden_output))

    dequantized = npu_output.astype(np.float64) * y_scale
    reference = float_outputs[-1]
    error_lsb = np.abs(dequantized - reference) / y_scale
    sqnr_db = 10 * np.log10(np.sum(reference ** 2) / max(np.sum((dequantized - reference) ** 2), 1e-30))

    weights = {f"{m.name}.weight": q.w for m, q in zip(model, layers)}
    weights.update({f"{m.name}.bias": q.bias for m, q in zip(model, layers)})
    started = time.perf_counter()
    stream, layer_infos = codec.encode_with_info(weights)
    encode_seconds = time.perf_counter() - started
    decoded = codec.decode(stream)
    codec_exact = all(np.array_equal(decoded[name], value) for name, value in weights.items())
    (out_dir / "weights.nnr").write_bytes(stream)
    weight_count = sum(q.w.size for q in layers)
    payload_bits = 8 * sum(info.length for info in layer_infos)
    all_weights = np.concatenate([q.w.ravel() for q in layers])
    _, counts = np.unique(all_weights, return_counts=True)
    entropy = float(-(counts / counts.sum() * np.log2(counts / counts.sum())).sum())

    return {
        "model": [{"name": m.name, "weights": list(q.w.shape), "stride": m.stride, "groups": m.groups,
                   "requant_shift_range": [int(np.min(q.shift)), int(np.max(q.shift))]} for m, q in zip(model, layers)],
        "program": {"file": str(program_path), "listing": str(out_dir / "model.lst"), "bytes": program_path.stat().st_size,
                    "commands": {unit.name: len(queue) for unit, queue in lowered.program.queues.items() if queue},
                    "head": listing.splitlines()[:listing_lines]},
        "interpreter": {"seconds": round(interpret_seconds, 3), **result.stats.to_dict()},
        "golden": {"outputs": int(golden_output.size), "mismatches": mismatches, "bit_exact": mismatches == 0},
        "float_reference": {"max_error_lsb": round(float(error_lsb.max()), 3),
                            "mean_error_lsb": round(float(error_lsb.mean()), 4), "sqnr_db": round(float(sqnr_db), 2)},
        "codec": {"file": str(out_dir / "weights.nnr"), "container_bytes": len(stream), "weights": int(weight_count),
                  "biases": int(sum(q.bias.size for q in layers)), "stream_bits": payload_bits,
                  "stream_bits_per_weight": round(payload_bits / weight_count, 3),
                  "weight_entropy_bits": round(entropy, 3), "lossless": codec_exact,
                  "encode_seconds": round(encode_seconds, 3)},
    }


def _print_report(report: dict) -> None:
    print("AIPU demo: embedded 3-layer CNN (stem 3x3/2, depthwise 3x3, pointwise 1x1), uint8 activations, "
          "per-channel int8 weights")
    for layer in report["model"]:
        print(f"  {layer['name']:<10} weights {layer['weights']}, stride {layer['stride']}, groups {layer['groups']}, "
              f"shifts {layer['requant_shift_range'][0]}..{layer['requant_shift_range'][1]}")
    program = report["program"]
    print(f"\nProgram {program['file']} ({program['bytes']} bytes), commands per unit: {program['commands']}")
    print(f"Listing (first {len(program['head'])} lines; all in {program['listing']}):")
    for line in program["head"]:
        print("  " + line)
    interp = report["interpreter"]
    print(f"\nInterpreter: {interp['macs']} MACs, bytes moved {dict(interp['bytes_moved'])}, "
          f"{interp['saturated_values']} values clamped by the requantizer (fused ReLU included), {interp['seconds']} s")
    g = report["golden"]
    print(f"Golden model: {'bit-exact' if g['bit_exact'] else str(g['mismatches']) + ' MISMATCHES'} "
          f"over {g['outputs']} outputs")
    f = report["float_reference"]
    print(f"Float model: SQNR {f['sqnr_db']} dB, mean error {f['mean_error_lsb']} LSB, max {f['max_error_lsb']} LSB")
    c = report["codec"]
    print(f"Weight codec: {c['weights']} int8 weights + {c['biases']} int32 biases -> {c['stream_bits'] // 8} bytes of "
          f"layer streams ({c['stream_bits_per_weight']} bits per weight, biases included; order-0 entropy of the "
          f"weights {c['weight_entropy_bits']} bits), {c['container_bytes']} bytes with the container index, "
          f"{'lossless round trip' if c['lossless'] else 'ROUND TRIP FAILED'}: {c['file']}")


def _cmd_demo(args: argparse.Namespace) -> int:
    report = run_demo(Path(args.out))
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_report(report)
    return 0 if report["golden"]["bit_exact"] and report["codec"]["lossless"] else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run the main job end to end on the embedded default model")
    parser.add_argument("--out", default="out/demo", help="directory for the program, listing and weight stream")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=_cmd_demo)
