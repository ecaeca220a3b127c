"""The NPU top as Verilog under Verilator or Icarus (cocotb): :class:`NpuBench` puts the testbench DRAM
(:class:`~aipu.sim.cosim.dram.rtl.AxiDram`, exact timing, in logic so that Verilator runs free) on the NPU's AXI
master; the cocotb test (:mod:`aipu.sim.cosim.npu_testbench`) is the host, on AXI4-Lite through cocotbext-axi's
master. The DRAM image, program image included, is loaded by ``$readmemh`` at time 0; the testbench reads back
the DRAM, the buffers and the command-cycle logs after the interrupt. Same RtlResult as
:func:`aipu.sim.cosim.npu_amaranth.run_npu_amaranth`, cycles counted from START.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from amaranth.back import verilog as amaranth_verilog
from amaranth.hdl import ClockDomain, Fragment

from aipu.rtl.banks import buffer_words, memory_names
from aipu.rtl.npu import UNIT_CLASSES
from aipu.rtl.ports import word_count
from aipu.sim.cosim import npu_amaranth, npu_bench
from aipu.sim.cosim.cocotb_run import simulate_test
from aipu.sim.cosim.dram import rtl as dram_rtl
from aipu.sim.cosim.npu_bench import BENCH_TOPLEVEL, NpuBench, bench_ports, verilator_control
from aipu.sim.cosim.result import RtlResult
from aipu.sim.cosim.verilog import (PRELOAD_PLUSARG, VERILATOR_ARGS, cache_root, cached_build, cocotb_libs,
                                    compact_zero_init, compile_verilog, power_of_two_at_least,
                                    simulator_version, sources_digest)
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Program
from aipu.sim.machine.program_image import pack_image, with_image
from aipu.sim.machine.registers import BY_NAME

TESTBENCH_MODULE = "aipu.sim.cosim.npu_testbench"
MIN_TRACE_DEPTH = 256
MIN_DRAM_BYTES = 1 << 16


# Programs a profile-guided build is trained on (``build_npu``'s ``training``), made on demand.
Training = Callable[[], Sequence[tuple[Program, Memory]]]
TRAINING_MAX_CYCLES = 5_000_000
PROFILED_MIN_DRAM_BYTES = 1 << 18      # room for training programs of real layers' shapes


def build_npu(config: HardwareConfig, *, dram_bytes: int, trace_depth: int, simulator: str = "verilator",
              waves: bool = False, threads: int = 1,
              training: Training | None = None) -> tuple[Path, int, int, float | None]:
    """(build directory, DRAM bytes, trace depth, seconds spent compiling or None) of the cached bench build
    that runs an image of ``dram_bytes`` and queues of up to ``trace_depth`` commands (both rounded up to
    powers of two, so that programs of similar size share a build). ``threads`` > 1: a Verilator model that
    evaluates the design on that many threads (:func:`verilator_threads`). ``training``: a profile-guided
    Verilator build, trained on those of its programs that fit it (docs/rtl-cosim.md, "Profile-guided
    builds")."""
    threads = verilator_threads(simulator, threads)
    if training is not None and simulator != "verilator":
        raise ValueError(f"a profile-guided build is Verilator's only (simulator: {simulator})")
    dram = power_of_two_at_least(max(MIN_DRAM_BYTES if training is None else PROFILED_MIN_DRAM_BYTES, dram_bytes))
    depth = power_of_two_at_least(max(MIN_TRACE_DEPTH, trace_depth))
    document = {"top": BENCH_TOPLEVEL, "config": config.to_dict(), "dram": dram, "depth": depth,
                "simulator": simulator, "waves": waves, "threads": threads, "profiled": training is not None,
                "sources": sources_digest(UNIT_CLASSES, roots=(npu_bench, dram_rtl)),
                "versions": [importlib.metadata.version("amaranth"), importlib.metadata.version("cocotb"),
                             simulator_version(simulator)], "cocotb_libs": str(cocotb_libs())}
    key = "npu-" + hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:20]

    def compile_into(staging: Path) -> None:
        bench = NpuBench(config, dram_bytes=dram, trace_depth=depth)
        fragment = Fragment.get(bench, None)
        fragment.add_domains(ClockDomain("sync", reset_less=True))
        text = compact_zero_init(amaranth_verilog.convert(fragment, name=BENCH_TOPLEVEL, ports=bench_ports(bench)),
                                 ("dram_words",))
        verilator = simulator == "verilator"
        compile_verilog(staging, BENCH_TOPLEVEL, text, simulator, waves=waves,
                        build_args=(*VERILATOR_ARGS, "--threads", str(threads)) if verilator else (),
                        control=verilator_control(bench) if verilator else None,
                        profile=None if training is None else lambda build: _train(build, dram, depth, training))

    on_threads = f", {threads} threads" if threads > 1 else ""
    profiled = ", profile-guided" if training is not None else ""
    seconds = cached_build(key, f"the NPU top for {simulator} ({config.mac.rows}x{config.mac.cols} MAC array, "
                                f"{dram} bytes of DRAM{on_threads}{profiled})", compile_into)
    return cache_root() / key, dram, depth, seconds


def _train(directory: Path, dram_bytes: int, depth: int, training: Training) -> None:
    """Run the counting build of a profile-guided build on the training programs that fit it."""
    for program, memory in training():
        queues = _encoded(program)
        placed = with_image(memory.config, memory.dram, pack_image(memory.config, queues))
        if placed[0].size <= dram_bytes and max(len(queue) for queue in queues.values()) <= depth:
            _run_build(directory, dram_bytes, placed, memory, simulator="verilator",
                       max_cycles=TRAINING_MAX_CYCLES, waves=False, run_dir=None)


def _encoded(program: Program) -> dict[Unit, list[bytes]]:
    program.validate()
    return {unit: [command.encode(program.config) for command in queue] for unit, queue in program.queues.items()}


def verilator_threads(simulator: str, threads: int) -> int:
    """``threads`` checked: at least 1, and more only on Verilator. A model of N threads spins N - 1 worker
    threads while it evaluates: it is faster only with N cores free (docs/rtl-cosim.md, "Measured speeds")."""
    if threads < 1 or (threads > 1 and simulator != "verilator"):
        raise ValueError(f"threads {threads}: expected 1, or more on verilator only (simulator: {simulator})")
    return threads


def run_npu_verilog(program: Program, memory: Memory, *, simulator: str = "verilator", max_cycles: int,
                    waves: bool = False, run_dir: Path | None = None, build_at_least: tuple[int, int] = (0, 0),
                    threads: int = 1, training: Training | None = None) -> RtlResult:
    """Execute ``program`` from ``memory`` on the Verilog NPU; stop at ``irq`` or after ``max_cycles``. With
    ``waves`` the run directory (``run_dir``, else a new one) is kept and holds the waveform and
    ``outcome.json`` (``run_step``, ``clock_steps``: where cycle 0 lies in it). ``build_at_least`` (commands,
    DRAM bytes): run on a build at least that large, so that programs of different sizes share one. ``threads``,
    ``training``: the Verilator model's (:func:`build_npu`)."""
    return run_words_npu_verilog(_encoded(program), memory, simulator=simulator, max_cycles=max_cycles,
                                 waves=waves, run_dir=run_dir, build_at_least=build_at_least, threads=threads,
                                 training=training)


def run_words_npu_verilog(queues: dict[Unit, list[bytes]], memory: Memory, *, simulator: str = "verilator",
                          max_cycles: int, waves: bool = False, run_dir: Path | None = None,
                          build_at_least: tuple[int, int] = (0, 0), threads: int = 1,
                          training: Training | None = None) -> RtlResult:
    """Like :func:`run_npu_verilog` on raw command words."""
    config = memory.config
    placed = with_image(config, memory.dram, pack_image(config, queues))
    directory, dram_bytes, depth, seconds = build_npu(
        config, dram_bytes=max(placed[0].size, build_at_least[1]),
        trace_depth=max(build_at_least[0], *(len(queue) for queue in queues.values())), simulator=simulator,
        waves=waves, threads=threads, training=training)
    result = _run_build(directory, dram_bytes, placed, memory, simulator=simulator, max_cycles=max_cycles,
                        waves=waves, run_dir=run_dir)
    result.build_seconds = seconds
    return result


def _run_build(directory: Path, dram_bytes: int, placed: tuple[np.ndarray, int], memory: Memory, *,
               simulator: str, max_cycles: int, waves: bool, run_dir: Path | None) -> RtlResult:
    """A run on the bench build in ``directory`` (of ``dram_bytes`` of DRAM): ``placed``, the DRAM image and
    the program image's base in it (``with_image``); the result read back against ``memory``."""
    config = memory.config
    image, base = placed
    beat = config.dram.bytes_per_cycle
    run_dir = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="aipu_npu_run_"))
    try:
        padded = np.zeros(dram_bytes, np.uint8)
        padded[:image.size] = image
        words = padded.reshape(-1, beat)[:, ::-1]
        (run_dir / "dram.hex").write_text("\n".join(row.tobytes().hex() for row in words) + "\n")
        parts = {b: memory_names(b) for b in Buffer}
        buffers = {name: word_count(config, b) // len(names) for b, names in parts.items() for name in names}
        request = {"writes": npu_amaranth.start_writes(base, image.size), "max_cycles": max_cycles,
                   "registers": {name: BY_NAME[name].offset for name in npu_amaranth.READ_BACK}, "buffers": buffers,
                   "units": [[int(unit), unit.name] for unit in Unit], "dram_words": -(-image.size // beat)}
        (run_dir / "request.json").write_text(json.dumps(request))
        plusargs = [f"+{PRELOAD_PLUSARG.format(memory='dram_words')}={run_dir / 'dram.hex'}"]
        simulate_test(simulator, directory, run_dir, plusargs, toplevel=BENCH_TOPLEVEL,
                      test_module=TESTBENCH_MODULE, waves=waves)
        outcome = json.loads((run_dir / "outcome.json").read_text())
        dram = np.frombuffer(b"".join(int(word).to_bytes(beat, "little") for word in outcome["dram"]), np.uint8)
        outcome["buffers"] = {b: buffer_words([outcome["memories"][name] for name in parts[b]]) for b in Buffer}
        outcome["logs"] = {Unit[name]: entries for name, entries in outcome["logs"].items()}
        return npu_amaranth.result_of(config, memory, dram[:memory.dram.size].copy(), outcome)
    finally:
        if not waves:
            shutil.rmtree(run_dir, ignore_errors=True)


def run_npu_on(backend: str, program: Program, memory: Memory, *, max_cycles: int, waves: bool = False,
               threads: int = 1, training: Training | None = None) -> RtlResult:
    """``program`` on the NPU top in ``backend``: Amaranth's simulator, or Verilator or Icarus. ``threads``,
    ``training``: the Verilator model's (:func:`build_npu`)."""
    verilator_threads(backend, threads)
    if backend == "amaranth":
        return npu_amaranth.run_npu_amaranth(program, memory, max_cycles=max_cycles)
    return run_npu_verilog(program, memory, simulator=backend, max_cycles=max_cycles, waves=waves, threads=threads,
                           training=training)
