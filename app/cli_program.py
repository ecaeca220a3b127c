"""`aipu disasm`, `aipu asm`, `aipu isa-doc`, `aipu register-doc` and `aipu run-layer`: the command format and the
host registers on the command line."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from aipu.app.warm_up import compile_kernels_once
from aipu.sim.machine.arch import DEFAULT, load_hardware_config
from aipu.sim.machine.isa import Unit

MAX_RANDOM_CHANNELS, MAX_RANDOM_SIZE = 512, 256      # a random layer's input stays within 32 MiB


def _cmd_disasm(args: argparse.Namespace) -> int:
    from aipu.sim.machine.program import Program

    sys.stdout.writelines(Program.read(args.program).listing_lines())
    return 0


def _cmd_asm(args: argparse.Namespace) -> int:
    from aipu.sim.machine.program import Program

    config = load_hardware_config(args.config) if args.config else DEFAULT
    program = Program.read_listing(args.listing, config)
    program.write(args.output)
    print(f"{args.output}: {len(program)} commands")
    return 0


def _write_doc(generate, args: argparse.Namespace) -> int:
    """A reference page generated for ``--config`` (default: the built-in configuration), to ``-o`` or stdout."""
    text = generate(load_hardware_config(args.config) if args.config else DEFAULT)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_isa_doc(args: argparse.Namespace) -> int:
    from aipu.app.isa_doc import generate

    return _write_doc(generate, args)


def _cmd_register_doc(args: argparse.Namespace) -> int:
    from aipu.app.register_doc import generate

    return _write_doc(generate, args)


def _cmd_run_layer(args: argparse.Namespace) -> int:
    from aipu.app.sample_layers import random_layer
    from aipu.compiler.layer_file import read_layer
    from aipu.compiler.lowering.conv_layers import lower_conv_layer
    from aipu.sim.interpreter import run

    config = load_hardware_config(args.config) if args.config else DEFAULT
    compile_kernels_once("golden", "interpreter")       # a random layer's reference runs golden kernels too
    layer = (read_layer(args.layer) if args.layer else
             random_layer(np.random.default_rng(args.seed), max_channels=args.max_channels, max_size=args.max_size,
                          with_lut=args.lut))
    tiles = {k: v for k, v in (("tile_k", args.tile_k), ("tile_c", args.tile_c), ("tile_rows", args.tile_rows))
             if v is not None}
    lowered = lower_conv_layer(layer, config, **tiles)
    if args.output:
        lowered.program.write(args.output)
    started = time.perf_counter()
    result = run(lowered.program, lowered.memory(), seed=args.schedule_seed, in_place=True)
    seconds = time.perf_counter() - started
    expected = layer.reference()
    got = lowered.read_output(result.memory)
    mismatches = int(np.count_nonzero(got != expected))
    report = {
        "layer": {"input": list(layer.x.shape), "weights": list(layer.w.shape), "groups": layer.groups,
                  "stride": list(layer.stride), "padding": list(layer.padding), "dilation": list(layer.dilation),
                  "input_type": str(layer.x.dtype), "out_type": layer.out_type.name, "rounding": layer.rounding.name,
                  "lut": None if layer.lut is None else layer.lut_mode.name},
        "plan": {"tile_k": lowered.plan.tile_k, "tile_c": lowered.plan.tile_c, "tile_rows": lowered.plan.tile_rows,
                 "unrolled": lowered.plan.unrolled},
        "commands": {u.name: len(lowered.program.queues[u]) for u in Unit if lowered.program.queues[u]},
        "stats": result.stats.to_dict(), "interpret_seconds": round(seconds, 4),
        "output_elements": int(expected.size), "mismatches": mismatches, "bit_exact": mismatches == 0,
    }
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        layer_text = ", ".join(f"{k}={v}" for k, v in report["layer"].items())
        print(f"layer: {layer_text}")
        print(f"plan: {report['plan']}, commands: {report['commands']}")
        stats = report["stats"]
        print(f"MACs: {stats['macs']}, bytes moved: {stats['bytes_moved']}, "
              f"saturated outputs: {stats['saturated_values']}, interpreted in {seconds:.3f} s")
        print(f"golden comparison: {'bit-exact' if mismatches == 0 else f'{mismatches} MISMATCHES'} "
              f"({expected.size} outputs)")
    return 0 if mismatches == 0 else 1


def positive_int(text: str, high: int = 1 << 31) -> int:
    try:
        value = int(text) if len(text) <= 12 else 0
    except ValueError:
        value = 0
    if not 1 <= value <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer 1 .. {high}")
    return value


def at_most(high: int):
    """An argparse type: a positive integer up to ``high``."""
    return lambda text: positive_int(text, high)


def register(subparsers: argparse._SubParsersAction) -> None:
    disasm = subparsers.add_parser("disasm", help="print a program file as a readable listing")
    disasm.add_argument("program", help="program file (.bin) written by Program.write")
    disasm.set_defaults(func=_cmd_disasm)

    asm = subparsers.add_parser("asm", help="assemble a listing (the disasm format) into a program file")
    asm.add_argument("listing", help="text listing, one command per line")
    asm.add_argument("-o", "--output", required=True, help="program file to write")
    asm.add_argument("--config", help="hardware configuration (.toml/.json) the program is for")
    asm.set_defaults(func=_cmd_asm)

    isa_doc = subparsers.add_parser("isa-doc", help="generate the ISA reference (docs/isa.md)")
    isa_doc.add_argument("-o", "--output", help="write here instead of stdout")
    isa_doc.add_argument("--config", help="hardware configuration (.toml/.json) for the field offsets")
    isa_doc.set_defaults(func=_cmd_isa_doc)

    register_doc = subparsers.add_parser("register-doc", help="generate the host register reference (docs/registers.md)")
    register_doc.add_argument("-o", "--output", help="write here instead of stdout")
    register_doc.add_argument("--config", help="hardware configuration (.toml/.json) for the widths and constants")
    register_doc.set_defaults(func=_cmd_register_doc)

    run_layer = subparsers.add_parser("run-layer", help="lower a conv layer, interpret it, compare with golden")
    run_layer.add_argument("--layer", help=".npz (numpy.savez) with integer arrays x, w, bias, multiplier, shift; "
                           "optional x/w/out_zero_point, groups, stride, padding, dilation, out_type, rounding")
    run_layer.add_argument("--seed", type=int, default=0, help="random layer seed (without --layer)")
    run_layer.add_argument("--max-channels", type=at_most(MAX_RANDOM_CHANNELS), default=24,
                           help=f"random layer: channel limit (at most {MAX_RANDOM_CHANNELS})")
    run_layer.add_argument("--max-size", type=at_most(MAX_RANDOM_SIZE), default=12,
                           help=f"random layer: spatial size limit (at most {MAX_RANDOM_SIZE})")
    run_layer.add_argument("--lut", action="store_true", help="random layer: add a random activation table")
    run_layer.add_argument("--config", help="hardware configuration (.toml/.json)")
    for name in ("tile-k", "tile-c", "tile-rows"):
        run_layer.add_argument(f"--{name}", type=positive_int, help=f"force {name.replace('-', '_')}")
    run_layer.add_argument("--schedule-seed", type=int, help="random legal unit schedule instead of unit order")
    run_layer.add_argument("-o", "--output", help="also write the program file here")
    run_layer.add_argument("--json", action="store_true", help="print the report as JSON")
    run_layer.set_defaults(func=_cmd_run_layer)
