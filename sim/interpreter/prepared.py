"""A program prepared once and run on many memory images: :func:`prepare` checks it (fields, bounds, races,
deadlock), a :class:`PreparedProgram` runs only the data work, consecutive LOAD/STORE/CONV/REQUANT commands in
the compiled run loop (run_loop.py) and every other command through its Python step; :func:`run` does both."""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from aipu.sim.interpreter.run_loop import REQUANT, ROW_WIDTH, run_rows
from aipu.sim.interpreter.preparer import Preparer, Step, named_errors
from aipu.sim.interpreter.results import Result, Stats
from aipu.sim.interpreter.state import RunState
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.machine.ordering import schedule


@dataclass(frozen=True)
class PreparedProgram:
    """A program checked once for a DRAM size -- fields, bounds, races, deadlock -- and ready to run on any
    number of memory images: only the data work is left for each run."""

    config: HardwareConfig
    dram_bytes: int
    queues: dict[Unit, tuple[Command, ...]]
    steps: dict[tuple[Unit, int], Step]
    order: tuple[tuple[Unit, int], ...]          # the fixed schedule
    stats: Stats                                 # the counts that do not depend on the data
    loop: _LoopPlan = field(init=False, repr=False, compare=False)   # the fixed schedule's compiled runs

    def __post_init__(self) -> None:
        object.__setattr__(self, "loop", _LoopPlan([self.steps[key] for key in self.order]))

    def run(self, memory: Memory, *, seed: int | None = None, compiled: bool = True,
            in_place: bool = False) -> Result:
        """Execute on a copy of ``memory``, or on ``memory`` itself if ``in_place`` (for an image built for this
        one run: the copy of a whole image, 1.2 MB for a MobileNet layer, costs as much as a quarter of the run;
        a run that raises leaves such an image as far as it got).
        seed None: the fixed schedule (lowest-numbered ready unit first); otherwise a ``random.Random(seed)`` picks
        any ready unit (a legal reordering). ``compiled``: run consecutive LOAD/STORE/CONV/REQUANT commands in the
        compiled loop (run_loop.py); False runs every command's Python step, the straightforward form the tests
        compare it with."""
        _check_config(memory, self.config)
        if memory.dram.size != self.dram_bytes:
            raise ValueError(f"memory image has {memory.dram.size} bytes of DRAM, the program was prepared for "
                             f"{self.dram_bytes}")
        order = self.order
        if seed is not None:
            order, _, failure = schedule(self.queues, self.config.queues.token_depth, random.Random(seed))
            if failure is not None:      # cannot happen after the fixed schedule passed (see ordering.schedule)
                raise failure
        if not in_place:
            memory = memory.copy()
        stats = Stats(self.stats.macs, Counter(self.stats.bytes_moved), Counter(self.stats.commands))
        state = RunState(memory, stats)
        plan = self.loop if order is self.order else _LoopPlan([self.steps[key] for key in order])
        steps = plan.steps
        position = 0
        while position < len(steps):
            end = plan.run_end[position] if compiled else position
            if end > position:
                position = plan.run(position, state)      # the run's end, or the command it stopped at
                if position == end:
                    continue
            step = steps[position]
            if step.execute is not None:      # a command's Python step, its errors named after the command
                named_errors(step.where, step.execute, state)
            position += 1
        return Result(memory, stats, list(order), list(plan.writes))


def _check_config(memory: Memory, config: HardwareConfig) -> None:
    """Refuse a memory image made for another hardware configuration than the program's."""
    if memory.config != config:
        raise ValueError(f"memory image is for config {memory.config.config_hash()}, "
                         f"the program for {config.config_hash()}")


class _LoopPlan:
    """The steps of one schedule, their writes, the steps as rows of the compiled run loop (run_loop.py; a step
    without a row is all zeros), and where each run of consecutive rows ends."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.writes = tuple(write for step in steps for write in step.writes)     # in execution order
        self.table = np.zeros((len(steps), ROW_WIDTH), np.int64)
        for position, step in enumerate(steps):
            if step.row is not None:
                self.table[position] = step.row
        has_row = self.table[:, 0] != 0
        # run_end[p]: the end of the run of rows that p starts or lies in (p itself where p has no row)
        self.run_end = [0] * len(steps)
        end = len(steps)
        for position in reversed(range(len(steps))):
            if not has_row[position]:
                end = position
            self.run_end[position] = end
        self.requants = np.flatnonzero(self.table[:, 0] == REQUANT)
        self.requant_labels = [steps[position].where.split()[0] for position in self.requants]

    def run(self, position: int, state: RunState) -> int:
        """Run rows from ``position`` to the end of their run, or to the row the loop stopped at; returns where it
        ended. Each REQUANT's saturation count goes into the stats in execution order."""
        end = self.run_end[position]
        saturated = np.empty(end - position, np.int64)
        stop = run_rows(self.table, position, end, state.loop_spaces, state.records, state.wrapped,
                                 state.any_wrapped, saturated)
        first, last = np.searchsorted(self.requants, (position, stop))
        counts = saturated[self.requants[first:last] - position].tolist()
        state.stats.saturations.update(zip(self.requant_labels[first:last], counts))
        return stop


def prepare(program: Program, dram_bytes: int, *, check_hazards: bool = True) -> PreparedProgram:
    """Check ``program`` for memory images of ``dram_bytes`` of DRAM and make it ready to run.

    Errors come in the order the fixed schedule meets them, as the run would have met them."""
    program.validate()
    queues = {unit: tuple(program.queues[unit]) for unit in Unit}
    order, clocks, failure = schedule(queues, program.config.queues.token_depth, None)
    preparer = Preparer(program.config, dram_bytes, check_hazards)
    steps = {(unit, index): preparer.step(unit, index, queues[unit][index], clock)
             for (unit, index), clock in zip(order, clocks)}
    if failure is not None:
        raise failure
    return PreparedProgram(program.config, dram_bytes, queues, steps, tuple(order), preparer.stats)


def run(program: Program | PreparedProgram, memory: Memory, *, seed: int | None = None,
        check_hazards: bool = True, in_place: bool = False) -> Result:
    """Execute ``program`` on a copy of ``memory``, or on ``memory`` itself if ``in_place`` (a
    :class:`PreparedProgram` skips the checks it has had).

    seed None: whenever several units are ready, the lowest-numbered unit runs (a fixed schedule);
    otherwise a ``random.Random(seed)`` picks any ready unit (a legal reordering)."""
    if isinstance(program, Program):
        _check_config(memory, program.config)
        program = prepare(program, memory.dram.size, check_hazards=check_hazards)
    return program.run(memory, seed=seed, in_place=in_place)
