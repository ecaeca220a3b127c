"""`aipu compile` (ONNX + calibration set -> program directory) and `aipu run` (a program directory on inputs)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from aipu.app.warm_up import compile_kernels_once, program_kernels
from aipu.compiler.compression import policy_argument
from aipu.sim.machine.arch import DEFAULT, load_hardware_config


def _cmd_compile(args: argparse.Namespace) -> int:
    from aipu.compiler.calibrate import METHODS
    from aipu.compiler.driver import compile_model, low_sqnr_layers, write
    from aipu.compiler.graph import parse_input_shapes
    from aipu.compiler.quant_options import QuantOptions
    from aipu.compiler.weight_formats import read_layer_formats
    from aipu.sim.machine.errors import InputError

    if args.method not in METHODS:
        raise ValueError(f"--method {args.method!r}: expected one of {', '.join(METHODS)}")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size {args.batch_size}: expected at least 1")
    options = QuantOptions(method=args.method, symmetric_activations=args.symmetric,
                           per_channel_weights=not args.per_tensor_weights, n_std=args.n_std,
                           percentile=args.percentile, momentum=args.momentum, scheme=args.scheme,
                           int16=tuple(args.int16 or ()), target_sqnr_db=args.target_sqnr, weights=args.weights,
                           layer_weights=read_layer_formats(args.layer_weights) if args.layer_weights else (),
                           activations=args.activations)
    config = load_hardware_config(args.config) if args.config else DEFAULT
    compile_kernels_once("golden", *(("codec",) if args.compress else ()))
    started = time.perf_counter()
    try:
        compiled = compile_model(args.model, args.calib, config=config,
                                 input_shapes=parse_input_shapes(args.input_shape), options=options,
                                 batch_size=args.batch_size, progress=not args.quiet, threads=args.threads,
                                 evaluation_path=args.eval, compress=args.compress)
        manifest = write(compiled, Path(args.output), args.model)
    except MemoryError:         # a model within the compiler's limits can still outgrow this machine
        raise InputError("memory", "exhausted", "a model whose activations fit this machine's memory several "
                         "times over (calibration and the layer report hold one run of them, float and int8)").within(
            args.model) from None
    seconds = time.perf_counter() - started
    for note in manifest["notes"]:
        print(f"aipu compile: note: {note}", file=sys.stderr)
    _warn_low_sqnr(manifest["layers"])
    if args.json:
        print(json.dumps({**manifest, "compile_seconds": round(seconds, 3)}, indent=1))
        return 0
    print(f"{args.output}: {len(compiled.qmodel.ops)} operators -> {manifest['commands']} commands "
          f"{manifest['commands_per_unit']}, DRAM image {manifest['dram_bytes']} bytes, compiled in {seconds:.2f} s")
    weights = manifest["weights"]
    if weights["layers"]:
        formats = "/".join(sorted({layer["format"] for layer in weights["layers"]}))
        print(f"weights: {weights['bytes']} bytes {formats} ({weights['int8_bytes']} as int8)")
    circulant = [f"{layer['name']} (L {layer['circulant']})" for layer in weights["layers"] if "circulant" in layer]
    if circulant:
        print(f"weights: block-circulant {', '.join(circulant)}: DRAM holds their first rows, LOAD expands them")
    if "weight_compression" in manifest:
        packed = manifest["weight_compression"]
        print(f"weights: {packed['decoded_tiles']} of {packed['tiles']} tiles decoded by WDEC (--compress "
              f"{packed['policy']}), {packed['weight_bytes']} bytes in {packed['stream_bytes']} "
              f"({packed['bits_per_weight']:.2f} bits per weight)")
    if "evaluation" in manifest:
        result = manifest["evaluation"]
        print(f"top-1 on {result['samples']} labelled samples ({result['output']}): float {result['float_top1']:.2%}, "
              f"NPU {result['npu_top1']:.2%}; same class {result['agreement']:.2%}")
    if not manifest["layers"]:
        print("(no per-layer report: give --calib samples to compare every layer with float)")
        return 0
    low = low_sqnr_layers(manifest["layers"])
    print(f"{'layer':<28} {'kind':<8} {'weights':<11} {'output':<16} {'type':<6} {'scale':>10} {'zp':>5} "
          f"{'SQNR dB':>9} {'clipped':>8}")
    for row in manifest["layers"]:
        shape = "x".join(map(str, row["shape"]))
        sqnr = "-" if row["sqnr_db"] is None else f"{row['sqnr_db']:.1f}" + ("!" if row in low else " ")
        clipped = "-" if row["clipped_fraction"] is None else f"{row['clipped_fraction']:.2%}"
        table = f"  table inputs {row['table_input_range']}" if "table_input_range" in row else ""
        print(f"{row['name'][:28]:<28} {row['kind']:<8} {row.get('weights', '-'):<11} {shape:<16} {row['dtype']:<6} "
              f"{row['scale']:>10.4g} {row['zero_point']:>5} {sqnr:>9} {clipped:>8}{table}")
    return 0


def _warn_low_sqnr(rows: list[dict]) -> None:
    """One warning line on stderr (also under --quiet) naming the layers far from float, worst first."""
    from aipu.compiler.driver import LOW_SQNR_DB, low_sqnr_layers

    low = sorted(low_sqnr_layers(rows), key=lambda row: row["sqnr_db"])
    if low:
        named = ", ".join(f"{row['name']} ({row['sqnr_db']:.1f} dB)" for row in low[:5])
        more = f" and {len(low) - 5} more" if len(low) > 5 else ""
        print(f"aipu compile: warning: {len(low)} layer{'s' if len(low) > 1 else ''} under {LOW_SQNR_DB:g} dB SQNR "
              f"against float: {named}{more}; --method extrema keeps every range, --int16 NAME widens a tensor",
              file=sys.stderr)
    for row in rows:
        if "low_channels" in row:
            low = row["low_channels"]
            shown = ", ".join(map(str, low["first"])) + (", ..." if low["count"] > len(low["first"]) else "")
            print(f"aipu compile: warning: output {row['output']!r}: {low['count']} of {low['of']} channels under "
                  f"{LOW_SQNR_DB:g} dB SQNR against float (worst {low['worst_db']:.1f} dB: channels {shown}): "
                  f"their range is a small part of the tensor's; --int16 {row['output']} widens it", file=sys.stderr)


def _cmd_run(args: argparse.Namespace) -> int:
    from aipu.compiler.program_dir import read_program_dir
    from aipu.sim.machine.errors import executing

    directory = read_program_dir(args.program)
    with executing(directory.path):           # a weight stream in the DRAM image that does not decode
        return _run_directory(directory, args)


def _run_directory(directory, args: argparse.Namespace) -> int:
    from aipu.compiler.lowering.memory import load_tensor
    from aipu.sim.interpreter import prepare

    samples = read_inputs(directory, args.input)
    count = next(iter(samples.values())).shape[0]
    prepared = prepare(directory.program, directory.dram.size)
    compile_kernels_once(*program_kernels(directory.program, interpreted=True))
    outputs: dict[str, list[np.ndarray]] = {entry.tensor.name: [] for entry in directory.outputs}
    started = time.perf_counter()
    for index in range(count):
        result = prepared.run(input_memory(directory, samples, index), seed=args.seed, in_place=True)
        for entry in directory.outputs:
            tensor = entry.tensor
            value = load_tensor(result.memory.dram, entry.dram_address, tensor.shape, tensor.dtype)
            outputs[tensor.name].append(tensor.dequantize(value))
    seconds = time.perf_counter() - started
    results = {name: np.concatenate(values) for name, values in outputs.items()}
    print(f"{args.program}: {count} input(s), {len(directory.program)} commands each, "
          f"{seconds / count * 1e3:.2f} ms per run on the interpreter")
    for name, value in results.items():
        print(f"  {name}: {value.shape[1:]} float; " + _summary(value))
    if args.output:
        written = Path(args.output)
        written = written if written.suffix == ".npz" else written.with_name(written.name + ".npz")  # as savez does
        np.savez(written, **results)
        print(f"  written: {written}")
    if args.compare_onnx:
        _compare_with_float(directory, samples, results)
    if args.cycles:
        _print_cycles(directory)
    return 0


def read_inputs(directory, path) -> dict[str, np.ndarray]:
    """The float samples in ``path`` (.npy or .npz, [samples, ...]) for the directory's inputs, checked against
    their shapes (InputError naming the file, array and shape otherwise)."""
    from aipu.compiler.calibrate import read_samples

    return read_samples(path, {entry.tensor.name: entry.tensor.shape for entry in directory.inputs})


def input_memory(directory, samples: dict[str, np.ndarray], index: int):
    """The program's memory image with sample ``index`` of the float ``samples`` quantized into its inputs."""
    from aipu.compiler.lowering.memory import store_tensor
    from aipu.sim.machine.memory import Memory

    memory = Memory.create(directory.program.config, directory.dram)
    for entry in directory.inputs:
        store_tensor(memory.dram, entry.dram_address,
                     entry.tensor.quantize(samples[entry.tensor.name][index:index + 1]))
    return memory


def _print_cycles(directory) -> None:
    """The cycle model's summary of the program (docs/cycle-model.md): total, MAC utilisation, and each unit's
    busy cycles and what the shared DRAM added; `aipu report` has the per-layer story."""
    from aipu.sim.cycle import simulate
    from aipu.sim.machine.isa import Unit
    from aipu.sim.machine.memory import Memory

    program = directory.program
    config = program.config
    result = simulate(program, Memory.create(config, directory.dram))
    total = result.total_cycles
    print(f"  cycle model (one DRAM shared by the DMA units): {total:,} cycles ({total / config.clock_mhz:,.1f} µs "
          f"at {config.clock_mhz} MHz), MAC utilisation {result.mac_utilisation:.1%}")
    for unit in Unit:
        if result.busy[unit]:
            count = len(program.queues[unit])
            stall = result.dram_stall[unit]
            print(f"    {unit.name}: {count} command{'s' if count != 1 else ''}, busy {result.busy[unit]:,} cycles "
                  f"({result.busy[unit] / total:.0%})" + (f", DRAM stall {stall:,}" if stall else ""))
    print("  per layer, with stalls and DRAM traffic: aipu report")


def _summary(value: np.ndarray) -> str:
    flat = value.reshape(value.shape[0], -1)
    if value.ndim == 2:
        return "argmax " + ", ".join(str(int(i)) for i in flat.argmax(axis=1)[:16])
    return f"range [{flat.min():.4g}, {flat.max():.4g}]"


def _compare_with_float(directory, samples: dict[str, np.ndarray], results: dict[str, np.ndarray]) -> None:
    import onnx

    from aipu.app.ort_compare import single_thread_session
    from aipu.compiler.program_dir import FLOAT_MODEL_FILE
    from aipu.compiler.quantize import sqnr_db
    from aipu.sim.machine.errors import InputError

    path = directory.path / FLOAT_MODEL_FILE
    try:
        session = single_thread_session(onnx.load(path))
    except Exception as exc:   # onnx and onnxruntime raise many types on a damaged file
        raise InputError("float model", type(exc).__name__, f"the float.onnx `aipu compile` wrote ({exc})").within(
            path) from None
    count = next(iter(samples.values())).shape[0]
    runs = [session.run(None, {name: array[index:index + 1] for name, array in samples.items()})
            for index in range(count)]
    for position, (name, got) in enumerate(results.items()):
        want = np.concatenate([run[position] for run in runs])
        line = (f"  vs onnxruntime on {FLOAT_MODEL_FILE} {name}: SQNR {sqnr_db(want, got):.1f} dB, "
                f"max |diff| {np.abs(want - got).max():.4g}")
        if got.ndim == 2:
            line += f", same argmax {np.mean(want.argmax(1) == got.argmax(1)):.1%}"
        print(line)


def register(subparsers: argparse._SubParsersAction) -> None:
    compile_parser = subparsers.add_parser("compile", help="compile an ONNX float model to one NPU program directory")
    compile_parser.add_argument("model", help="ONNX model (opset 11+): float, or quantized by onnxruntime.quantization")
    compile_parser.add_argument("--calib", help=".npz (or .npy) of calibration inputs, [samples, ...]; a "
                                "pre-quantized model (QDQ or QOperator) needs none")
    compile_parser.add_argument("-o", "--output", required=True, help="program directory to write")
    compile_parser.add_argument("--config", help="hardware configuration (.toml/.json); default: the reference")
    compile_parser.add_argument("--input-shape", action="append", metavar="NAME=1x3xHxW",
                                help="fix a symbolic input dimension (repeatable)")
    compile_parser.add_argument("--method", default="extrema",
                                help="calibration: extrema, mean, nstd, kld, percentile or brelu (T/AI 115.1 "
                                     "N-sigma bounds, N from --n-std) (default extrema)")
    compile_parser.add_argument("--scheme", default="affine",
                                help="affine (scale and zero point per tensor, default) or pow2 (the shift-quantization patent: every "
                                     "scale a power of two, 7-bit weights, requantization by shifts)")
    compile_parser.add_argument("--weights", metavar="FORMAT",
                                help="conv and fc weights: int8 (default), int4 (T/AI 115.1 INT4 parameters: two "
                                     "products a MAC cell), int4-dual (two INT4 planes a kernel, added by the "
                                     "requantizer), codebook:K (K = 2..16 k-means centres a layer, stored as 1-, 2- "
                                     "or 4-bit indices that LOAD expands) or pow2 (7-bit at a power-of-two scale); a "
                                     "layer that cannot take a format keeps int4 or int8, named in the notes")
    compile_parser.add_argument("--activations", metavar="FORMAT", default="int8",
                                help="activations: int8 (default: uint8/int8 by range, asymmetric), int16 (every "
                                     "tensor that only tables, pooling, reshapes or the outputs read), int4 (a conv "
                                     "or fc output that only conv or fc layers with INT4 weights read: T/AI 115.1 "
                                     "§7.2.4.3, two a byte, with --weights int4; the rest named in the notes) or "
                                     "pow2 (int8 at a power-of-two scale, T/AI 115.1 fixed-point activations)")
    compile_parser.add_argument("--layer-weights", metavar="FILE.json",
                                help="per-layer weight formats, a JSON object of node name to format (mixed "
                                     "precision, e.g. {\"conv1\": \"int8\"}); the rest take --weights")
    compile_parser.add_argument("--symmetric", action="store_true", help="symmetric activations (zero point 0)")
    compile_parser.add_argument("--int16", action="append", metavar="TENSOR",
                                help="quantize this tensor to int16 (repeatable): one that tables, pooling, "
                                     "element-wise operators or the outputs read, not a conv or fc")
    compile_parser.add_argument("--target-sqnr", type=float, metavar="DB",
                                help="make tensors int16 around every layer under DB of SQNR against float, where "
                                     "their readers allow, until each reaches it (or none can be widened more)")
    compile_parser.add_argument("--per-tensor-weights", action="store_true", help="one weight scale per layer")
    compile_parser.add_argument("--n-std", type=float, default=3.0, help="nstd: N (default 3)")
    compile_parser.add_argument("--percentile", type=float, default=99.99, help="percentile: p (default 99.99)")
    compile_parser.add_argument("--momentum", type=float, default=None, help="mean: EMA momentum (default equal)")
    compile_parser.add_argument("--batch-size", type=int, default=16, help="samples per calibration batch")
    compile_parser.add_argument("--eval", metavar="DATA.npz",
                                help="labelled samples (the inputs and an integer array 'labels'): top-1 of float "
                                     "and int8 in the report")
    compile_parser.add_argument("--compress", nargs="?", const="hidden", type=policy_argument, metavar="POLICY",
                                help="conv weights entropy-coded (T/AI 115.1 chapter 10, npu profile) and decoded "
                                     "on chip by WDEC, tile by tile where that is smaller: POLICY 'hidden' (the "
                                     "default) only in layers whose decoding the tiler estimates to hide behind "
                                     "their compute, 'all' wherever it saves bytes, whatever it costs in cycles")
    compile_parser.add_argument("--json", action="store_true", help="print the manifest as JSON")
    compile_parser.add_argument("--quiet", action="store_true", help="no progress bar")
    compile_parser.set_defaults(func=_cmd_compile)

    run_parser = subparsers.add_parser("run", help="run a compiled program directory on inputs (interpreter)")
    run_parser.add_argument("program", help="directory written by `aipu compile`")
    run_parser.add_argument("--input", required=True, help=".npy or .npz of float inputs, [samples, ...]")
    run_parser.add_argument("--output", help="write the float outputs to this .npz")
    run_parser.add_argument("--compare-onnx", action="store_true",
                            help="also run the model on onnxruntime (the float graph, or the pre-quantized one) and "
                                 "compare")
    run_parser.add_argument("--seed", type=int, default=None, help="a random legal schedule instead of the fixed one")
    run_parser.add_argument("--cycles", action="store_true",
                            help="also print the cycle model's summary (cycles, MAC utilisation, busy units)")
    run_parser.set_defaults(func=_cmd_run)
