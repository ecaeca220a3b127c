"""Run a program on the Verilog System under Verilator or Icarus (cocotb), with the semantics of
:func:`aipu.sim.cosim.amaranth_run.run_amaranth`: the same RtlResult, cycles counted from ``run``, the same
error reporting. The build comes from the on-disk cache (:mod:`aipu.sim.cosim.verilog`); this process and the
simulator's exchange ``request.json`` and ``outcome.json`` in a run directory.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from aipu.rtl.ports import word_bytes, word_count
from aipu.rtl.system import CYCLE_BITS, System
from aipu.sim.cosim.amaranth_run import SETTLE_CYCLES, result_from_outcome, run_amaranth, run_words_amaranth
from aipu.sim.cosim.result import RtlResult
from aipu.sim.cosim.verilog import PRELOAD_PLUSARG, TOPLEVEL, get_build, quiet_runner
from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.isa import COMMAND_BYTES, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Program

TESTBENCH_MODULE = "aipu.sim.cosim.cocotb_testbench"


def waves_requested(waves: bool) -> bool:
    """``waves=True`` or ``WAVES=1`` in the environment (cocotb's own switch)."""
    return waves or os.environ.get("WAVES", "0") not in ("", "0")


def run_verilog(program: Program, memory: Memory, units, *, simulator: str = "verilator", max_cycles: int,
                waves: bool = False, run_dir: str | Path | None = None,
                build_at_least: tuple[int, int] = (0, 0)) -> RtlResult:
    """Execute ``program`` from ``memory`` on a Verilog System of ``units``; stop at done, an error or
    ``max_cycles``. With waves (or ``WAVES=1``) the run directory is kept and holds the waveform; its path is
    printed on stderr. ``build_at_least`` (commands, DRAM bytes): run on a build at least that large, so that
    programs of different sizes (a benchmark's layers) share one."""
    program.validate()
    queues = {unit: [command.encode(program.config) for command in queue] for unit, queue in program.queues.items()}
    return run_words_verilog(queues, memory, units, simulator=simulator, max_cycles=max_cycles, waves=waves,
                             run_dir=run_dir, build_at_least=build_at_least)


def run_words_verilog(queues: dict[Unit, list[bytes]], memory: Memory, units, *, simulator: str = "verilator",
                      max_cycles: int, waves: bool = False, run_dir: str | Path | None = None,
                      build_at_least: tuple[int, int] = (0, 0)) -> RtlResult:
    """Like :func:`run_verilog` on raw command words (which may be illegal: the units must refuse them)."""
    config = memory.config
    present = {cls.UNIT for cls in units}
    for unit, queue in queues.items():
        if queue and unit not in present:
            raise ValueError(f"the program has {len(queue)} commands for {unit.name}, which this System lacks")
    waves = waves_requested(waves)
    build = get_build(config, units, program_depth=max(build_at_least[0], *(len(queue) for queue in queues.values())),
                      dram_bytes=max(build_at_least[1], memory.dram.size), simulator=simulator, waves=waves)
    system = System(config, units, program_depth=build.program_depth, dram_bytes=build.dram_bytes)
    _never_elaborated(system)
    keep = waves or run_dir is not None
    directory = Path(run_dir) if run_dir is not None else Path(tempfile.mkdtemp(prefix="aipu-cosim-"))
    directory.mkdir(parents=True, exist_ok=True)
    try:
        (directory / "request.json").write_text(json.dumps(_request(system, queues, memory, max_cycles)))
        _simulate(build, directory, _write_preload(directory, system, queues, memory))
        raw = json.loads((directory / "outcome.json").read_text())
        if raw["unresolved"]:
            raise RuntimeError(f"{simulator}: the System's outputs {', '.join(raw['unresolved'])} hold X or Z bits "
                               f"after the run (WAVES=1 keeps the run and its waveform)")
        outcome = _outcome(system, raw)
    finally:
        if keep:
            print(f"aipu cosim: {simulator} run kept in {directory}", file=sys.stderr)
        else:
            shutil.rmtree(directory, ignore_errors=True)
    return replace(result_from_outcome(system, memory, outcome), build_seconds=build.seconds)


def _never_elaborated(system: System) -> None:
    """This System only describes the build (widths of the status outputs, error names): it is never elaborated
    here, so Amaranth's warning about unused elaboratables would be noise."""
    for elaboratable in (system, *system.units.values(), *system.memories().values()):
        elaboratable._MustUse__used = True


def _hex_image(data: bytes, nbytes: int) -> str:
    """``data`` as ``$readmemh`` text of little-endian words of ``nbytes`` (as the System packs a memory): only the
    words not zero, each after its ``@address``."""
    rows = np.frombuffer(data.ljust(-(-len(data) // nbytes) * nbytes, b"\0"), np.uint8).reshape(-1, nbytes)
    return "".join(f"@{i:x} {rows[i][::-1].tobytes().hex()}\n" for i in np.flatnonzero(rows.any(axis=1)))


def _write_preload(directory: Path, system: System, queues: dict[Unit, list[bytes]], memory: Memory) -> list[str]:
    """One ``$readmemh`` file per memory the run preloads; the plusargs that point the System's memories at them."""
    config = system.config
    images = {f"buffer_{b.name.lower()}": (memory.buffers[b].tobytes(), word_bytes(config, b)) for b in Buffer}
    images["dram"] = (memory.dram.tobytes(), config.dram.bytes_per_cycle)
    images.update({f"queue_{unit.name.lower()}": (b"".join(queues.get(unit, ())), COMMAND_BYTES)
                   for unit in system.units})
    plusargs = []
    for name, (data, nbytes) in images.items():
        text = _hex_image(data, nbytes)
        if text:
            path = directory / f"{name}.hex"
            path.write_text(text)
            plusargs.append(f"+{PRELOAD_PLUSARG.format(memory=name)}={path}")
    return plusargs


def _request(system: System, queues: dict[Unit, list[bytes]], memory: Memory, max_cycles: int) -> dict:
    config, names = system.config, {unit: unit.name.lower() for unit in system.units}
    dram_words = -(-memory.dram.size // config.dram.bytes_per_cycle)
    return {
        "max_cycles": max_cycles, "dram_words": dram_words,
        "queue_lengths": [len(queues.get(unit, ())) for unit in Unit],
        "index_bits": len(system.queue_lengths.as_value()) // len(Unit),
        "field_bits": len(system.error_fields.as_value()) // len(Unit), "unit_count": len(Unit),
        "units": [[int(unit), name] for unit, name in names.items()],
        "read_back": {f"buffer_{b.name.lower()}": word_count(config, b) for b in Buffer} | {"dram": dram_words},
        "settle_cycles": SETTLE_CYCLES, "cycle_bits": CYCLE_BITS,
    }


def _outcome(system: System, raw: dict) -> dict:
    """``outcome.json`` keyed as :func:`result_from_outcome` expects (Units and Buffers, not names)."""
    by_name = {unit.name.lower(): unit for unit in system.units}
    memories = raw["memories"]
    return {**raw, "fields": {by_name[n]: v for n, v in raw["fields"].items()},
            "retired": {by_name[n]: v for n, v in raw["retired"].items()},
            "logs": {by_name[n]: v for n, v in raw["logs"].items()},
            "buffers": {b: memories[f"buffer_{b.name.lower()}"] for b in Buffer}, "dram": memories["dram"]}


def _simulate(build, directory: Path, plusargs: list[str]) -> None:
    simulate_test(build.simulator, build.directory, directory, plusargs, toplevel=TOPLEVEL,
                  test_module=TESTBENCH_MODULE, waves=build.waves)


def simulate_test(simulator: str, build_directory: Path, directory: Path, plusargs: list[str], *, toplevel: str,
                  test_module: str, waves: bool) -> None:
    """Run the cocotb ``test_module`` on the build of ``toplevel`` in run directory ``directory``, which it must
    leave an ``outcome.json`` in; a failure raises with the tail of the simulation log."""
    runner = quiet_runner(simulator)
    log = directory / "simulation.log"
    if simulator == "icarus":
        plusargs = [*plusargs, f"+dumpfile_path={directory / (toplevel + '.fst')}"]
    try:
        runner.test(test_module=test_module, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog",
                    build_dir=build_directory, test_dir=directory, results_xml=str(directory / "results.xml"),
                    waves=waves, plusargs=plusargs, extra_env={"COCOTB_LOG_LEVEL": "WARNING"}, log_file=log)
    except (RuntimeError, SystemExit) as exc:
        failure = exc
    else:
        failure = None
    if failure is not None or not (directory / "outcome.json").exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.exists() else ""
        raise RuntimeError(f"{simulator} simulation in {directory} failed ({failure}):\n{tail}")


BACKENDS = ("amaranth", "verilator", "icarus")
BACKEND_VARIABLE = "AIPU_SIM"


def verilog_backends() -> list[str]:
    """The Verilog simulators tests compare on: ``$AIPU_SIM`` (comma-separated, e.g. ``icarus`` or
    ``verilator,icarus``), else Verilator."""
    names = [name.strip() for name in os.environ.get(BACKEND_VARIABLE, "verilator").split(",") if name.strip()]
    unknown = [name for name in names if name not in BACKENDS[1:]]
    if unknown:
        raise ValueError(f"${BACKEND_VARIABLE} = {','.join(names)}: expected verilator and/or icarus")
    return names


def run_on(backend: str, program: Program, memory: Memory, units, *, max_cycles: int,
           build_at_least: tuple[int, int] = (0, 0)) -> RtlResult:
    """``program`` on ``backend`` (one of BACKENDS): the one entry point tests and benches parametrize over."""
    if backend == "amaranth":
        return run_amaranth(program, memory, units, max_cycles=max_cycles)
    return run_verilog(program, memory, units, simulator=backend, max_cycles=max_cycles,
                       build_at_least=build_at_least)


def run_words_on(backend: str, queues: dict[Unit, list[bytes]], memory: Memory, units, *,
                 max_cycles: int) -> RtlResult:
    """Raw command words on ``backend``, as :func:`run_on`."""
    if backend == "amaranth":
        return run_words_amaranth(queues, memory, units, max_cycles=max_cycles)
    return run_words_verilog(queues, memory, units, simulator=backend, max_cycles=max_cycles)
