"""`aipu report`: the performance report of a compiled program directory (docs/cycle-model.md, "Reports"):
one HTML page, and beside it the same figures as JSON and CSV."""
from __future__ import annotations

import argparse
from pathlib import Path

from aipu.app.warm_up import compile_kernels_once, program_kernels
from aipu.sim.cycle import DRAM_MODELS


def _cmd_report(args: argparse.Namespace) -> int:
    from aipu.app.report import write_report
    from aipu.compiler.program_dir import read_program_dir
    from aipu.sim.interpreter import prepare

    directory = read_program_dir(args.program)
    prepared = prepare(directory.program, directory.dram.size)
    compile_kernels_once(*program_kernels(directory.program, interpreted=bool(args.input)))
    stats = _input_run(directory, prepared, args.input, args.seed) if args.input else None
    document, written = write_report(directory, Path(args.output), dram=args.dram, stats=stats, seed=args.seed,
                                     timeline_layer=args.timeline_layer, prepared=prepared)
    summary = document["summary"]
    print(f"{args.program}: {summary['total_cycles']:,} cycles ({summary['time_us']:,.1f} µs at {summary['clock_mhz']} "
          f"MHz), MAC utilisation {summary['mac_utilisation']:.1%}, {len(document['layers'])} layers, long pole "
          f"{summary['long_pole_unit']}, DRAM {args.dram}")
    if summary["wdec_pole_layers"]:
        print(f"weight decoding (WDEC) outlasts CONV in {summary['wdec_pole_layers']} of {len(document['layers'])} "
              "layers")
    print(f"layer overlap: the layers' spans add up to {summary['layer_span_sum_cycles']:,} cycles and cover "
          f"{summary['layer_covered_cycles']:,} together: they overlap by {summary['layer_overlap_cycles']:,}")
    print("written: " + ", ".join(str(path) for path in written))
    return 0


def _input_run(directory, prepared, path: str, seed: int | None):
    """The interpreter's saturation and LUT-range counts, summed over every sample of ``path``."""
    from aipu.app.cli_compile import input_memory
    from aipu.app.report import summed_stats
    from aipu.compiler.calibrate import read_samples

    samples = read_samples(path, {entry.tensor.name: entry.tensor.shape for entry in directory.inputs})
    count = next(iter(samples.values())).shape[0]
    return summed_stats(prepared.run(input_memory(directory, samples, index), seed=seed, in_place=True).stats
                        for index in range(count))


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help="performance report of a compiled program: HTML, JSON and CSV")
    parser.add_argument("program", help="directory written by `aipu compile`")
    parser.add_argument("-o", "--output", default="report.html",
                        help="the HTML page; the JSON (.json) and CSV (.layers.csv, .units.csv) go beside it")
    parser.add_argument("--dram", choices=DRAM_MODELS, default="npu",
                        help="npu: the NPU top, cycle for cycle (default); ports: a DRAM port per DMA unit, as in "
                             "the test harness; shared: a fluid estimate, fast on long WDEC streams")
    parser.add_argument("--input", help=".npy or .npz of float inputs: saturation and LUT-range counts of a run on "
                                        "the interpreter (without: the calibration's, from the manifest)")
    parser.add_argument("--seed", type=int, default=None, help="schedule seed of that run (default: the fixed one)")
    parser.add_argument("--timeline-layer", help="layer whose unit timeline is drawn (default: the longest)")
    parser.set_defaults(func=_cmd_report)
