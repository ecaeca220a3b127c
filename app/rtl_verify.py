"""`aipu rtl verify`: a hardware engineer's own Verilog module in one unit's place in the NPU's RTL (the rest
stays the project's), held against the interpreter (every byte) and the cycle model (every command's start and
retire cycle) on that unit's constrained-random stimulus, and optionally on random conv layers lowered by the
compiler (the System of every unit, as tests/sim/cosim/test_layers.py runs them): the checks `aipu rtl run`
makes, with its report.

Values and cycles are judged apart: a module may be bit-exact yet take other cycles than the documented ones
(``values_only`` then passes it). The module comes in through :func:`aipu.sim.cosim.foreign.foreign_unit`,
which refuses a file that cannot stand in for the unit before anything is built.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aipu.app.rtl_run import RunCheck, check_run
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import Unit

SCHEMA = "aipu-rtl-verify/1"
# Unit -> the stimulus families (aipu.sim.cosim.stimulus.RANDOM) whose commands it executes
FAMILIES = {Unit.LOAD: ("load_store", "load_codebook"), Unit.STORE: ("load_store",), Unit.WDEC: ("wdec",),
            Unit.CONV: ("conv",), Unit.REQUANT: ("requant",), Unit.LUT: ("lut", "softmax"), Unit.POOL: ("pool",)}


def default_top(unit: Unit) -> str:
    """The module name `aipu rtl verilog` gives the unit (:func:`aipu.sim.cosim.verilog.unit_verilog`)."""
    return f"aipu_{unit.name.lower()}"


@dataclass
class Verification:
    """Every stimulus run on the System with the user's module in ``unit``'s place."""

    unit: Unit
    verilog: Path
    top: str
    backend: str
    seed: int
    runs: list[RunCheck]
    values_only: bool = False

    @property
    def values_agree(self) -> bool:
        return all(run.clean and run.mismatch is None for run in self.runs)

    @property
    def cycles_agree(self) -> bool:
        return all(run.cycles_agree for run in self.runs)

    @property
    def passes(self) -> bool:
        return self.values_agree and (self.values_only or self.cycles_agree)

    def verdict(self) -> str:
        if self.values_agree and self.cycles_agree:
            return "PASS: every byte equals the interpreter's and every command's cycles the cycle model's"
        if self.values_agree:
            return ("PASS (--values-only): every byte equals the interpreter's; cycles differ from the cycle model"
                    if self.values_only else
                    "FAIL: every byte equals the interpreter's, but cycles differ from the cycle model "
                    "(--values-only accepts that)")
        return "FAIL: the RTL's values differ from the interpreter's"

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "unit": self.unit.name, "verilog": str(self.verilog), "top": self.top,
                "simulator": self.backend, "seed": self.seed, "values_only": self.values_only,
                "pass": self.passes, "values_agree": self.values_agree, "cycles_agree": self.cycles_agree,
                "runs": [run.to_dict() for run in self.runs]}

    def lines(self) -> list[str]:
        lines = [f"{self.verilog}: module {self.top} as {self.unit.name} on the RTL ({self.backend}, seed "
                 f"{self.seed}), against the interpreter (every byte) and the cycle model (every command's start "
                 "and retire)"]
        lines += ["  " + line for run in self.runs for line in run.lines()]
        lines.append(f"values: {'agree' if self.values_agree else 'DIFFER'}; cycles: "
                     f"{'agree' if self.cycles_agree else 'DIFFER'}")
        lines.append(self.verdict())
        return lines


def verify_unit(unit: Unit, foreign: type, config: HardwareConfig, *, commands: int, seed: int, backend: str,
                verilog: Path, layers: int = 0, values_only: bool = False) -> Verification:
    """``commands`` random commands of each stimulus family of ``unit``, then ``layers`` random lowered conv
    layers (all seeded) on the System with the unit class ``foreign``
    (:func:`aipu.sim.cosim.foreign.foreign_unit`) in the unit's place."""
    from aipu.sim.cosim.stimulus import RANDOM

    rng = np.random.default_rng(seed)
    runs = []
    for family in FAMILIES[unit]:
        stimulus = RANDOM[family](config, rng, commands)
        units = [foreign if cls.UNIT == unit else cls for cls in stimulus.units]
        runs.append(_check(stimulus.program, stimulus.memory, units, backend,
                           f"{family} stimulus, {stimulus.commands} commands"))
    for index in range(layers):
        runs.append(_layer_run(unit, foreign, config, np.random.default_rng([seed, index]), backend, index))
    return Verification(unit, verilog, foreign.TOP, backend, seed, runs, values_only)


def _check(program, memory, units, backend: str, label: str) -> RunCheck:
    from aipu.sim.interpreter import prepare

    return check_run(program, prepare(program, memory.dram.size), memory, units, backend, max_cycles=None,
                     waves=False, input_index=None, label=label, top="system")   # the user's unit in the System


def _layer_run(unit: Unit, foreign: type, config: HardwareConfig, rng: np.random.Generator, backend: str,
               index: int) -> RunCheck:
    """One random conv layer (a LUT activation on every other one) lowered for ``config``, on every unit."""
    from aipu.app.sample_layers import random_layer
    from aipu.compiler.lowering.conv_layers import lower_conv_layer
    from aipu.sim.cosim.verilog import available_units

    lowered = lower_conv_layer(random_layer(rng, with_lut=bool(index % 2)), config)
    units = [foreign if cls.UNIT == unit else cls for cls in available_units().values()]
    program = lowered.program
    return _check(program, lowered.memory(), units, backend,
                  f"random conv layer {index}, {len(program)} commands ({len(program.queues[unit])} of "
                  f"{unit.name})")
