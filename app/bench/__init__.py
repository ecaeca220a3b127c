"""`aipu bench NAME`: benchmarks that print JSON numbers.

Benchmarks register themselves in ``BENCHMARKS`` (name -> module path of a ``run()`` that
returns a JSON-able dict); they are imported lazily so that a slow import of one does not
tax the others.
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
    "rtl": "aipu.app.bench.rtl",
    "units": "aipu.app.bench.units",
    "compile": "aipu.app.bench.compile",
    "cycle": "aipu.app.bench.cycle",
    "quant": "aipu.app.bench.quant",
    "parts": "aipu.app.bench.parts",
}


def run_benchmark(name: str) -> dict:
    module = importlib.import_module(BENCHMARKS[name])
    result = module.run()
    result.setdefault("benchmark", name)
    result.setdefault("machine", {"python": platform.python_version(), "cpu": platform.processor() or platform.machine()})
    return result


def _cmd_bench(args: argparse.Namespace) -> int:
    names = sorted(BENCHMARKS) if args.name == "all" else [args.name]
    results = [run_benchmark(name) for name in names]
    json.dump(results[0] if len(results) == 1 else results, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark and print JSON")
    parser.add_argument("name", choices=sorted(BENCHMARKS) + ["all"], help="which benchmark")
    parser.set_defaults(func=_cmd_bench)
