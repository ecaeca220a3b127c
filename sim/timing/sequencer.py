"""The fixed steps of the sequencer every unit shares (``aipu.rtl.unit``; docs/rtl.md, "Units").

A unit takes the head word of its queue in one cycle, checks it in the next, and may start it in the one
after: its first command can start in cycle 2, and a command after one that retired in cycle r in cycle
r + 3. Waiting for tokens, for room in a token queue or (FINISH) for the other units only delays the start
further. A command's formula counts from its start to its retire.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from aipu.sim.machine.isa import Opcode, Unit

FIRST_START = 2         # take (cycle 0), check (cycle 1), start (cycle 2)
NEXT_START = 3          # after a retire in cycle r: take r + 1, check r + 2, start r + 3


def token_wait(command, unit: Unit, start: int, waited_on: str | None, pushed: Mapping, popped: Mapping, depth: int,
               drained: Callable[[Unit], int | None]) -> tuple[int, str | None] | None:
    """The cycle ``unit`` may start ``command``, from ``start`` (its sequencer ready; ``waited_on`` what held it so
    far), and what held it last; None while something it waits for is not known yet. A popped token must have
    been pushed (at its producer's retire) in an earlier cycle; a push needs room in its queue of ``depth``, made
    by a pop in an earlier cycle; FINISH waits for every other unit to have retired its last command in an
    earlier cycle. ``pushed[source, target]`` and ``popped[source, target]`` list the cycles of the pushes and
    pops so far; ``drained(other)``: None while ``other`` has commands left to time, else its last retire
    (-1 for none)."""
    for source in command.pop:
        pushes, taken = pushed[source, unit], len(popped[source, unit])
        if taken >= len(pushes):
            return None
        if pushes[taken] + 1 > start:
            start, waited_on = pushes[taken] + 1, f"token {source.name}->{unit.name}"
    for target in command.push:
        made = len(pushed[unit, target])
        if made >= depth:
            pops = popped[unit, target]
            if len(pops) <= made - depth:
                return None
            if pops[made - depth] + 1 > start:
                start, waited_on = pops[made - depth] + 1, f"room {unit.name}->{target.name}"
    if command.opcode == Opcode.FINISH:
        for other in Unit:
            if other == unit:
                continue
            last = drained(other)
            if last is None:
                return None
            if last + 1 > start:
                start, waited_on = last + 1, "drain"
    return start, waited_on
