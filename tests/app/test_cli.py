"""The `aipu` entry point: every registered subcommand builds and `--help` works."""
import json
import os
import subprocess
import sys

import pytest

from aipu.app.cli import build_parser


def test_every_subcommand_has_help():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    assert subparsers.choices, "no subcommands registered"
    for name, sub in subparsers.choices.items():
        assert sub.format_help().startswith("usage: aipu " + name)


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "aipu.app.cli", "--help"], capture_output=True, text=True, check=True)
    assert "bench" in out.stdout


def test_unknown_command_is_rejected():
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["no-such-command"])
    assert exc.value.code == 2


def test_closed_pipe_is_not_reported_as_an_error(monkeypatch, capsys):
    """`aipu ... | head`: writing into a pipe whose reader is gone exits quietly with 141."""
    import os

    from aipu.app.cli import main

    read_end, write_end = os.pipe()
    os.close(read_end)
    with capsys.disabled():
        monkeypatch.setattr(sys, "stdout", os.fdopen(write_end, "w"))
        code = main(["isa-doc"])
    assert code == 141


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores to tell two BLAS threads from one")
@pytest.mark.parametrize("argv, environment, expected", [
    (["--threads", "2"], None, 2),
    ([], "2", 2),
    (["--threads", "1"], "2", 1),
])
def test_threads_option_sets_the_blas_threads_of_the_command(monkeypatch, argv, environment, expected):
    from threadpoolctl import threadpool_info

    from aipu.app.cli import THREADS_VARIABLE, main

    if environment is None:
        monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(THREADS_VARIABLE, environment)
    seen = []
    monkeypatch.setattr("aipu.app.cli_program._cmd_isa_doc",
                        lambda args: seen.extend(pool["num_threads"] for pool in threadpool_info()
                                                 if pool["user_api"] == "blas"))
    assert main([*argv, "isa-doc"]) == 0
    assert seen and set(seen) == {expected}


def test_a_blas_that_loads_after_the_limit_is_limited_too():
    """numba's np.dot loads scipy's OpenBLAS on first use; in a fresh process (this one has it loaded) every
    BLAS reports the pinned count after such a call."""
    code = """
import json, numba, numpy as np
from threadpoolctl import threadpool_info
from aipu.app.threads import pinned_threads
with pinned_threads(1):
    numba.njit(lambda a: np.dot(a, a))(np.ones((8, 8)))
    print(json.dumps([(pool["filepath"], pool["num_threads"]) for pool in threadpool_info()]))
"""
    environment = {key: value for key, value in os.environ.items() if not key.endswith("_NUM_THREADS")}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env=environment, check=True)
    pools = json.loads(result.stdout)
    assert any("scipy" in path for path, _ in pools) and all(count == 1 for _, count in pools), pools


@pytest.mark.parametrize("value", ["0", "x", "-3"])
def test_threads_option_refuses_what_is_not_a_thread_count(monkeypatch, capsys, value):
    from aipu.app.cli import THREADS_VARIABLE, main

    monkeypatch.setenv(THREADS_VARIABLE, value)
    with pytest.raises(SystemExit) as exc:
        main(["isa-doc"])
    assert exc.value.code == 2
    assert f"threads = '{value}' (--threads or $AIPU_THREADS)" in capsys.readouterr().err
