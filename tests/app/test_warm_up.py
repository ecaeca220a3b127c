"""A command about to compile numba kernels says so once on stderr, and not where they are cached; `aipu warm-up`
compiles every kernel the warm check looks at."""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from aipu.app.cli import main
from aipu.app.warm_up import NOTICE, compile_kernels, compile_kernels_once, one_compiler, program_kernels
from aipu.sim.interpreter import kernel_cache
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.program import Command, Program


@pytest.fixture
def warmed(monkeypatch):
    """The groups compiled or loaded, with the cold kernels ``cold`` names."""
    calls, cold = [], []
    monkeypatch.setattr(kernel_cache, "cold_kernels", lambda groups: list(cold))
    monkeypatch.setattr(kernel_cache, "warm_up", lambda groups: calls.append(("load", groups)))
    monkeypatch.setattr("aipu.app.warm_up.compile_kernels", lambda groups: calls.append(("compile", groups)) or 1.5)
    return calls, cold


def test_the_notice_comes_before_compiling_only_where_a_kernel_is_not_cached(warmed, capsys):
    calls, cold = warmed
    assert compile_kernels_once("codec") is None and compile_kernels_once("golden", "interpreter") is None
    assert calls == [] and capsys.readouterr() == ("", "")
    assert compile_kernels_once("codec", load=True) is None and calls == [("load", ("codec",))]
    cold.append("aipu.codec.compiled.aec_decoder.decode_bin")
    assert compile_kernels_once() is None and len(calls) == 1          # no kernels asked for
    assert compile_kernels_once("codec") == 1.5 and calls[-1] == ("compile", ("codec",))
    assert compile_kernels_once(*kernel_cache.GROUPS, load=True) == 1.5
    assert calls[-2:] == [("compile", kernel_cache.GROUPS), ("load", kernel_cache.GROUPS)]
    assert capsys.readouterr() == ("", f"{NOTICE}\n{NOTICE}\n")


def test_a_second_compiler_waits_for_the_first():
    entered = threading.Event()

    def second():
        with one_compiler():
            entered.set()

    with one_compiler():
        thread = threading.Thread(target=second)
        thread.start()
        assert not entered.wait(0.3)
    assert entered.wait(10)
    thread.join()


def test_kernels_compile_in_processes_of_their_own():
    """(Here they load: the session warmed the cache.)"""
    assert compile_kernels(("codec", "interpreter")) > 0


def test_warm_up_check_names_the_cold_groups(warmed, capsys):
    _, cold = warmed
    assert main(["warm-up", "--check"]) == 0
    assert capsys.readouterr().out == f"all {len(kernel_cache.kernels())} numba kernels are cached for this machine\n"
    cold.append("aipu.sim.interpreter.run_loop.run_rows")
    assert main(["warm-up", "--check"]) == 1
    assert capsys.readouterr().out.startswith("numba kernels not cached for this machine: golden 1 of ")


def test_a_program_needs_the_codec_only_with_a_wdec_command_and_the_rest_only_interpreted():
    program = Program()
    program.append(Command.make(Opcode.FINISH, unit=Unit.WDEC))
    assert program_kernels(program, interpreted=False) == ()
    assert program_kernels(program, interpreted=True) == ("golden", "interpreter")
    program.queues[Unit.WDEC].insert(0, Command.make(Opcode.WDEC))
    assert program_kernels(program, interpreted=False) == ("codec",)


def _aipu(cache_dir, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aipu.app.cli", *argv], capture_output=True, text=True,
                          timeout=3600, env={**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)})


@pytest.mark.slow
def test_from_an_empty_cache_the_notice_comes_once_and_warm_up_warms_everything(tmp_path):
    """Compiles the codec's kernels, then all of them (minutes)."""
    tensors, container, cache = tmp_path / "w.npz", tmp_path / "w.nnr", tmp_path / "numba"
    np.savez(tensors, w=np.arange(-72, 72, dtype=np.int8).reshape(4, 4, 3, 3))
    first, second = (_aipu(cache, "codec", "encode", str(tensors), "-o", str(container)) for _ in range(2))
    assert first.returncode == second.returncode == 0 and first.stderr == f"{NOTICE}\n" and second.stderr == ""
    assert _aipu(cache, "codec", "decode", str(container), "-o", str(tmp_path / "back.npz")).stderr == ""
    assert _aipu(cache, "warm-up", "--check").returncode == 1
    warm_up = _aipu(cache, "warm-up")
    assert warm_up.returncode == 0 and warm_up.stderr == "" and "compiled the " in warm_up.stdout
    check = _aipu(cache, "warm-up", "--check")
    assert check.returncode == 0 and check.stdout.startswith("all "), check.stdout
