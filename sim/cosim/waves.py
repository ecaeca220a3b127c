"""A waveform of the cycles around a co-simulation divergence (``WAVES=1``, ``aipu rtl run --waves``).

A whole run's VCD of a System is gigabytes for a real layer; the cycles that matter are those of the command
that wrote the first wrong element (:func:`mismatch_report`), or of the first command whose cycles differ from
the cycle model's. :func:`window_waveform` runs the program again on a tracing build up to the end of that
window; on Verilator it keeps only the window's part of the VCD (every signal's value at its first cycle, then
the changes). Icarus writes FST, whose changes a text filter cannot cut, and Amaranth's simulator writes its own
VCD: both keep the run up to the window's end.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from aipu.sim.cosim.amaranth_run import run_amaranth
from aipu.sim.cosim.cocotb_run import run_verilog, waves_requested
from aipu.sim.cosim.npu_amaranth import run_npu_amaranth
from aipu.sim.cosim.npu_verilog import BENCH_TOPLEVEL, run_npu_verilog
from aipu.sim.cosim.result import RtlResult, first_mismatch
from aipu.sim.cosim.verilog import TOPLEVEL
from aipu.sim.interpreter import Result
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Program

MARGIN_CYCLES = 64          # before the command's start and after its retire
UNRETIRED_CYCLES = 1000     # the last cycles of the run when the RTL never retired the command
WINDOW_FILE = "mismatch_window.vcd"
AMARANTH_FILE = "amaranth_run.vcd"


def window_cycles(cycles: tuple[int, int] | None, total_cycles: int) -> tuple[int, int]:
    """(first, last) cycle, counted from ``run``, of the waveform kept around a command the RTL ran in ``cycles``
    (start, retire; None if it never retired it)."""
    if cycles is None:
        return max(0, total_cycles - UNRETIRED_CYCLES), total_cycles
    start, retire = cycles
    return max(0, start - MARGIN_CYCLES), retire + MARGIN_CYCLES


def trim_vcd(source: Path, target: Path, first_time: int, last_time: int) -> None:
    """Copy the VCD ``source`` to ``target`` keeping the times in [first_time, last_time] only: the header, a
    ``$dumpvars`` block at the first kept time with every signal's value then, and the changes up to the last.
    Reads ``source`` once, holding one value per signal."""
    values: dict[str, str] = {}
    inside = False
    with open(source) as vcd, open(target, "w") as out:
        for line in vcd:
            out.write(line)
            if line.startswith("$enddefinitions"):
                break
        for line in vcd:
            if line.startswith("#"):
                time = int(line[1:])
                if time > last_time:
                    break
                if not inside and time >= first_time:
                    out.write(f"#{time}\n$dumpvars\n{''.join(values.values())}$end\n")
                    inside = True
                    continue
            if inside:
                out.write(line)
            elif line[0] in "01xzXZ":                     # a scalar: value then identifier
                values[line[1:].strip()] = line
            elif line[0] in "bBrR":                       # a vector or real: value, space, identifier
                values[line.split()[1]] = line


def window_waveform(program: Program, memory: Memory, units, window: tuple[int, int], *, simulator: str,
                    top: str = "system") -> Path:
    """Run ``program`` again on ``top`` ("system" or "npu"), tracing, up to the last cycle of ``window`` and
    return the waveform's path: on Verilator a VCD of the window only; Icarus's FST and Amaranth's VCD hold the
    run up to the window's end."""
    first, last = window
    directory = Path(tempfile.mkdtemp(prefix="aipu-mismatch-"))
    if simulator == "amaranth":
        if top == "npu":
            run_npu_amaranth(program, memory, max_cycles=last, vcd=str(directory / AMARANTH_FILE))
        else:
            run_amaranth(program, memory, units, max_cycles=last, vcd=str(directory / AMARANTH_FILE))
        return directory / AMARANTH_FILE
    if top == "npu":
        run_npu_verilog(program, memory, simulator=simulator, max_cycles=last, waves=True, run_dir=directory)
    else:
        run_verilog(program, memory, units, simulator=simulator, max_cycles=last, waves=True, run_dir=directory)
    if simulator == "icarus":
        return directory / f"{BENCH_TOPLEVEL if top == 'npu' else TOPLEVEL}.fst"
    outcome = json.loads((directory / "outcome.json").read_text())
    run_step, clock = outcome["run_step"], outcome["clock_steps"]
    trim_vcd(directory / "dump.vcd", directory / WINDOW_FILE, run_step + first * clock, run_step + last * clock)
    (directory / "dump.vcd").unlink()
    return directory / WINDOW_FILE


def mismatch_report(program: Program, memory: Memory, units, expected: Result, got: RtlResult, *,
                    simulator: str, waves: bool = False) -> str | None:
    """None if the RTL's memory equals the interpreter's; else the first mismatch, and with ``waves`` (or
    ``WAVES=1``) the path of a waveform of the cycles around it (:func:`window_waveform`)."""
    mismatch = first_mismatch(program, expected, got)
    if mismatch is None:
        return None
    if not waves_requested(waves):
        return str(mismatch)
    first, last = window = window_cycles(mismatch.cycles, got.total_cycles)
    path = window_waveform(program, memory, units, window, simulator=simulator)
    return f"{mismatch}\ncycles {first}..{last} of the run: {path}"
