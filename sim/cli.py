"""The single `aipu` command.

Each package contributes subcommands through a module with a ``register(subparsers)``
function, listed in ``SUBCOMMAND_MODULES``; this keeps one entry point without one file
that knows every option.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

SUBCOMMAND_MODULES: tuple[str, ...] = (
    "sim.demo",
    "sim.bench",
    "sim.cli_isa",
    "codec.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aipu", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in SUBCOMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader went away (`aipu ... | head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (ValueError, OSError) as exc:
        # User errors: readers raise sim.errors.InputError (a ValueError) naming file, field, value and what
        # is allowed. Any other exception is a bug and keeps its traceback.
        print(f"aipu {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
