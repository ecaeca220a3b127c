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


def test_closed_pipe_is_not_reported_as_an_error(monkeypatch, capsys):
    """`aipu ... | head`: writing into a pipe whose reader is gone exits quietly with 141."""
    import os

    from sim.cli import main

    read_end, write_end = os.pipe()
    os.close(read_end)
    with capsys.disabled():
        monkeypatch.setattr(sys, "stdout", os.fdopen(write_end, "w"))
        code = main(["isa-doc"])
    assert code == 141
