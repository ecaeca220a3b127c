"""What a stimulus is, the documented cycles of each command, and the comparison of an RTL run with the
interpreter (see the package's docstring)."""
from __future__ import annotations

from dataclasses import dataclass, field

from aipu.sim.cosim.result import RtlResult, first_mismatch
from aipu.sim.interpreter import Result, run
from aipu.sim.golden._checks import dtype_range
from aipu.sim.machine.arch import DTYPE_NUMPY, DType, HardwareConfig
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing import command_cycles as expected_cycles

SLACK_CYCLES = 8    # per command, on top of its formula, before a run counts as hung (the formula is exact)


@dataclass
class Stimulus:
    program: Program
    memory: Memory
    units: tuple[type, ...]      # the RTL unit classes the program needs

    @property
    def commands(self) -> int:
        """The commands that do work (FINISH not counted)."""
        return sum(command.opcode != Opcode.FINISH for queue in self.program.queues.values() for command in queue)


def dtype_limits(dtype: DType) -> tuple[int, int]:
    """Smallest and largest value of an element type."""
    return dtype_range(DTYPE_NUMPY[dtype])


def unit_program(config: HardwareConfig, commands, unit: Unit) -> Program:
    """``commands`` in their queues, in order, then FINISH on ``unit``."""
    program = Program(config)
    for command in commands:
        program.append(command)
    program.append(Command.make(Opcode.FINISH, unit=unit))
    return program


@dataclass
class Comparison:
    expected: Result
    result: RtlResult
    problems: list[str] = field(default_factory=list)     # empty: bit-exact and every command on its formula


def compare(stimulus: Stimulus, backend: str = "amaranth", *, build_at_least: tuple[int, int] = (0, 0)) -> Comparison:
    """Run ``stimulus`` on ``backend`` and on the interpreter; the problems name what differs."""
    from aipu.sim.cosim.cocotb_run import run_on

    program, memory, config = stimulus.program, stimulus.memory, stimulus.program.config
    formulas = {unit: [expected_cycles(config, command, memory) for command in queue]
                for unit, queue in program.queues.items()}
    documented = sum(cycles for queue in formulas.values() for cycles in queue)
    budget = max(0, documented + SLACK_CYCLES * sum(map(len, formulas.values())) + 100)
    expected = run(program, memory)
    result = run_on(backend, program, memory, stimulus.units, max_cycles=budget, build_at_least=build_at_least)
    problems = [str(error) for error in result.errors]
    problems += [f"DRAM fault raised by {unit.name}" for unit in result.dram_faults]
    if not result.done:
        problems.append(f"not done after {result.total_cycles} cycles (its commands' formulas total {documented})")
    if (mismatch := first_mismatch(program, expected, result)) is not None:
        problems.append(str(mismatch))
    for unit, queue in formulas.items():
        measured = result.command_cycles(unit)
        late = [index for index, cycles in enumerate(queue) if index < len(measured) and measured[index] != cycles]
        if late:
            index = late[0]
            problems.append(f"{unit.name}[{index}] took {measured[index]} cycles, its formula says {queue[index]} "
                            f"({len(late)} commands off): {program.queues[unit][index].opcode.name}")
    return Comparison(expected, result, problems)
