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

A command arrives with its pops and receives each push when the command that pops it arrives: a token is
pushed only when a later command pops it, so the operator ends with every token queue empty.
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
        self._latest: dict[Unit, tuple[int, int]] = {}     # unit -> (item, command) of its latest command
        self._reader: dict[int, int] = {}                  # half -> its last reader's latest command

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
            self.pipeline.push(reader, unit)
            return {self.units[-1]}
        before = self.units[position - 1]
        written = self._latest.get(before)
        if written is None or written[0] != item:
            return set()
        self.pipeline.push(written[1], unit)
        return {before}

    def record(self, unit: Unit, item: int, command: int) -> None:
        self._latest[unit] = (item, command)
        if unit == self.units[-1]:
            self._reader[item % 2] = command


class Pipeline:
    """One operator's commands with their tokens (module docstring), held until :meth:`close` appends them
    to ``program``: a push is added to a held command when the command that pops it arrives."""

    def __init__(self, program: Program, link: Link, after_first_load: Iterable[Unit] = ()) -> None:
        self.program, self.link = program, link
        self.after_first_load = frozenset(after_first_load)
        self._commands: list[tuple[Opcode, dict, set[Unit], set[Unit]]] = []    # opcode, fields, pop, push
        self._first: dict[Unit, int] = {}           # unit -> its first command
        self._last_store: int | None = None

    def ring(self, *units: Unit) -> Ring:
        return Ring(self, units)

    def append(self, opcode: Opcode, fields: dict, *uses: tuple[Ring, int]) -> None:
        """Add a command of ``fields``; ``uses``: the (ring, item) pairs it works on."""
        unit = COMMANDS[opcode].unit
        pop = set()
        for ring, item in uses:
            pop |= ring.pops(unit, item)
        command = len(self._commands)
        if unit not in self._first:
            if unit == Unit.LOAD and self.link.after_previous:
                pop.add(Unit.STORE)
            if unit in self.after_first_load and Unit.LOAD not in pop:
                if Unit.LOAD not in self._first:
                    raise ValueError(f"{unit.name} waits for the operator's first LOAD, which has not been added")
                self.push(self._first[Unit.LOAD], unit)
                pop.add(Unit.LOAD)
            self._first[unit] = command
        if unit == Unit.STORE:
            self._last_store = command
        for ring, item in uses:
            ring.record(unit, item, command)
        self._commands.append((opcode, fields, pop, set()))

    def push(self, command: int, to: Unit) -> None:
        """Held command ``command`` also pushes a token to ``to``."""
        self._commands[command][3].add(to)

    def close(self) -> None:
        """Append the commands; the last STORE pushes the token the next operator's first LOAD pops
        (``link.before_next``)."""
        if self.link.before_next:
            if self._last_store is None:
                raise ValueError("an operator joined to the next one needs a STORE")
            self.push(self._last_store, Unit.LOAD)
        for opcode, fields, pop, push in self._commands:
            self.program.append(Command.make(opcode, pop=pop, push=push, **fields))
        self._commands = []


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
