"""A waveform of the cycles around a co-simulation mismatch (``WAVES=1``).

A whole run's VCD of a System is gigabytes for a real layer; the cycles that matter are those of the command
that wrote the first wrong element. :func:`mismatch_report` names the mismatch and, with ``WAVES=1``, runs the
program again on a tracing build up to the end of that window and keeps only the window's part of the VCD
(every signal's value at its first cycle, then the changes). Verilator only: Icarus writes FST, whose
changes cannot be cut by a text filter, and keeps its whole waveform (``WAVES=1`` on any run).
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from aipu.sim.cosim.cocotb_run import run_verilog, waves_requested
from aipu.sim.cosim.result import Mismatch, RtlResult, first_mismatch
from aipu.sim.interpreter import Result
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Program

MARGIN_CYCLES = 64          # before the command's start and after its retire
UNRETIRED_CYCLES = 1000     # the last cycles of the run when the RTL never retired the command
WINDOW_FILE = "mismatch_window.vcd"


def window_cycles(mismatch: Mismatch, total_cycles: int) -> tuple[int, int]:
    """(first, last) cycle, counted from ``run``, of the waveform kept for ``mismatch``."""
    if mismatch.cycles is None:
        return max(0, total_cycles - UNRETIRED_CYCLES), total_cycles
    start, retire = mismatch.cycles
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


def mismatch_report(program: Program, memory: Memory, units, expected: Result, got: RtlResult, *,
                    simulator: str) -> str | None:
    """None if the RTL's memory equals the interpreter's; else the first mismatch, and with ``WAVES=1`` on
    Verilator the path of a VCD of the cycles around it."""
    mismatch = first_mismatch(program, expected, got)
    if mismatch is None:
        return None
    if not waves_requested(False) or simulator != "verilator":
        return str(mismatch)
    first, last = window_cycles(mismatch, got.total_cycles)
    directory = Path(tempfile.mkdtemp(prefix="aipu-mismatch-"))
    run_verilog(program, memory, units, simulator=simulator, max_cycles=last, waves=True, run_dir=directory)
    outcome = json.loads((directory / "outcome.json").read_text())
    run_step, clock = outcome["run_step"], outcome["clock_steps"]
    window = directory / WINDOW_FILE
    trim_vcd(directory / "dump.vcd", window, run_step + first * clock, run_step + last * clock)
    (directory / "dump.vcd").unlink()
    return f"{mismatch}\ncycles {first}..{last} of the run: {window}"
