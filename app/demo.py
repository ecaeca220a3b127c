"""`aipu demo`: the main job end to end on the embedded default model.

The default model is a small CNN trained here on 8x8 handwritten digits (app/models/digits_cnn.onnx, see
app/models/train_digits.py): three conv+ReLU layers, global average pooling and a fully connected layer.
Until the ONNX compiler exists the demo does its part by hand: it reads the float graph, calibrates on
training images, quantizes (uint8 activations, per-channel int8 weights, M/2^N requant), lowers the conv
trunk to one command program, writes and disassembles it, runs it on the functional interpreter for every
held-out image, checks each result bit for bit against the golden model, classifies with the pooling and
fully connected head on the golden model, reports accuracy next to the float model, and compresses the
quantized weights with the chapter-10 codec.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH
from aipu.compiler.frontend import load_float_model, quantize_model
from aipu.sim.machine.arch import DEFAULT


def _display_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (shorter in the report)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def run_demo(out_dir: Path, eval_limit: int | None = None, listing_lines: int = 24) -> dict:
    from aipu import codec
    from aipu.app.bench.codec import order0_entropy_bits
    from aipu.compiler.tiling import lower_conv_layers
    from aipu.sim.interpreter import run

    out_dir.mkdir(parents=True, exist_ok=True)
    model = load_float_model(MODEL_PATH)
    data = np.load(DATA_PATH)
    images, labels = data["eval_images"][:eval_limit], data["eval_labels"][:eval_limit]
    quantized = quantize_model(model, data["calibration_images"])

    lowered = lower_conv_layers(quantized.layers, DEFAULT)
    program_path = out_dir / "model.aipu"
    lowered.program.write(program_path)
    listing = lowered.program.disassemble()
    (out_dir / "model.lst").write_text(listing)

    predictions, mismatches, macs, started = [], 0, 0, time.perf_counter()
    for image in images:
        x = quantized.quantize_input(image[None])
        result = run(lowered.program, lowered.memory(lowered.dram_with_input(x)))
        features = lowered.read_output(result.memory)
        mismatches += int(np.count_nonzero(features != quantized.golden_features(x)))
        macs += result.stats.macs
        predictions.append(int(np.argmax(quantized.classify(features))))
    interpret_seconds = time.perf_counter() - started
    predictions = np.array(predictions)
    float_predictions = model.logits(images).argmax(axis=1)

    weights = {f"{conv.name}.weight": layer.w for conv, layer in zip(model.convs, quantized.layers)}
    weights.update({f"{conv.name}.bias": layer.bias for conv, layer in zip(model.convs, quantized.layers)})
    weights.update({"fc.weight": quantized.fc_weight, "fc.bias": quantized.fc_bias})
    started = time.perf_counter()
    stream, layer_infos = codec.encode_with_info(weights)
    encode_seconds = time.perf_counter() - started
    decoded = codec.decode(stream)
    lossless = all(np.array_equal(decoded[name], value) for name, value in weights.items())
    (out_dir / "weights.nnr").write_bytes(stream)
    int8_weights = np.concatenate([layer.w.ravel() for layer in quantized.layers] + [quantized.fc_weight.ravel()])
    stream_bits = 8 * sum(info.length for info in layer_infos)

    return {
        "model": {"file": _display_path(MODEL_PATH), "layers": [
            {"name": conv.name, "weights": list(layer.w.shape), "stride": conv.stride,
             "shifts": [int(np.min(layer.shift)), int(np.max(layer.shift))]}
            for conv, layer in zip(model.convs, quantized.layers)] + [
            {"name": "fc (host, golden)", "weights": list(quantized.fc_weight.shape)}]},
        "program": {"file": str(program_path), "listing": str(out_dir / "model.lst"), "bytes": program_path.stat().st_size,
                    "commands": {unit.name: len(queue) for unit, queue in lowered.program.queues.items() if queue},
                    "head": listing.splitlines()[:listing_lines]},
        "interpreter": {"images": len(images), "seconds": round(interpret_seconds, 3), "macs": macs,
                        "golden_mismatches": mismatches, "bit_exact": mismatches == 0},
        "accuracy": {"images": len(images), "float": round(float((float_predictions == labels).mean()), 4),
                     "npu": round(float((predictions == labels).mean()), 4),
                     "agreement": round(float((predictions == float_predictions).mean()), 4)},
        "codec": {"file": str(out_dir / "weights.nnr"), "container_bytes": len(stream),
                  "int8_weights": int(int8_weights.size), "stream_bits": stream_bits,
                  "stream_bits_per_weight": round(stream_bits / int8_weights.size, 3),
                  "weight_entropy_bits": round(order0_entropy_bits(int8_weights) / int8_weights.size, 3), "lossless": lossless,
                  "encode_seconds": round(encode_seconds, 3)},
    }


def _print_report(report: dict) -> None:
    print(f"AIPU demo: digits CNN ({report['model']['file']}), uint8 activations, per-channel int8 weights")
    for layer in report["model"]["layers"]:
        extra = f", stride {layer['stride']}, requant shifts {layer['shifts'][0]}..{layer['shifts'][1]}" if "stride" in layer else ""
        print(f"  {layer['name']:<18} weights {layer['weights']}{extra}")
    program = report["program"]
    print(f"\nProgram {program['file']} ({program['bytes']} bytes), commands per unit: {program['commands']}")
    print(f"Listing (first {len(program['head'])} lines; all in {program['listing']}):")
    for line in program["head"]:
        print("  " + line)
    interp, accuracy = report["interpreter"], report["accuracy"]
    exact = "bit-exact" if interp["bit_exact"] else f"{interp['golden_mismatches']} MISMATCHES"
    print(f"\nInterpreter: {interp['images']} held-out images, {interp['macs']} MACs in {interp['seconds']} s; "
          f"conv trunk vs golden model: {exact}")
    print(f"Top-1 accuracy on {accuracy['images']} held-out images: float {accuracy['float']:.2%}, "
          f"NPU (int8) {accuracy['npu']:.2%}, same prediction {accuracy['agreement']:.2%}")
    c = report["codec"]
    print(f"Weight codec: {c['int8_weights']} int8 weights (+ int32 biases) -> {c['stream_bits'] // 8} bytes of layer "
          f"streams, {c['stream_bits_per_weight']} bits/weight with biases (order-0 entropy of the weights "
          f"{c['weight_entropy_bits']} bits); {c['container_bytes']} bytes with the container index; "
          f"{'lossless round trip' if c['lossless'] else 'ROUND TRIP FAILED'}: {c['file']}")


def _cmd_demo(args: argparse.Namespace) -> int:
    report = run_demo(Path(args.out), eval_limit=args.images)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_report(report)
    return 0 if report["interpreter"]["bit_exact"] and report["codec"]["lossless"] else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run the main job end to end on the embedded default model")
    parser.add_argument("--out", default="out/demo", help="directory for the program, listing and weight stream")
    parser.add_argument("--images", type=int, default=None, help="evaluate only the first N held-out images")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=_cmd_demo)
