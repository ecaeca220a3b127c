"""The token protocol of every chain of units, owned by one emitter: :class:`Pipeline` (docs/isa.md, execution
model).

An operator appends its commands through a Pipeline, naming for each command the rings it works on. A
:class:`Ring` is a buffer used as two halves (double buffering) and handed along a chain of units, item after
item (a tile, a CONV step, a k-tile's parameter records); item j uses half j % 2. Conv layers chain LOAD/WDEC
-> CONV -> REQUANT (-> LUT) -> STORE over several rings; the streaming operators LOAD -> one unit -> STORE
(:func:`emit_pipeline`). The tokens:

* Data: a unit's first command on an item pops a token from the unit before it in the ring, which that unit's
  last command on the item pushes (LOAD -> CONV, CONV -> REQUANT, REQUANT -> LUT -> STORE, ...).
* Free: the ring's first unit, starting an item, pops a token from the ring's last unit, which that unit's
  last command on the half's previous contents (item j - 2) pushes.
* The units named ``after_first_load`` (WDEC; LUT reading a table loaded before the tiles) wait at their
  first command for the operator's first LOAD, unless that command already waits for a LOAD (LOAD runs in
  order).
* Between operators (``Link``) the first LOAD pops and the last STORE pushes a STORE -> LOAD token: all of
  the previous operator (its DRAM writes and buffer uses) happens before anything of this one.

A command is appended with its pops and receives each push when the command that pops it is appended: a
token is pushed only when a later command pops it, so the operator ends with every token queue empty.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.isa import COMMANDS, Opcode, Unit
from aipu.sim.machine.program import Command, Program


@dataclass(frozen=True)
class Link:
    """How an operator joins the program: pop a STORE -> LOAD token first, push one at the end."""

    after_previous: bool
    before_next: bool


def half(program: Program, buffer: Buffer, index: int) -> int:
    """Start (in the buffer's units) of half ``index % 2``: the double-buffering ping-pong."""
    return (index % 2) * (program.config.buffer_units(buffer) // 2)


def half_bytes(program: Program, buffer: Buffer) -> int:
    return program.config.buffer(buffer).bytes // 2


class Ring:
    """A double-buffered buffer handed along ``units`` in order; made by :meth:`Pipeline.ring`.

    An item the unit before did not work on (a weight tile that a LOAD brought rather than WDEC, ordered by
    another ring) takes no data token from it; its readers still count for the free token."""

    def __init__(self, pipeline: Pipeline, units: tuple[Unit, ...]) -> None:
        self.pipeline, self.units = pipeline, units
        self._latest: dict[Unit, tuple[int, int]] = {}     # unit -> (item, queue index) of its latest command
        self._reader: dict[int, int] = {}                  # half -> queue index of its last reader's command

    def pops(self, unit: Unit, item: int) -> set[Unit]:
        """The tokens ``unit``'s next command on ``item`` pops; pushes them on the commands that owe them."""
        latest = self._latest.get(unit)
        if latest is not None and latest[0] == item:       # not the unit's first command on the item
            return set()
        position = self.units.index(unit)
        if position == 0:
            reader = self._reader.pop(item % 2, None)
            if reader is None:
                return set()
            self.pipeline.push(self.units[-1], reader, unit)
            return {self.units[-1]}
        before = self.units[position - 1]
        written = self._latest.get(before)
        if written is None or written[0] != item:
            return set()
        self.pipeline.push(before, written[1], unit)
        return {before}

    def record(self, unit: Unit, item: int, index: int) -> None:
        self._latest[unit] = (item, index)
        if unit == self.units[-1]:
            self._reader[item % 2] = index


class Pipeline:
    """Appends one operator's commands to ``program`` with their tokens (module docstring); :meth:`close` at
    the end."""

    def __init__(self, program: Program, link: Link, after_first_load: Iterable[Unit] = ()) -> None:
        self.program, self.link = program, link
        self.after_first_load = frozenset(after_first_load)
        self.first_load = len(program.queues[Unit.LOAD])
        self._started: set[Unit] = set()

    def ring(self, *units: Unit) -> Ring:
        return Ring(self, units)

    def append(self, opcode: Opcode, fields: dict, *uses: tuple[Ring, int]) -> None:
        """Append a command of ``fields``; ``uses``: the (ring, item) pairs it works on."""
        unit = COMMANDS[opcode].unit
        pop = set()
        for ring, item in uses:
            pop |= ring.pops(unit, item)
        if unit == Unit.LOAD and unit not in self._started and self.link.after_previous:
            pop.add(Unit.STORE)
        if unit in self.after_first_load and unit not in self._started and Unit.LOAD not in pop:
            if len(self.program.queues[Unit.LOAD]) == self.first_load:
                raise ValueError(f"{unit.name} waits for the operator's first LOAD, which has not been appended")
            self.push(Unit.LOAD, self.first_load, unit)
            pop.add(Unit.LOAD)
        self._started.add(unit)
        queue = self.program.queues[unit]
        for ring, item in uses:
            ring.record(unit, item, len(queue))
        self.program.append(Command.make(opcode, pop=pop, **fields))

    def push(self, unit: Unit, index: int, to: Unit) -> None:
        """Command ``index`` of ``unit``'s queue also pushes a token to ``to``."""
        queue = self.program.queues[unit]
        command = queue[index]
        queue[index] = Command(command.opcode, command.args, command.pop, command.push | {to})

    def close(self) -> None:
        """The last STORE pushes the token the next operator's first LOAD pops (``link.before_next``)."""
        if self.link.before_next:
            self.push(Unit.STORE, len(self.program.queues[Unit.STORE]) - 1, Unit.LOAD)


@dataclass
class Tile:
    """One tile's commands as field dicts (no tokens): LOADs, the compute unit's commands, STOREs."""

    loads: list[dict] = field(default_factory=list)
    compute: list[tuple[Opcode, dict]] = field(default_factory=list)
    stores: list[dict] = field(default_factory=list)


def emit_pipeline(program: Program, unit: Unit, count: int, build: Callable[[int, int, int], Tile], link: Link,
                  preload: list[dict] = ()) -> None:
    """Append ``count`` tiles of LOAD -> ``unit`` -> STORE; ``build(t, act_base, out_base)`` gives tile t's
    commands for the halves it uses (byte addresses). ``preload``: LOADs before the first tile (e.g. a table),
    which the unit's first command, popping the first tile's LOAD token, follows."""
    pipeline = Pipeline(program, link, after_first_load=[unit] if preload else [])
    act, out = pipeline.ring(Unit.LOAD, unit), pipeline.ring(unit, Unit.STORE)
    for fields in preload:
        pipeline.append(Opcode.LOAD, fields)
    for t in range(count):
        tile = build(t, half(program, Buffer.ACT, t), half(program, Buffer.OUT, t))
        if not (tile.loads and tile.compute and tile.stores):
            raise ValueError(f"tile {t}: a pipeline tile needs loads, compute and stores")
        for fields in tile.loads:
            pipeline.append(Opcode.LOAD, fields, (act, t))
        for opcode, fields in tile.compute:
            pipeline.append(opcode, fields, (act, t), (out, t))
        for fields in tile.stores:
            pipeline.append(Opcode.STORE, fields, (out, t))
    pipeline.close()
