"""`aipu demo`: the main job end to end on the embedded default model.

The default model is a small CNN trained here on 8x8 handwritten digits (app/models/digits_cnn.onnx, see
app/models/train_digits.py): three conv+ReLU layers, global average pooling and a fully connected layer. The
demo does what `aipu compile` and `aipu run` do: it compiles the ONNX file with its calibration images into
one program directory (the whole network, head included, as NPU commands), runs that program on the
functional interpreter for every held-out image, checks each result bit for bit against the quantized
model's golden reference, reports accuracy next to the float model and to onnxruntime's own static
quantization of the same model and images, and compresses the quantized weights with the chapter-10 codec.
Last, as `aipu rtl run` does, it runs the program on the RTL (Verilator) for a few held-out images and checks
every byte against the interpreter and every command's cycles against the cycle model.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnx

from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH


def _display_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (shorter in the report)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def run_demo(out_dir: Path, eval_limit: int | None = None, listing_lines: int = 24) -> dict:
    from aipu import codec
    from aipu.app.bench.codec import order0_entropy_bits
    from aipu.app.ort_compare import single_thread_session, static_quantization
    from aipu.app.report import summed_stats, write_report
    from aipu.app.warm_up import compile_kernels_once
    from aipu.compiler.driver import compile_model, write
    from aipu.compiler.program_dir import PROGRAM_FILE, read_program_dir
    from aipu.compiler.qir import QConv
    from aipu.sim.interpreter import prepare

    # compiled (a first run) or loaded here, so that no one-time cost falls into the times below
    kernel_seconds = compile_kernels_once("golden", "codec", "interpreter", load=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = np.load(DATA_PATH)
    images, labels = data["eval_images"][:eval_limit], data["eval_labels"][:eval_limit]
    calibration = out_dir / "calibration.npz"
    np.savez(calibration, images=data["calibration_images"])
    compiled = compile_model(MODEL_PATH, calibration)
    program_dir = out_dir / "program"
    manifest = write(compiled, program_dir, _display_path(MODEL_PATH))
    network, qmodel = compiled.network, compiled.qmodel
    listing = network.program.disassemble()
    (out_dir / "model.lst").write_text(listing)
    name, output = qmodel.inputs[0], qmodel.outputs[0]

    prepared = prepare(network.program, network.dram.size)
    predictions, runs, mismatches, macs, started = [], [], 0, 0, time.perf_counter()
    for image in images:
        x = qmodel.quantize_inputs({name: image[None]})
        result = prepared.run(network.memory(x), in_place=True)
        logits = network.read(result.memory, output)
        mismatches += int(np.count_nonzero(logits != qmodel.run(x)[output]))
        macs += result.stats.macs
        runs.append(result.stats)
        predictions.append(int(np.argmax(logits)))
    interpret_seconds = time.perf_counter() - started
    # the cycle model's report of the program as the NPU top runs it, with the saturations of these runs
    performance, _ = write_report(read_program_dir(program_dir), out_dir / "report.html", dram="npu",
                                  stats=summed_stats(runs), prepared=prepared)
    cycles = performance["summary"]
    predictions = np.array(predictions)
    session = single_thread_session(compiled.graph.to_onnx())
    float_predictions = np.array([int(np.argmax(session.run(None, {name: image[None]})[0])) for image in images])
    # the same float model and calibration images through onnxruntime's own static quantization (QDQ,
    # per-channel int8 weights): the accuracy this project's int8 is set beside
    ort_path = static_quantization(MODEL_PATH, out_dir / "onnxruntime_int8.onnx", data["calibration_images"], name)
    ort_session = single_thread_session(onnx.load(ort_path))
    ort_predictions = np.array([int(np.argmax(ort_session.run(None, {name: image[None]})[0])) for image in images])

    convs = [op for op in qmodel.ops if isinstance(op, QConv)]
    weights = {f"{op.name}.weight": op.w for op in convs}
    weights.update({f"{op.name}.bias": op.bias for op in convs})
    started = time.perf_counter()
    stream, layer_infos = codec.encode_with_info(weights)
    encode_seconds = time.perf_counter() - started
    decoded = codec.decode(stream)
    lossless = all(np.array_equal(decoded[key], value) for key, value in weights.items())
    (out_dir / "weights.nnr").write_bytes(stream)
    int8_weights = np.concatenate([op.w.ravel() for op in convs])
    stream_bits = 8 * sum(info.length for info in layer_infos)
    program_path = program_dir / PROGRAM_FILE

    return {
        "model": {"file": _display_path(MODEL_PATH), "layers": manifest["layers"]},
        "program": {"directory": str(program_dir), "file": str(program_path), "listing": str(out_dir / "model.lst"),
                    "bytes": program_path.stat().st_size, "dram_bytes": manifest["dram_bytes"],
                    "commands": manifest["commands_per_unit"], "head": listing.splitlines()[:listing_lines]},
        "interpreter": {"images": len(images), "seconds": round(interpret_seconds, 3), "macs": macs,
                        "golden_mismatches": mismatches, "bit_exact": mismatches == 0},
        "kernels": {"compile_seconds": None if kernel_seconds is None else round(kernel_seconds, 1)},
        "cycles": {"report": str(out_dir / "report.html"), "dram_model": performance["metadata"]["dram_model"],
                   **{key: cycles[key] for key in ("total_cycles", "time_us", "clock_mhz", "mac_utilisation",
                                                   "long_pole_unit")},
                   "saturated_values": sum(layer["saturated_values"] or 0 for layer in performance["layers"])},
        "accuracy": {"images": len(images), "float": round(float((float_predictions == labels).mean()), 4),
                     "npu": round(float((predictions == labels).mean()), 4),
                     "onnxruntime_int8": round(float((ort_predictions == labels).mean()), 4),
                     "agreement": round(float((predictions == float_predictions).mean()), 4)},
        "codec": {"file": str(out_dir / "weights.nnr"), "container_bytes": len(stream),
                  "int8_weights": int(int8_weights.size), "stream_bits": stream_bits,
                  "stream_bits_per_weight": round(stream_bits / int8_weights.size, 3),
                  "weight_entropy_bits": round(order0_entropy_bits(int8_weights) / int8_weights.size, 3),
                  "lossless": lossless, "encode_seconds": round(encode_seconds, 3)},
    }


def _print_report(report: dict) -> None:
    print(f"AIPU demo: digits CNN ({report['model']['file']}) compiled with `aipu compile` (extrema calibration, "
          "per-tensor activations, per-channel int8 weights)")
    for layer in report["model"]["layers"]:
        shape = "x".join(map(str, layer["shape"]))
        sqnr = "exact" if layer["sqnr_db"] is None else f"{layer['sqnr_db']:.1f} dB"
        print(f"  {layer['name']:<10} {layer['kind']:<7} -> {shape:<9} {layer['dtype']:<6} scale {layer['scale']:.4g} "
              f"zp {layer['zero_point']:<4} SQNR {sqnr}")
    program = report["program"]
    print(f"\nProgram directory {program['directory']}: {program['file']} ({program['bytes']} bytes), DRAM image "
          f"{program['dram_bytes']} bytes; commands per unit: {program['commands']}")
    print(f"Listing (first {len(program['head'])} lines; all in {program['listing']}):")
    for line in program["head"]:
        print("  " + line)
    interp, accuracy = report["interpreter"], report["accuracy"]
    exact = "bit-exact" if interp["bit_exact"] else f"{interp['golden_mismatches']} MISMATCHES"
    print(f"\nInterpreter: the whole network on {interp['images']} held-out images, {interp['macs']} MACs in "
          f"{interp['seconds']} s; logits vs the quantized model's golden reference: {exact}")
    if report["kernels"]["compile_seconds"] is not None:
        print(f"  (before it all, the numba kernels were compiled once, in {report['kernels']['compile_seconds']} s, "
              "for numba's cache: later runs load them)")
    cycles = report["cycles"]
    print(f"Cycle model: {cycles['total_cycles']:,} cycles an image ({cycles['time_us']:,.1f} µs at {cycles['clock_mhz']} "
          f"MHz, as the NPU top runs it: command fetch and DMA on one AXI master), MAC utilisation "
          f"{cycles['mac_utilisation']:.1%}, long pole "
          f"{cycles['long_pole_unit']}; {cycles['saturated_values']:,} values clamped to their range (fused ReLUs "
          f"included) in those runs; per-layer report: {cycles['report']}")
    print(f"Top-1 accuracy on {accuracy['images']} held-out images: float {accuracy['float']:.2%}, "
          f"NPU (int8) {accuracy['npu']:.2%}, same prediction {accuracy['agreement']:.2%}; onnxruntime's own "
          f"static quantization of the same model and images {accuracy['onnxruntime_int8']:.2%}")
    c = report["codec"]
    print(f"Weight codec: {c['int8_weights']} int8 weights (+ int32 biases) -> {c['stream_bits'] // 8} bytes of layer "
          f"streams, {c['stream_bits_per_weight']} bits/weight with biases (order-0 entropy of the weights "
          f"{c['weight_entropy_bits']} bits); {c['container_bytes']} bytes with the container index; "
          f"{'lossless round trip' if c['lossless'] else 'ROUND TRIP FAILED'}: {c['file']}")


# The compiled program on the RTL, as `aipu rtl run` runs it (app/rtl_run.py).
RTL_IMAGES = 3       # one Verilator run each, after the one build of the DEFAULT NPU top (cached)


def run_on_rtl(program_dir: Path, count: int):
    """The demo's program directory on the RTL (Verilator) for the first ``count`` held-out images: every byte
    against the interpreter's, every command's start and retire cycle against the cycle model's."""
    from aipu.app.rtl_run import run_directory
    from aipu.compiler.program_dir import read_program_dir

    directory = read_program_dir(program_dir)
    with np.load(DATA_PATH) as data:
        images = data["eval_images"][:count]
    return run_directory(directory, {directory.inputs[0].tensor.name: images}, backend="verilator")


def _print_rtl(rtl) -> None:
    runs = rtl.runs
    cycles = sorted({run.result.total_cycles for run in runs})
    rates = [run.result.total_cycles / run.result.run_seconds for run in runs if run.result.run_seconds]
    built = f"; Verilog model built in {rtl.build_seconds:.0f} s (cached)" if rtl.build_seconds is not None else ""
    print(f"RTL (Verilator, the NPU top started over its host registers, its commands fetched and its data moved "
          f"through one AXI master): the program on {len(runs)} held-out images, {sum(run.agrees for run in runs)} "
          f"equal to the interpreter in every byte and to the cycle model in every command's cycles; "
          f"{'/'.join(f'{c:,}' for c in cycles)} cycles an image, {min(rates, default=0):,.0f} simulated "
          f"cycles/s{built}")
    for line in (line for run in runs if not run.agrees for line in run.lines()):
        print("  " + line)


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.rtl_images < 0:
        raise ValueError(f"--rtl-images {args.rtl_images}: expected 0 (no RTL runs) or more")
    report = run_demo(Path(args.out), eval_limit=args.images)
    if not args.json:
        _print_report(report)
    rtl = run_on_rtl(Path(report["program"]["directory"]), args.rtl_images) if args.rtl_images else None
    if args.json:
        json.dump({**report, "rtl": rtl.to_dict() if rtl else None}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif rtl:
        _print_rtl(rtl)
    return 0 if report["interpreter"]["bit_exact"] and report["codec"]["lossless"] and (not rtl or rtl.agrees) else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run the main job end to end on the embedded default model")
    parser.add_argument("--out", default="out/demo", help="directory for the program directory, listing and weights")
    parser.add_argument("--images", type=int, default=None, help="evaluate only the first N held-out images")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--rtl-images", type=int, default=RTL_IMAGES,
                        help=f"held-out images run on the RTL (Verilator; default {RTL_IMAGES}; the first run builds "
                             "the Verilog model, minutes)")
    parser.add_argument("--no-rtl", dest="rtl_images", action="store_const", const=0, help="skip the RTL runs")
    parser.set_defaults(func=_cmd_demo)
