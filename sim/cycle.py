"""The cycle model: when each command of a program starts and retires on the NPU, without computing any data.

It runs the same programs as ``sim.interpreter`` and the RTL. Each command costs the cycles of its documented
per-command formula (``aipu.rtl.timing.command_cycles``: docs/rtl-*.md, the formulas the RTL is checked against
on every command). The units run concurrently and wait on each other exactly as the RTL's sequencer does (docs/rtl.md,
"Units"; ``rtl/unit.py``, ``rtl/system.py``):

* a unit takes its next command in the cycle after the previous one retired, checks it in the next, and may
  start it in the one after (a unit's first command can start in cycle 2);
* a popped token must have been pushed (at its producer's retire) in an earlier cycle, and a push needs room
  in its token queue (``queues.token_depth``) when the command starts;
* FINISH starts once every other unit has retired its last command (in an earlier cycle), and retires as it
  starts; the program's cycle count is FINISH's cycle + 1.

Commands are visited in ``sim.machine.ordering.schedule``'s order, in which every token a command pops was
pushed, and every pop that makes room for its pushes happened, before it: each start is then a maximum over
times already known. A program that cannot finish raises ``DeadlockError`` naming the waiting commands.

The DRAM is the RTL's: each DMA unit has a port of ``dram.bytes_per_cycle`` with ``dram.latency_cycles``
latency (inside the LOAD, STORE and WDEC formulas), not shared between units.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from aipu.rtl.conv import useful_macs
from aipu.rtl.timing import command_cycles
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.ordering import schedule
from aipu.sim.machine.program import Program

FIRST_START = 2         # take (cycle 0), check (cycle 1), start (cycle 2)
NEXT_START = 3          # after a retire in cycle r: take r + 1, check r + 2, start r + 3


@dataclass
class CycleResult:
    cycles: dict[Unit, list[tuple[int, int]]]     # per unit, per command: (start cycle, retire cycle)
    total_cycles: int                             # FINISH's cycle + 1 (0 for a program without FINISH)
    busy: dict[Unit, int] = field(default_factory=dict)    # cycles each unit spent executing commands
    macs: int = 0                                 # multiply-accumulates the CONV commands need
    array_macs: int = 1                           # the MAC array's multipliers (rows x cols)

    @property
    def mac_utilisation(self) -> float:
        """Useful MACs over what the array could do in the whole program's cycles."""
        return self.macs / (self.total_cycles * self.array_macs) if self.total_cycles else 0.0


def simulate(program: Program, memory: Memory) -> CycleResult:
    """Start and retire cycle of every command of ``program`` (``memory``: the image it starts from, for the
    WDEC streams)."""
    config = program.config
    queues = {unit: tuple(program.queues[unit]) for unit in Unit}
    order, _, failure = schedule(queues, config.queues.token_depth, None)
    if failure is not None:
        raise failure
    depth = config.queues.token_depth
    pushed: dict[tuple[Unit, Unit], list[int]] = defaultdict(list)     # retire cycle of each push, per queue
    popped: dict[tuple[Unit, Unit], list[int]] = defaultdict(list)     # start cycle of each pop, per queue
    ready = {unit: FIRST_START for unit in Unit}
    cycles: dict[Unit, list[tuple[int, int]]] = {unit: [] for unit in Unit}
    total = 0
    for unit, index in order:
        command = queues[unit][index]
        start = ready[unit]
        for source in command.pop:            # the token this pop takes was pushed in an earlier cycle
            start = max(start, pushed[source, unit][len(popped[source, unit])] + 1)
        for target in command.push:           # room: the pop depth pushes back happened in an earlier cycle
            made = len(pushed[unit, target])
            if made >= depth:
                start = max(start, popped[unit, target][made - depth] + 1)
        if command.opcode == Opcode.FINISH:
            start = max([start, *(queue[-1][1] + 1 for other, queue in cycles.items() if other != unit and queue)])
        retire = start + command_cycles(config, command, memory)
        for source in command.pop:
            popped[source, unit].append(start)
        for target in command.push:
            pushed[unit, target].append(retire)
        cycles[unit].append((start, retire))
        ready[unit] = retire + NEXT_START
        if command.opcode == Opcode.FINISH:
            total = max(total, retire + 1)
    busy = {unit: sum(end - begin for begin, end in spans) for unit, spans in cycles.items()}
    macs = sum(useful_macs(command) for command in queues[Unit.CONV] if command.opcode == Opcode.CONV)
    return CycleResult(cycles, total, busy, macs, config.mac.rows * config.mac.cols)
