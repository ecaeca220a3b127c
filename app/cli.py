"""The single `aipu` command.

Each package contributes subcommands through a module with a ``register(subparsers)``
function, listed in ``SUBCOMMAND_MODULES``; this keeps one entry point without one file
that knows every option.

Threads: the golden model's float32 GEMMs run on numpy's BLAS, the interpreter's compiled loop on scipy's.
Every command runs both on ``--threads`` threads (default: $AIPU_THREADS, else 1; aipu.app.threads), so
that results are reproducible in time and two commands (or test workers) side by side do not oversubscribe
the cores. Benchmarks that
compare against onnxruntime pin both to one thread regardless.

Vectors: every command asks numba for 512-bit vectors on AVX-512 CPUs (aipu.app.vector_width).

Kernels: a command about to compile numba kernels that are not cached says so on stderr first
(aipu.app.warm_up; `aipu warm-up` compiles them all ahead).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from aipu.app.vector_width import use_full_width_vectors

SUBCOMMAND_MODULES: tuple[str, ...] = (
    "aipu.app.demo",
    "aipu.app.bench",
    "aipu.app.cli_program",
    "aipu.app.cli_compile",
    "aipu.app.cli_prune",
    "aipu.app.cli_compress",
    "aipu.app.cli_multimodel",
    "aipu.app.cli_report",
    "aipu.app.cli_codec",
    "aipu.app.cli_tai",
    "aipu.app.cli_rtl",
    "aipu.app.cli_sweep",
    "aipu.app.warm_up",
)


THREADS_VARIABLE = "AIPU_THREADS"


def _thread_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= 1024:
        raise argparse.ArgumentTypeError(f"threads = {text!r} (--threads or ${THREADS_VARIABLE}): expected an integer 1 .. 1024")
    return count


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aipu", description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=_thread_count, default=os.environ.get(THREADS_VARIABLE, "1"),
                        help=f"BLAS threads of the golden model (default: ${THREADS_VARIABLE}, else 1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        use_full_width_vectors()       # before anything is compiled
    except ValueError as exc:
        print(f"aipu: error: {exc}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    from aipu.app.threads import pinned_threads

    try:
        with pinned_threads(args.threads):
            return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader went away (`aipu ... | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (ValueError, OSError) as exc:
        # User errors: readers raise aipu.sim.machine.errors.InputError (a ValueError) naming file, field, value and what
        # is allowed. Any other exception is a bug and keeps its traceback.
        print(f"aipu {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
