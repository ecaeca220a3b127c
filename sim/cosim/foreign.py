"""Someone else's Verilog module in a unit's place in the System (`aipu rtl verify`).

:func:`foreign_unit` checks the module's ports against the unit's signature (names as :func:`flat_ports`
gives them, plus ``clk`` and ``rst``; directions; widths) by parsing the file with Verilator's
``--json-only``, and returns a subclass of the unit whose ``elaborate`` is an ``Instance`` of the module: the
System wires it as it wires the native unit, and :func:`aipu.sim.cosim.verilog.get_build` compiles the file
(``VERILOG_SOURCES``) with the System's Verilog. The file is untrusted: every way it can be wrong (missing,
unreadable, not Verilog, no such module, other ports) raises :class:`ForeignVerilogError` with one line.
"""
from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal
from amaranth.hdl._ir import PortDirection

from aipu.rtl.unit import UnitComponent
from aipu.sim.cosim.verilog import TOPLEVEL, flat_ports, verilator_environment
from aipu.sim.machine.arch import HardwareConfig

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*\Z")
CLOCK_PORTS = {"clk": ("input", 1), "rst": ("input", 1)}
# the System's own modules (aipu_system and its submodules): a file defining one would stand in for the testbench
SYSTEM_MODULE = re.compile(rf"^\s*module\s+\\?{TOPLEVEL}\b", re.M)
PARSE_SECONDS = 120


class ForeignVerilogError(ValueError):
    """A user's Verilog file that cannot stand in for the unit; the message is one line naming the file."""


def expected_ports(unit_class: type[UnitComponent], config: HardwareConfig) -> dict[str, tuple[str, int]]:
    """Port name -> (``input`` | ``output``, width) of the unit's module as `aipu rtl verilog` writes it."""
    unit = unit_class(config)
    unit._MustUse__used = True      # only its signature is read: never elaborated
    ports = {name: ("input" if direction is PortDirection.Input else "output", len(value))
             for name, (value, direction) in flat_ports(unit).items()}
    return ports | CLOCK_PORTS


def module_ports(path: Path, top: str) -> dict[str, tuple[str, int]]:
    """Port name -> (direction, width) of module ``top`` in the Verilog file ``path``, as Verilator parses it.
    Raises ForeignVerilogError with Verilator's first error line if it cannot."""
    with tempfile.TemporaryDirectory(prefix="aipu-ports-") as scratch, verilator_environment():
        try:
            parsed = subprocess.run(["verilator", "--json-only", "-Wno-fatal", "-Wno-lint", "-Wno-style",
                                     "--top-module", top, "--Mdir", scratch, str(path)],
                                    capture_output=True, text=True, errors="replace", timeout=PARSE_SECONDS)
        except subprocess.TimeoutExpired:
            raise ForeignVerilogError(f"{path}: Verilator did not parse it within {PARSE_SECONDS} s") from None
        if parsed.returncode != 0:
            errors = [line for line in parsed.stderr.splitlines() if line.startswith("%Error")]
            first = errors[0] if errors else (parsed.stderr.strip().splitlines() or ["no message"])[0]
            raise ForeignVerilogError(f"{path}: Verilator cannot read module {top} in it: {first.strip()}")
        tree = json.loads((Path(scratch) / f"V{top}.tree.json").read_text())
    types = {entry["addr"]: entry for misc in tree["miscsp"] if misc["type"] == "TYPETABLE"
             for entry in misc["typesp"]}
    module = next(entry for entry in tree["modulesp"] if entry["name"] == top)
    return {statement["name"]: (statement["direction"].lower(), _width(types.get(statement["dtypep"], {})))
            for statement in module["stmtsp"] if statement["type"] == "VAR" and statement.get("isPrimaryIO")}


def _width(dtype: dict) -> int | None:
    """Bits of a plain vector type (``range`` ``hi:lo``, none: one bit); None for anything else."""
    if dtype.get("type") != "BASICDTYPE":
        return None
    high, _, low = dtype.get("range", "0:0").partition(":")
    return abs(int(high) - int(low)) + 1


def port_problem(found: dict[str, tuple[str, int]], expected: dict[str, tuple[str, int]]) -> str | None:
    """The first way ``found`` differs from ``expected`` (in the expected ports' order), in words; None if none."""
    def shown(port):
        direction, width = port
        return f"{direction} of {width if width is not None else 'unknown'} bit{'s' if width != 1 else ''}"

    for name, port in expected.items():
        if name not in found:
            return f"port {name}: missing, expected {shown(port)}"
        if found[name] != port:
            return f"port {name}: found {shown(found[name])}, expected {shown(port)}"
    extra = sorted(set(found) - set(expected))
    return f"port {extra[0]}: found {shown(found[extra[0]])}, expected no such port" if extra else None


class ForeignUnit(UnitComponent):
    """Mixin for :func:`foreign_unit`: the unit's signature, an instance of ``TOP`` as its logic."""

    TOP: str
    VERILOG_SOURCES: tuple[tuple[str, str], ...]    # (file name, text) compiled with the System

    def elaborate(self, platform) -> Module:
        m = Module()
        ports = {("i_" if direction is PortDirection.Input else "o_") + name: value
                 for name, (value, direction) in flat_ports(self).items()}
        m.submodules.foreign = Instance(self.TOP, i_clk=ClockSignal("sync"),
                                        i_rst=ResetSignal("sync", allow_reset_less=True), **ports)
        return m


def foreign_unit(unit_class: type[UnitComponent], config: HardwareConfig, path, top: str) -> type[UnitComponent]:
    """The unit class ``unit_class`` with module ``top`` of the Verilog file ``path`` as its logic, once its
    ports are checked against ``config``'s; ForeignVerilogError (one line) if the file cannot serve."""
    path = Path(path).resolve()     # absolute: a file named like an option stays a file to Verilator
    if not IDENTIFIER.match(top):
        raise ForeignVerilogError(f"--top {top!r}: not a Verilog module name")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ForeignVerilogError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if SYSTEM_MODULE.search(text):
        raise ForeignVerilogError(f"{path}: defines a module {TOPLEVEL}..., which is the System's own")
    problem = port_problem(module_ports(path, top), expected_ports(unit_class, config))
    if problem is not None:
        raise ForeignVerilogError(f"{path}: module {top}, {problem}")
    name = unit_class.UNIT.name.lower()
    return type(f"Foreign{unit_class.__name__}", (ForeignUnit, unit_class),
                {"__module__": __name__, "__qualname__": f"Foreign{unit_class.__name__}.{top}", "TOP": top,
                 "VERILOG_SOURCES": ((f"foreign_{name}.v", text),)})
