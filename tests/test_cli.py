"""The `aipu` entry point: every registered subcommand builds and `--help` works."""
import subprocess
import sys

import pytest

from sim.cli import build_parser


def test_every_subcommand_has_help():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    assert subparsers.choices, "no subcommands registered"
    for name, sub in subparsers.choices.items():
        assert sub.format_help().startswith("usage: aipu " + name)


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "sim.cli", "--help"], capture_output=True, text=True, check=True)
    assert "bench" in out.stdout


def test_unknown_command_is_rejected():
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["no-such-command"])
    assert exc.value.code == 2
