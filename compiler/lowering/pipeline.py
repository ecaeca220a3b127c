"""The double-buffer token pattern every streaming operator shares: LOAD -> one compute unit -> STORE.

Each tile's LOADs fill one half of the activation buffer, the compute unit's commands read it and write one
half of the output buffer, and STORE drains that half to DRAM; tile t uses halves t % 2, so LOAD fills tile
t + 1 while the unit works on tile t. Tokens (docs/isa.md, execution model):

* LOAD -> unit after a tile's last LOAD; unit -> LOAD when the unit is done with an activation half that a
  later tile (t + 2) refills.
* unit -> STORE after a tile's last compute command; STORE -> unit when an output half that tile t + 2
  writes is drained.

A token is pushed only when a later command pops it, so the operator ends with every token queue empty.
Between operators the first LOAD pops and the last STORE pushes a STORE -> LOAD token (``Link``): all of the
previous operator (its DRAM writes and buffer uses) happens before anything of this one.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.program import Command, Program


@dataclass(frozen=True)
class Link:
    """How an operator joins the program: pop a STORE -> LOAD token first, push one at the end."""

    after_previous: bool
    before_next: bool


@dataclass
class Tile:
    """One tile's commands as field dicts (no tokens): LOADs, the compute unit's commands, STOREs."""

    loads: list[dict] = field(default_factory=list)
    compute: list[tuple[Opcode, dict]] = field(default_factory=list)
    stores: list[dict] = field(default_factory=list)


def half(program: Program, buffer: Buffer, index: int) -> int:
    """Start (in the buffer's units) of half ``index % 2``."""
    return (index % 2) * (program.config.buffer_units(buffer) // 2)


def half_bytes(program: Program, buffer: Buffer) -> int:
    return program.config.buffer(buffer).bytes // 2


def emit_pipeline(program: Program, unit: Unit, count: int, build: Callable[[int, int, int], Tile], link: Link,
                  preload: list[dict] = ()) -> None:
    """Append ``count`` tiles; ``build(t, act_base, out_base)`` gives tile t's commands for the halves it uses
    (byte addresses). ``preload``: LOADs before the first tile (e.g. a table); LOAD runs in order, so the
    first tile's token also announces them."""
    loads_before = len(program.queues[Unit.LOAD])
    for fields in preload:
        program.append(Command.make(Opcode.LOAD, **fields))
    for t in range(count):
        tile = build(t, half(program, Buffer.ACT, t), half(program, Buffer.OUT, t))
        if not (tile.loads and tile.compute and tile.stores):
            raise ValueError(f"tile {t}: a pipeline tile needs loads, compute and stores")
        refilled, drained_later = t >= 2, t + 2 < count
        for i, fields in enumerate(tile.loads):
            pop = [unit] if i == 0 and refilled else []
            push = [unit] if i == len(tile.loads) - 1 else []
            program.append(Command.make(Opcode.LOAD, pop=pop, push=push, **fields))
        for i, (opcode, fields) in enumerate(tile.compute):
            pop = [Unit.LOAD] + ([Unit.STORE] if refilled else []) if i == 0 else []
            push = ([Unit.STORE] + ([Unit.LOAD] if drained_later else [])) if i == len(tile.compute) - 1 else []
            program.append(Command.make(opcode, pop=pop, push=push, **fields))
        for i, fields in enumerate(tile.stores):
            pop = [unit] if i == 0 else []
            push = [unit] if i == len(tile.stores) - 1 and drained_later else []
            program.append(Command.make(Opcode.STORE, pop=pop, push=push, **fields))
    join(program, loads_before, link)


def join(program: Program, first_load: int, link: Link) -> None:
    """Add the STORE -> LOAD tokens of ``link`` to the operator whose first LOAD is ``first_load``."""
    loads, stores = program.queues[Unit.LOAD], program.queues[Unit.STORE]
    if link.after_previous:
        command = loads[first_load]
        loads[first_load] = Command(command.opcode, command.args, command.pop | {Unit.STORE}, command.push)
    if link.before_next:
        command = stores[-1]
        stores[-1] = Command(command.opcode, command.args, command.pop, command.push | {Unit.LOAD})
