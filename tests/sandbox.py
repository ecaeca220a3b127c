"""A forked child process that runs one test case at a time under an address-space limit, for the fuzzers
(the codec's, and the CLI's: every file family a user hands `aipu`).

A case that hangs is killed after CASE_SECONDS, one that allocates without bound dies at MEMORY_LIMIT, and
either way the test fails with the input instead of taking the machine down.
"""
from __future__ import annotations

import contextlib
import io
import multiprocessing
import resource
import warnings

import pytest
from hypothesis import HealthCheck, given, settings

MEMORY_LIMIT = 2 << 30          # address space of the sandbox process (it starts at about 0.4 GiB)
#: per case. The slowest legitimate case takes well under a second warm, but a case that meets a numba kernel
#: signature nothing compiled before compiles it first: tens of seconds on a loaded machine
CASE_SECONDS = 120.0


def _serve(connection) -> None:
    """The child: run each (function, argument) under the memory limit and send back the outcome."""
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = MEMORY_LIMIT if hard == resource.RLIM_INFINITY else min(MEMORY_LIMIT, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    while True:
        try:
            function, argument = connection.recv()
        except EOFError:
            return
        try:
            outcome = ("ok", function(argument))
        except Exception as error:      # reported to the parent, which fails the test with the input
            outcome = ("raised", f"{type(error).__name__}: {str(error)[:1000]}")
        connection.send(outcome)


class Sandbox:
    """A forked child that runs test cases under MEMORY_LIMIT; it serves many cases, and is replaced after
    one kills it or runs past its time limit."""

    def __init__(self) -> None:
        self._process = None
        self._connection = None

    def run(self, function, argument, seconds: float = CASE_SECONDS) -> tuple:
        """('ok', result), or ('raised' | 'timeout' | 'died', what happened)."""
        if self._process is None:
            context = multiprocessing.get_context("fork")
            self._connection, child = context.Pipe()
            self._process = context.Process(target=_serve, args=(child,), daemon=True)
            self._process.start()
            child.close()
        self._connection.send((function, argument))
        if not self._connection.poll(seconds):
            self.close()
            return ("timeout", f"no answer within {seconds} s")
        try:
            return self._connection.recv()
        except EOFError:
            self._process.join()
            code = self._process.exitcode
            self.close()
            return ("died", f"exit code {code} (the memory limit is {MEMORY_LIMIT >> 20} MiB)")

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
            self._connection.close()
            self._process = None


def run_case(sandbox: Sandbox, function, data) -> object:
    """The case's result; a hang, a death or an exception escaping ``function`` fails, showing the input."""
    outcome = sandbox.run(function, data)
    shown = data.hex() if isinstance(data, bytes) else repr(data)
    assert outcome[0] == "ok", f"{outcome[0]}: {outcome[1]}\ninput: {shown}"
    return outcome[1]


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """Child side: ``aipu`` with its exit code, stdout and stderr. stderr starts with the warnings a terminal
    would show (Python's default filters), which pytest's own capture of warnings would otherwise swallow."""
    from aipu.app.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for hidden in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
            warnings.simplefilter("ignore", hidden)
        code = main(argv)
    shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in caught)
    return code, out.getvalue(), shown + err.getvalue()


def profiles(quick: int, long: int) -> list:
    """A fuzzer's two runs, for ``pytest.mark.parametrize("profile", ...)``: ``quick`` seeded examples in the
    default suite, ``long`` random ones under ``-m slow``."""
    common = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck))
    return [pytest.param(settings(derandomize=True, max_examples=quick, **common), id="quick"),
            pytest.param(settings(max_examples=long, **common), id="long", marks=pytest.mark.slow)]


def fuzz(profile, strategy, check) -> None:
    """Run ``check`` on examples of ``strategy`` under the hypothesis settings ``profile``."""
    profile(given(strategy)(check))()


def assert_one_line_error(code: int, err: str, command: str, path: str) -> None:
    """Exit status 2 and one line on stderr naming ``path`` first, as the CLI promises for bad input."""
    assert code == 2, err
    assert err.startswith(f"aipu {command}: error: {path}") and err.count("\n") == 1, err
    assert "Traceback" not in err


def accepted_or_one_line(code: int, err: str, command: str, path: str) -> None:
    if code != 0:
        assert_one_line_error(code, err, command, path)
