"""`aipu rtl run`: a program directory that `aipu compile` wrote, run on the RTL from start to done and held
against the two models it must equal: every byte against the interpreter, every command's start and retire
cycle against the cycle model of that top.

Two tops run it: the NPU (rtl/npu.py, ``top="npu"``: the host starts it over AXI4-Lite and its command fetcher
and DRAM bridge share one AXI master; cycle model ``dram="npu"``) and the System test harness (``top="system"``:
queues and buffers preloaded by backdoor, a DRAM port per DMA unit; ``dram="ports"``). One run per input sample,
or one on the DRAM image as compiled; :meth:`RtlRun.to_dict` is the JSON report whose keys docs/rtl-cosim.md
documents.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aipu.sim.cosim.result import Mismatch, RtlResult
from aipu.sim.cycle import CycleResult
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.program import Program

SCHEMA = "aipu-rtl-run/1"
TOPS = ("npu", "system")      # the NPU a chip team takes (rtl/npu.py); the test harness with backdoor loading
CYCLE_MODEL = {"npu": "npu", "system": "ports"}     # the cycle model's DRAM mode that each top equals
MARGIN_CYCLES = 1000     # default bound: twice the cycle model's count plus this, then the run is stopped


@dataclass(frozen=True)
class CycleDifference:
    """A command whose RTL cycles are not the cycle model's; ``rtl`` is None if the RTL never retired it."""

    unit: Unit
    index: int
    command: str
    model: tuple[int, int]
    rtl: tuple[int, int] | None

    def __str__(self) -> str:
        rtl = f"{self.rtl[0]}..{self.rtl[1]}" if self.rtl else "never retired"
        return (f"{self.unit.name}[{self.index}]: cycle model {self.model[0]}..{self.model[1]}, RTL {rtl}\n"
                f"  {self.command}")


def first_cycle_difference(program: Program, model: CycleResult, got: RtlResult) -> CycleDifference | None:
    """The command whose (start, retire) departs first in time from the cycle model's: ordered by the first
    cycle at which the two disagree (the earlier start if the starts differ, else the earlier retire; the
    model's retire if the RTL never retired it). None if every command agrees."""
    differing = []
    for unit, timings in model.cycles.items():
        retired = got.cycles.get(unit, [])
        for index, expected in enumerate(timings):
            actual = tuple(retired[index]) if index < len(retired) else None
            if actual == expected:
                continue
            if actual is None:
                when = expected[1]
            else:
                when = min(expected[0], actual[0]) if expected[0] != actual[0] else min(expected[1], actual[1])
            differing.append((when, unit, index, expected, actual))
    if not differing:
        return None
    _, unit, index, expected, actual = min(differing, key=lambda entry: entry[:3])
    return CycleDifference(unit, index, program.queues[unit][index].describe(program.config), expected, actual)


@dataclass
class RunCheck:
    """One run of the program on the RTL beside the interpreter's bytes and the cycle model's cycles."""

    input: int | None           # the sample's index in --input; None: the DRAM image as compiled
    result: RtlResult
    model_cycles: int
    max_cycles: int
    mismatch: Mismatch | None
    cycle_difference: CycleDifference | None
    waveform: Path | None = None
    label: str | None = None    # what ran, in the report; None: the input (or the image as compiled)

    @property
    def clean(self) -> bool:
        result = self.result
        return result.done and not result.errors and not result.token_error and not result.dram_faults

    @property
    def cycles_agree(self) -> bool:
        return self.cycle_difference is None and self.result.total_cycles == self.model_cycles

    @property
    def agrees(self) -> bool:
        return self.clean and self.mismatch is None and self.cycles_agree

    def to_dict(self) -> dict:
        result = self.result
        seconds = result.run_seconds
        return {
            **({"name": self.label} if self.label else {}), "input": self.input, "agree": self.agrees,
            "done": result.done,
            "bytes_agree": self.mismatch is None, "cycles_agree": self.cycles_agree,
            "total_cycles": result.total_cycles, "model_total_cycles": self.model_cycles,
            "max_cycles": self.max_cycles, "run_seconds": round(seconds, 4),
            "cycles_per_second": round(result.total_cycles / seconds) if seconds else None,
            "first_mismatch": None if self.mismatch is None else _mismatch_dict(self.mismatch),
            "first_cycle_difference": None if self.cycle_difference is None else _difference_dict(
                self.cycle_difference),
            "errors": [{"unit": error.unit.name, "index": error.index, "field": error.field}
                       for error in result.errors],
            "token_error": result.token_error, "dram_faults": [unit.name for unit in result.dram_faults],
            "waveform": None if self.waveform is None else str(self.waveform),
        }

    def lines(self) -> list[str]:
        """The run in text: agreement first, then every divergence by name."""
        result, name = self.result, self.label or ("image as compiled" if self.input is None else
                                                   f"input {self.input}")
        verdict = "every byte and every command's cycles equal" if self.agrees else "DIVERGES"
        rate = [f"{result.total_cycles / result.run_seconds:,.0f} simulated cycles/s"] if result.run_seconds else []
        lines = ["; ".join([f"{name}: {verdict}", f"{result.total_cycles:,} cycles (cycle model "
                            f"{self.model_cycles:,})", *rate])]
        if not result.done:
            lines.append(f"  the RTL did not finish within {self.max_cycles:,} cycles")
        lines += [f"  RTL error: {error}" for error in result.errors]
        if result.token_error:
            lines.append("  token error: FINISH found a token queue not empty")
        lines += [f"  DRAM fault: {unit.name} addressed beyond the DRAM image" for unit in result.dram_faults]
        if self.mismatch is not None:
            lines.append(f"  first byte divergence from the interpreter: {_indented(self.mismatch)}")
        if self.cycle_difference is not None:
            lines.append(f"  first command off the cycle model: {_indented(self.cycle_difference)}")
        if self.waveform is not None:
            lines.append(f"  waveform around it: {self.waveform}")
        return lines


def _indented(value) -> str:
    return str(value).replace("\n", "\n    ")


def _mismatch_dict(mismatch: Mismatch) -> dict:
    return {"unit": None if mismatch.unit is None else mismatch.unit.name, "index": mismatch.index,
            "command": mismatch.command or None, "space": mismatch.space, "address": mismatch.address,
            "element": mismatch.element, "dtype": mismatch.dtype.name, "golden": mismatch.golden, "rtl": mismatch.rtl,
            "rtl_cycles": None if mismatch.cycles is None else list(mismatch.cycles),
            "differing_bytes": mismatch.differing_bytes, "unwritten_bytes": mismatch.unwritten_bytes}


def _difference_dict(difference: CycleDifference) -> dict:
    return {"unit": difference.unit.name, "index": difference.index, "command": difference.command,
            "model": list(difference.model), "rtl": None if difference.rtl is None else list(difference.rtl)}


@dataclass
class RtlRun:
    """Every run of one program directory on one backend."""

    program: Path
    backend: str
    commands: int
    units: list[Unit]
    runs: list[RunCheck]
    top: str = "system"
    threads: int = 1          # of the Verilator model
    profiled: bool = False    # the Verilator model is a profile-guided build

    @property
    def agrees(self) -> bool:
        return all(run.agrees for run in self.runs)

    @property
    def build_seconds(self) -> float | None:
        """The Verilog build these runs had to compile first; None if it came from the cache (or Amaranth)."""
        built = [run.result.build_seconds for run in self.runs if run.result.build_seconds is not None]
        return sum(built) if built else None

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "program": str(self.program), "simulator": self.backend, "top": self.top,
                "threads": self.threads, "profile_guided": self.profiled, "commands": self.commands,
                "units": [unit.name for unit in self.units], "agree": self.agrees,
                "build_seconds": None if self.build_seconds is None else round(self.build_seconds, 1),
                "runs": [run.to_dict() for run in self.runs]}

    def lines(self) -> list[str]:
        threads = f", {self.threads} threads" if self.threads > 1 else ""
        profiled = ", profile-guided build" if self.profiled else ""
        lines = [f"{self.program}: {self.commands} commands on the RTL ({self.top} top, {self.backend}{threads}"
                 f"{profiled}), "
                 "against the interpreter (every byte) and the cycle model (every command's start and retire)"]
        if self.build_seconds is not None:
            lines.append(f"  the NPU's Verilog model was built in {self.build_seconds:.1f} s (cached for later runs)")
        lines += ["  " + line for run in self.runs for line in run.lines()]
        agreeing = sum(run.agrees for run in self.runs)
        lines.append(f"agreement: {agreeing} of {len(self.runs)} run{'s' if len(self.runs) != 1 else ''} equal to "
                     "both models")
        return lines


def check_run(program: Program, prepared, memory, units, backend: str, *, max_cycles: int | None, waves: bool,
              input_index: int | None, label: str | None = None, top: str = "npu", threads: int = 1,
              profiled: bool = False) -> RunCheck:
    """``program`` from ``memory`` on the RTL (``top``: the NPU, or the System of ``units``; ``backend``: one of
    cocotb_run.BACKENDS; ``threads``, ``profiled``: the NPU's Verilator model's, see :func:`training`), on the
    interpreter (``prepared``) and on the cycle model of that top; with ``waves``, a waveform around the first
    divergence."""
    from aipu.sim.cosim.cocotb_run import run_on
    from aipu.sim.cosim.npu_verilog import run_npu_on
    from aipu.sim.cosim.result import first_mismatch
    from aipu.sim.cosim.waves import window_cycles, window_waveform
    from aipu.sim.cycle import simulate

    expected = prepared.run(memory)               # on a copy: ``memory`` stays the initial image
    model = simulate(program, memory, dram=CYCLE_MODEL[top])
    limit = max_cycles or 2 * model.total_cycles + MARGIN_CYCLES
    got = (run_npu_on(backend, program, memory, max_cycles=limit, threads=threads,
                      training=training(program.config) if profiled else None) if top == "npu" else
           run_on(backend, program, memory, units, max_cycles=limit))
    check = RunCheck(input_index, got, model.total_cycles, limit, first_mismatch(program, expected, got),
                     first_cycle_difference(program, model, got), label=label)
    if waves and not check.agrees:
        blamed = (check.mismatch.cycles if check.mismatch is not None else
                  check.cycle_difference.rtl if check.cycle_difference is not None else None)
        check.waveform = window_waveform(program, memory, units, window_cycles(blamed, got.total_cycles),
                                         simulator=backend, top=top)
    return check


def run_program_dir(path, *, inputs=None, backend: str = "verilator", max_cycles: int | None = None,
                    waves: bool = False, top: str = "npu", threads: int = 1, profiled: bool = False) -> RtlRun:
    """The program directory ``path`` on the RTL: one run per sample of the float ``inputs`` file (.npy or .npz,
    as `aipu run --input`), or one on the DRAM image as compiled. Bad files raise InputError."""
    from aipu.app.cli_compile import read_inputs
    from aipu.compiler.program_dir import read_program_dir

    directory = read_program_dir(path)
    samples = read_inputs(directory, inputs) if inputs is not None else None
    return run_directory(directory, samples, backend=backend, max_cycles=max_cycles, waves=waves, top=top,
                         threads=threads, profiled=profiled)


def run_directory(directory, samples: dict | None, *, backend: str = "verilator", max_cycles: int | None = None,
                  waves: bool = False, top: str = "npu", threads: int = 1, profiled: bool = False) -> RtlRun:
    """A read program directory on the RTL of every unit there is: one run per sample of the float ``samples``
    (input name -> [samples, ...]; quantized into the DRAM image as `aipu run` does), or one on the image as
    compiled if None."""
    from aipu.app.cli_compile import input_memory
    from aipu.sim.cosim.verilog import available_units
    from aipu.sim.interpreter import prepare
    from aipu.sim.machine.errors import executing
    from aipu.sim.machine.memory import Memory

    program = directory.program
    indices = [None] if samples is None else range(next(iter(samples.values())).shape[0])
    units = available_units()
    with executing(directory.path):           # a program the interpreter or the cycle model cannot run
        prepared = prepare(program, directory.dram.size)
        runs = [check_run(program, prepared, Memory.create(program.config, directory.dram) if index is None else
                          input_memory(directory, samples, index), list(units.values()), backend,
                          max_cycles=max_cycles, waves=waves, input_index=index, top=top, threads=threads,
                          profiled=profiled)
                for index in indices]
    return RtlRun(directory.path, backend, len(program), list(units), runs, top, threads, profiled)


def training(config: HardwareConfig):
    """A profile-guided build's training (npu_verilog.build_npu): aipu.app.rtl_training's programs for ``config``,
    made only if the build is not in the cache yet."""
    from aipu.app.rtl_training import training_programs

    return lambda: training_programs(config)
