"""The cycle model: when each command of a program starts and retires on the NPU, without computing any data.

It runs the same programs as ``sim.interpreter`` and the RTL. Each command costs the cycles of its documented
per-command formula (``aipu.sim.timing.command_cycles``: docs/rtl-*.md, the formulas the RTL is checked against
on every command). The units run concurrently and wait on each other exactly as the RTL's sequencer does (docs/rtl.md,
"Units"; ``rtl/unit.py``, ``rtl/system.py``):

* a unit takes its next command in the cycle after the previous one retired, checks it in the next, and may
  start it in the one after (a unit's first command can start in cycle 2: ``aipu.sim.timing.sequencer``);
* a popped token must have been pushed (at its producer's retire) in an earlier cycle, and a push needs room
  in its token queue (``queues.token_depth``) when the command starts;
* FINISH starts once every other unit has retired its last command (in an earlier cycle), and retires as it
  starts; the program's cycle count is FINISH's cycle + 1.

The DRAM: with ``dram="npu"`` (the default) the timeline is the NPU top's (``rtl/npu.py``), cycle for cycle:
the command fetcher, one DRAM bridge shared by the readers and STORE waiting for its writes' responses
(``aipu.sim.timing.npu``; docs/cycle-model.md, "The NPU top"); what the bridge adds to a command is its DRAM
stall. With ``dram="ports"`` each DMA unit has a port of ``dram.bytes_per_cycle`` of its own, as the test
harness (``rtl/system.py``) gives it, and every command costs its formula. With ``dram="shared"`` LOAD, STORE
and WDEC share one DRAM of that many bytes per cycle as a fluid (docs/cycle-model.md, "A DRAM shared by the
DMA units"): an estimate that stays fast on long WDEC streams and takes WDEC engines the RTL does not have.

Time advances from event to event: a unit starts its next command as soon as everything it waits for is
known, and a shared transfer's end is known once no other transfer can change its pace. A program that
cannot finish raises ``DeadlockError`` naming the waiting commands (the token check of ``ordering.schedule``).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from aipu.sim.machine.errors import ExecutionError
from aipu.sim.machine.isa import Opcode, Unit, dram_run_bytes, load_tile_rows
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.ordering import schedule
from aipu.sim.machine.program import Program
from aipu.sim.timing import DMA_OPCODES, command_cycles, dram_phases
from aipu.sim.timing.conv import MAC_OPCODES, useful_macs
from aipu.sim.timing.npu import NpuTimeline
from aipu.sim.timing.sequencer import FIRST_START, NEXT_START, token_wait

DramModel = Literal["shared", "ports", "npu"]
DRAM_MODELS = ("shared", "ports", "npu")


@dataclass(frozen=True, slots=True)
class CommandTiming:
    """One command on the timeline. Between ``ready`` (the first cycle its unit's sequencer could start it)
    and ``start`` it waited on ``waited_on`` (``token LOAD->CONV``, ``room CONV->REQUANT``, ``drain``; with
    the NPU top, ``fetch``: its unit's FIFO was empty);
    from ``start`` to ``retire`` it worked its formula's ``work`` cycles plus ``dram_stall`` cycles lost to
    the shared DRAM."""

    ready: int
    start: int
    retire: int
    work: int
    waited_on: str | None = None
    dram_bytes: int = 0        # bytes it reads from DRAM (LOAD, WDEC) or writes to it (STORE)

    @property
    def waited(self) -> int:
        return self.start - self.ready

    @property
    def dram_stall(self) -> int:
        return self.retire - self.start - self.work


@dataclass
class CycleResult:
    timings: dict[Unit, list[CommandTiming]]      # per unit, per command of its queue
    total_cycles: int                             # FINISH's cycle + 1 (0 for a program without FINISH)
    macs: int = 0                                 # multiply-accumulates the CONV commands need
    array_macs: int = 1                           # the MAC array's multipliers (rows x cols)
    dram: DramModel = "npu"

    @property
    def cycles(self) -> dict[Unit, list[tuple[int, int]]]:
        """(start, retire) of every command, per unit: what the RTL comparison checks."""
        return {unit: [(t.start, t.retire) for t in timings] for unit, timings in self.timings.items()}

    @property
    def busy(self) -> dict[Unit, int]:
        """Cycles each unit spent working its commands' formulas (DRAM stalls not included)."""
        return {unit: sum(t.work for t in timings) for unit, timings in self.timings.items()}

    @property
    def dram_stall(self) -> dict[Unit, int]:
        """Cycles the shared DRAM added to each unit's commands (0 with one port per unit)."""
        return {unit: sum(t.dram_stall for t in timings) for unit, timings in self.timings.items()}

    @property
    def dram_bytes(self) -> dict[Unit, int]:
        """DRAM bytes each unit read (LOAD, WDEC) or wrote (STORE)."""
        return {unit: sum(t.dram_bytes for t in timings) for unit, timings in self.timings.items()}

    @property
    def mac_utilisation(self) -> float:
        """Useful MACs over what the array could do in the whole program's cycles."""
        return self.macs / (self.total_cycles * self.array_macs) if self.total_cycles else 0.0


@dataclass(slots=True)
class _Transfer:
    """A shared-DRAM transfer in flight: it moves at ``demand`` words a cycle when the DRAM keeps up, and
    ``remaining`` counts the cycles it still needs at that pace."""

    unit: Unit
    ready: int
    start: int
    work: int
    waited_on: str | None
    begins: int               # the cycle its transfer begins (start + the phase before it)
    remaining: Fraction
    demand: Fraction          # words per cycle, at most 1
    after: int                # cycles after the transfer
    dram_bytes: int


def simulate(program: Program, memory: Memory, *, dram: DramModel = "npu") -> CycleResult:
    """The timeline of every command of ``program`` (``memory``: the image it starts from, for the WDEC
    streams); ``dram``: "npu", the NPU top's command fetcher and DRAM bridge (cycle 0: START), "ports", one
    per DMA unit as in the test harness (``rtl/system.py``), or "shared", a fluid estimate."""
    if dram not in DRAM_MODELS:
        raise ValueError(f"dram model {dram!r}: expected one of {', '.join(DRAM_MODELS)}")
    queues = {unit: tuple(program.queues[unit]) for unit in Unit}
    _, _, failure = schedule(queues, program.config.queues.token_depth, None)
    if failure is not None:
        raise failure
    if dram == "npu":
        timings = {unit: [CommandTiming(*timing, dram_bytes=_dram_bytes(command)) for command, timing in
                          zip(queues[unit], unit_timings)]
                   for unit, unit_timings in NpuTimeline(program, memory).run().items()}
    else:
        timings = _Timeline(program, memory, shared=dram == "shared").run()
    config = program.config
    macs = sum(useful_macs(command) for command in queues[Unit.CONV] if command.opcode in MAC_OPCODES)
    total = max((timing.retire + 1 for unit, queue in queues.items()
                 for command, timing in zip(queue, timings[unit]) if command.opcode == Opcode.FINISH), default=0)
    return CycleResult(timings, total, macs, config.mac.rows * config.mac.cols, dram)


class _Timeline:
    """The event loop: units start what they can, then time moves to the next transfer that begins or ends."""

    def __init__(self, program: Program, memory: Memory, shared: bool) -> None:
        self.config, self.memory, self.shared = program.config, memory, shared
        self.queues = {unit: tuple(program.queues[unit]) for unit in Unit}
        self.depth = self.config.queues.token_depth
        self.pushed: dict[tuple[Unit, Unit], list[int]] = defaultdict(list)   # retire cycle of each push
        self.popped: dict[tuple[Unit, Unit], list[int]] = defaultdict(list)   # start cycle of each pop
        self.ready: dict[Unit, int | None] = {unit: FIRST_START for unit in Unit}   # None: a command in flight
        self.timings: dict[Unit, list[CommandTiming]] = {unit: [] for unit in Unit}
        self.flying: list[_Transfer] = []
        self.now = Fraction(0)

    def run(self) -> dict[Unit, list[CommandTiming]]:
        while True:
            while any([self._start_next(unit) for unit in Unit]):
                pass
            if not self.flying:
                break
            self._advance()
        left = [unit.name for unit in Unit if len(self.timings[unit]) < len(self.queues[unit])]
        if left:      # ordering.schedule found the program free of deadlock; the timing cannot add one
            raise AssertionError(f"cycle model stopped with commands left on {', '.join(left)}")
        return self.timings

    def _start_next(self, unit: Unit) -> bool:
        """Start ``unit``'s next command if everything it waits for is known; False if it cannot yet."""
        index, ready = len(self.timings[unit]), self.ready[unit]
        if ready is None or index == len(self.queues[unit]):
            return False
        command = self.queues[unit][index]
        found = token_wait(command, unit, ready, None, self.pushed, self.popped, self.depth, self._drained)
        if found is None:
            return False
        start, waited_on = found
        for source in command.pop:
            self.popped[source, unit].append(start)
        moved = _dram_bytes(command)
        if self.shared and command.opcode in DMA_OPCODES:
            phases = self._cost(dram_phases, unit, index)
            demand = Fraction(phases.words, phases.transfer) if phases.transfer else Fraction(0)
            self.flying.append(_Transfer(unit, ready, start, phases.cycles, waited_on, start + phases.before,
                                         Fraction(phases.transfer), demand, phases.after, moved))
            self.ready[unit] = None
        else:
            work = self._cost(command_cycles, unit, index)
            self._retire(unit, CommandTiming(ready, start, start + work, work, waited_on, moved))
        return True

    def _drained(self, unit: Unit) -> int | None:
        """None while ``unit`` has commands left to time; else its last retire (-1 for none)."""
        if len(self.timings[unit]) < len(self.queues[unit]):
            return None
        return self.timings[unit][-1].retire if self.timings[unit] else -1

    def _cost(self, formula, unit: Unit, index: int):
        """``formula`` (command_cycles or dram_phases) of the command; one it cannot time (a weight stream that
        does not decode) is an error naming the command."""
        try:
            return formula(self.config, self.queues[unit][index], self.memory)
        except ExecutionError as error:
            raise ExecutionError(f"{unit.name}[{index}]: {error}") from None

    def _retire(self, unit: Unit, timing: CommandTiming) -> None:
        command = self.queues[unit][len(self.timings[unit])]
        for target in command.push:
            self.pushed[unit, target].append(timing.retire)
        self.timings[unit].append(timing)
        self.ready[unit] = timing.retire + NEXT_START

    def _advance(self) -> None:
        """Move time to the next transfer that begins or ends, sharing the DRAM among those under way."""
        moving = [transfer for transfer in self.flying if transfer.begins <= self.now]
        paces = _fair_paces([transfer.demand for transfer in moving])
        events = [Fraction(transfer.begins) for transfer in self.flying if transfer.begins > self.now]
        events += [self.now + transfer.remaining / pace for transfer, pace in zip(moving, paces)]
        then = min(events)
        for transfer, pace in zip(moving, paces):
            transfer.remaining -= (then - self.now) * pace
        self.now = then
        for transfer in [transfer for transfer in moving if transfer.remaining == 0]:
            self.flying.remove(transfer)
            retire = math.ceil(then) + transfer.after
            self._retire(transfer.unit, CommandTiming(transfer.ready, transfer.start, retire, transfer.work,
                                                      transfer.waited_on, transfer.dram_bytes))


def _dram_bytes(command) -> int:
    """The data bytes a DMA command moves over the DRAM interface (not the words' padding)."""
    if command.opcode == Opcode.WDEC:
        return command.length
    if command.opcode in (Opcode.LOAD, Opcode.STORE):      # a LOAD of codebook indices: the packed bytes;
        return load_tile_rows(command) * command.x_size * dram_run_bytes(command)    # circulant: rows read L times
    return 0


def _fair_paces(demands: list[Fraction]) -> list[Fraction]:
    """The share of its own pace each transfer gets from a DRAM of one word a cycle: all of it when the demands
    fit; otherwise max-min fair (the smallest demands are met, the rest split what is left equally)."""
    if sum(demands) <= 1:
        return [Fraction(1)] * len(demands)
    paces = [Fraction(1)] * len(demands)
    left, waiting = Fraction(1), sorted(range(len(demands)), key=lambda i: demands[i])
    while waiting:
        share = left / len(waiting)
        index = waiting.pop(0)
        granted = min(demands[index], share)
        paces[index] = granted / demands[index] if demands[index] else Fraction(1)
        left -= granted
    return paces
