"""`aipu warm-up`, and the notice a command gives before it compiles numba kernels.

The kernels compile on their first use, then numba's on-disk cache holds them
(aipu.sim.interpreter.kernel_cache). Without a word, a first run would sit silent, or at 0 % of a progress
bar, for minutes. So each command that runs kernels calls :func:`compile_kernels_once` before its work: where
a kernel of the groups it uses is not cached, it prints :data:`NOTICE` on stderr (stdout stays clean for
JSON) and compiles those groups at once. `.ci/bootstrap.sh` runs `aipu warm-up` after installing, so that
no command needs to.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from pathlib import Path

NOTICE = "compiling kernels (first run only)"


def compile_kernels_once(*groups: str, load: bool = False) -> float | None:
    """Where a kernel of ``groups`` (of kernel_cache.GROUPS) is not in numba's cache, print NOTICE on stderr and
    compile the groups' kernels; with ``load``, load them where cached (a timed loop then meets no one-time cost
    either way). The seconds compiling took, None where nothing was compiled."""
    if not groups:
        return None
    from aipu.sim.interpreter.kernel_cache import cold_kernels, warm_up

    seconds = None
    if cold_kernels(groups):
        print(NOTICE, file=sys.stderr, flush=True)
        with one_compiler():                 # another process may have compiled them while this one waited
            seconds = compile_kernels(groups) if cold_kernels(groups) else None
    if load:
        warm_up(groups)
    return seconds


def compile_kernels(groups: tuple[str, ...]) -> float:
    """Compile (or load) the kernels of ``groups`` for numba's cache, each part of kernel_cache.PARTS in a
    process of its own where the machine has the cores; the seconds it took."""
    from aipu.sim.interpreter.kernel_cache import PARTS, warm_up

    parts = [tuple(group for group in part if group in groups) for part in PARTS]
    parts = [part for part in parts if part]
    started = time.perf_counter()
    with ProcessPoolExecutor(min(len(parts), os.cpu_count() or 1), mp_context=get_context("spawn")) as pool:
        list(pool.map(warm_up, parts))
    return time.perf_counter() - started


@contextmanager
def one_compiler():
    """Hold the lock of this installation's kernels: a second process that would compile them (a command run
    while the bootstrap warms up, the test session's controller) waits for the first instead of compiling the
    same kernels beside it on the same cores."""
    package = str(Path(__file__).resolve().parent.parent)
    name = f"aipu-kernels-{hashlib.sha1(package.encode()).hexdigest()[:12]}.lock"
    with open(Path(tempfile.gettempdir()) / name, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def program_kernels(program, *, interpreted: bool) -> tuple[str, ...]:
    """The kernel groups that timing ``program`` on the cycle model, and with ``interpreted`` running it on the
    interpreter, may compile: the codec's where a WDEC command's stream is decoded, the golden model's and the
    run loop's where the interpreter runs."""
    from aipu.sim.machine.isa import Opcode, Unit

    wdec = any(command.opcode == Opcode.WDEC for command in program.queues[Unit.WDEC])
    return (("golden", "interpreter") if interpreted else ()) + (("codec",) if wdec else ())


def _cmd_warm_up(args: argparse.Namespace) -> int:
    from aipu.sim.interpreter.kernel_cache import GROUPS, cold_kernels, kernels

    total, cold = len(kernels()), {group: len(cold_kernels((group,))) for group in GROUPS}
    if not any(cold.values()):
        print(f"all {total} numba kernels are cached for this machine")
        return 0
    if args.check:
        print("numba kernels not cached for this machine: " + ", ".join(
            f"{group} {count} of {len(kernels((group,)))}" for group, count in cold.items() if count))
        return 1
    with one_compiler():
        seconds = compile_kernels(GROUPS)
    print(f"compiled the {total} numba kernels in {seconds:.1f} s; later runs load them from numba's cache")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("warm-up", help="compile the numba kernels once, for numba's cache (the "
                                                   "bootstrap does it; a first run would otherwise)")
    parser.add_argument("--check", action="store_true",
                        help="only tell whether they are cached (exit status 1 if not)")
    parser.set_defaults(func=_cmd_warm_up)
