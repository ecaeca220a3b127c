"""The token protocol of the whole program, owned by one object: :class:`Pipeline` (docs/isa.md, execution
model; docs/compiler.md §4).

Operators append their commands in program order; the pipeline reads from each command's fields what it
accesses and gives it the tokens that order it after every earlier access it conflicts with, inside an
operator and across operators alike:

* On chip, every buffer is used as two halves (double buffering; an operator's table takes a LUT half of its
  own where it fits one, so it loads while the previous table is still in use). A read follows the latest
  write of its half by each other unit (read-after-write); a write follows the latest access of its half by
  each other unit (write-after-read, write-after-write); in a banked buffer (ACT, WEIGHT, ACC, OUT, whose
  banks are the halves) a read also follows the latest read of its half by each other unit, since a bank
  serves one unit at a time (docs/isa.md, "Banks").
* In DRAM, at byte granularity from the DMA patterns: a LOAD follows the latest STORE that wrote a byte it
  reads, a STORE the latest LOAD that read a byte it writes (a region freed after its last reader and reused
  by a later output). Constants are never stored to, so LOADs of weights, records and tables wait for no STORE.
* A command that must follow command c of unit V pops a V token, and c pushes it, unless a token chain
  already orders them (vector clocks, as the interpreter's race detector keeps them; of two such commands of
  V only the later is awaited). A unit thus waits on strictly later commands of V each time: every command
  pushes at most one token to each unit, the i-th pop of a queue pairs with its i-th push, and a token is
  pushed only when a later command pops it, so the program ends with every token queue empty.

An operator numbers the items of each buffer (a tile, a CONV step, a k-tile's records) from 0 after
:meth:`Pipeline.begin`; :meth:`Pipeline.half` places item j in the half the previous operator's last item did
not use when j is even, so that the operator's first items load while the previous one still works on the
other half, and its last stores run under the next operator's compute.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aipu.sim.machine.arch import BANKED_BUFFERS, BUFFER_UNIT_BYTES, DTYPE_BYTES, Buffer, DType
from aipu.sim.machine.isa import COMMANDS, EltwiseOp, Opcode, Unit, dram_run_bytes, load_tile_rows
from aipu.sim.machine.ordering import region_bytes
from aipu.sim.machine.program import Command, Program

Half = tuple[Buffer, int]


def half_bytes(program: Program, buffer: Buffer) -> int:
    return program.config.buffer(buffer).bytes // 2


class Pipeline:
    """The program's commands with their tokens (module docstring), held until :meth:`close` appends them:
    a push is added to a held command when a later command pops it."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self._commands: list[Command] = []
        self._units: list[Unit] = []
        self._clocks: list[tuple[int, ...]] = []           # per command: its vector clock (commands per unit)
        self._pop: list[set[Unit]] = []
        self._push: list[set[Unit]] = []
        self._latest: dict[Unit, int] = {}                  # unit -> its latest command
        self._writes: dict[Half, dict[Unit, int]] = {}      # half -> unit -> its latest write of the half
        self._accesses: dict[Half, dict[Unit, int]] = {}    # half -> unit -> its latest access of the half
        self._tables: dict[int, list[Half]] = {}            # LUT address -> the halves its table fills
        self._last_written: dict[Buffer, int] = {}          # buffer -> the half written last
        self._first: dict[Buffer, int] = {}                 # buffer -> the half of this operator's item 0
        self._dram_store = np.full(0, -1, np.int32)         # byte -> latest STORE writing it
        self._dram_load = np.full(0, -1, np.int32)          # byte -> latest LOAD reading it

    def begin(self) -> None:
        """An operator starts: its item 0 of each buffer takes the half the previous operator's last write
        did not."""
        self._first = {buffer: 1 - written for buffer, written in self._last_written.items()}

    def half(self, buffer: Buffer, item: int) -> int:
        """Start (in the buffer's address units) of the half that holds ``item`` in this operator."""
        return ((self._first.get(buffer, 0) + item) % 2) * (self.program.config.buffer_units(buffer) // 2)

    def table_address(self, nbytes: int) -> int:
        """Where this operator's table goes in the LUT memory: a half of its own when it fits one, so that
        it loads while the previous operator's table is still in use."""
        return self.half(Buffer.LUT, 0) if nbytes <= half_bytes(self.program, Buffer.LUT) else 0

    def counts(self) -> dict[Unit, int]:
        """How many commands each unit has so far."""
        return {unit: self._clocks[index][unit] for unit, index in self._latest.items()}

    def append(self, opcode: Opcode, fields: dict) -> None:
        """Add a command of ``fields`` with the tokens that order it after what it conflicts with."""
        command = Command.make(opcode, **fields)
        unit = COMMANDS[opcode].unit
        index = len(self._commands)
        reads, writes = self._halves(command)
        after = [(self._accesses if half[0] in BANKED_BUFFERS else self._writes).get(half, {}) for half in reads]
        after += [self._accesses.get(half, {}) for half in writes]
        waits = {}
        for earlier in after:
            for other, command_index in earlier.items():
                if other != unit:
                    waits[other] = max(waits.get(other, -1), command_index)
        self._dram_waits(command, waits)
        self._order(unit, waits)
        self._commands.append(command)
        self._units.append(unit)
        self._push.append(set())
        for half in reads + writes:
            self._accesses.setdefault(half, {})[unit] = index
        for half in writes:
            self._writes.setdefault(half, {})[unit] = index
            self._last_written[half[0]] = half[1]
        self._latest[unit] = index

    def _order(self, unit: Unit, waits: dict[Unit, int]) -> None:
        """Pop a token from each command in ``waits`` (unit -> command) that no token chain orders before the
        new command yet, unless another of them follows it; have that command push it. Records the new
        command's clock and pops."""
        latest = self._latest.get(unit)
        clock = self._clocks[latest] if latest is not None else (0,) * len(Unit)
        unordered = [index for index in waits.values() if not self._before(index, clock)]
        awaited = [index for index in unordered
                   if not any(self._before(index, self._clocks[other]) for other in unordered if other != index)]
        for index in awaited:
            clock = tuple(map(max, clock, self._clocks[index]))
            self._push[index].add(unit)
        self._clocks.append(clock[:unit] + (clock[unit] + 1,) + clock[unit + 1:])
        self._pop.append({self._units[index] for index in awaited})

    def _before(self, index: int, clock: tuple[int, ...]) -> bool:
        """Whether command ``index`` happens before a command of vector clock ``clock``."""
        unit = self._units[index]
        return clock[unit] >= self._clocks[index][unit]

    def _halves(self, command: Command) -> tuple[list[Half], list[Half]]:
        """The on-chip halves ``command`` reads and writes."""
        args, opcode = command.args, command.opcode
        if opcode == Opcode.LOAD:
            return [], self._loaded(command)
        if opcode == Opcode.STORE:
            return [self._at(Buffer.OUT, args["sram_addr"])], []
        if opcode == Opcode.WDEC:
            return [], [self._at(Buffer.WEIGHT, args["wgt_addr"])]
        if opcode == Opcode.CONV:
            return ([self._at(Buffer.ACT, args["in_addr"]), self._at(Buffer.WEIGHT, args["wgt_addr"])],
                    [self._at(Buffer.ACC, args["acc_addr"])])
        if opcode == Opcode.DWCONV:     # its input tile in WEIGHT, its kernel in ACT
            return ([self._at(Buffer.WEIGHT, args["in_addr"]), self._at(Buffer.ACT, args["wgt_addr"])],
                    [self._at(Buffer.ACC, args["acc_addr"])])
        if opcode == Opcode.REQUANT:
            return ([self._at(Buffer.ACC, args["acc_addr"]), self._at(Buffer.PARAM, args["param_index"])],
                    [self._at(Buffer.OUT, args["out_addr"])])
        if opcode == Opcode.ELTWISE:
            operands = ["a"] if args["op"] == EltwiseOp.RESCALE else ["a", "b"]
            return ([self._at(Buffer(args[f"{name}_buf"]), args[f"{name}_addr"]) for name in operands],
                    [self._at(Buffer.OUT, args["dst_addr"])])
        if opcode in (Opcode.POOL, Opcode.LUT, Opcode.SOFTMAX):
            reads = [self._at(Buffer(args["src_buf"]), args["src_addr"])]
            if opcode != Opcode.POOL:
                reads += self._tables[args["table_addr"]]
            return reads, [self._at(Buffer.OUT, args["dst_addr"])]
        raise ValueError(f"{opcode.name} is not a command an operator appends")

    def _at(self, buffer: Buffer, address: int) -> Half:
        """The half holding ``address`` (in the buffer's units)."""
        return buffer, address // (self.program.config.buffer_units(buffer) // 2)

    def _loaded(self, command: Command) -> list[Half]:
        """The halves a LOAD fills: its dense tile, padding included, from ``sram_addr`` (bytes)."""
        args = command.args
        nbytes = ((args["pad_top"] + load_tile_rows(command) + args["pad_bottom"]) * (args["pad_left"] + args["x_size"]
                  + args["pad_right"]) * args["run"] * DTYPE_BYTES[DType(args["elem_type"])])
        buffer, size = Buffer(args["buffer"]), half_bytes(self.program, Buffer(args["buffer"]))
        halves = [(buffer, h) for h in range(args["sram_addr"] // size, (args["sram_addr"] + nbytes - 1) // size + 1)]
        if buffer == Buffer.LUT:
            self._tables[args["sram_addr"] // BUFFER_UNIT_BYTES[buffer]] = halves
        return halves

    def _dram_waits(self, command: Command, waits: dict[Unit, int]) -> None:
        """Add to ``waits`` the DRAM order of a LOAD or STORE: after the latest command of the other kind
        that touched one of its bytes; record its bytes."""
        if command.opcode not in (Opcode.LOAD, Opcode.STORE):
            return
        touched, end = _dram_bytes(command)
        self._grow(end)
        load = command.opcode == Opcode.LOAD
        other, own = (self._dram_store, self._dram_load) if load else (self._dram_load, self._dram_store)
        latest = int(other[touched].max())
        if latest >= 0:
            unit = Unit.STORE if load else Unit.LOAD
            waits[unit] = max(waits.get(unit, -1), latest)
        own[touched] = len(self._commands)

    def _grow(self, size: int) -> None:
        """Room for DRAM bytes up to ``size`` in the latest-access maps, doubling (at least 1 MiB)."""
        if size > self._dram_store.size:
            pad = np.full(max(size, 2 * self._dram_store.size, 1 << 20) - self._dram_store.size, -1, np.int32)
            self._dram_store, self._dram_load = (np.concatenate([self._dram_store, pad]),
                                                 np.concatenate([self._dram_load, pad]))

    def close(self) -> None:
        """Append every held command with its tokens to the program (once, after the last operator)."""
        for command, pop, push in zip(self._commands, self._pop, self._push):
            self.program.append(dataclasses.replace(command, pop=frozenset(pop), push=frozenset(push)))


def _dram_bytes(command: Command) -> tuple[slice | np.ndarray, int]:
    """The DRAM bytes a LOAD's or STORE's pattern touches (a slice when they are one range) and the end."""
    args, run = command.args, dram_run_bytes(command)
    address, y_size, y_stride = args["dram_addr"], args["y_size"], args["dram_y_stride"]
    x_size, x_stride = args["x_size"], args["dram_x_stride"]
    if (x_size == 1 or x_stride == run) and (y_size == 1 or y_stride == x_size * run):
        return slice(address, address + y_size * x_size * run), address + y_size * x_size * run
    touched = region_bytes(0, 0, (address, y_size, y_stride, x_size, x_stride, run))
    return touched, int(touched.max()) + 1


@dataclass
class Tile:
    """One tile's commands as field dicts (no tokens): LOADs, the compute unit's commands, STOREs."""

    loads: list[dict] = field(default_factory=list)
    compute: list[tuple[Opcode, dict]] = field(default_factory=list)
    stores: list[dict] = field(default_factory=list)


def emit_pipeline(pipeline: Pipeline, count: int, build: Callable[[int, int, int], Tile],
                  table: tuple[int, int] | None = None) -> None:
    """Begin an operator and append ``count`` tiles of LOAD -> one unit -> STORE; ``build(t, act_base,
    out_base)`` gives tile t's commands for the halves it uses (byte addresses). ``table``: (DRAM address,
    bytes) of a table loaded into the LUT memory first, at :meth:`Pipeline.table_address`."""
    pipeline.begin()
    if table is not None:
        pipeline.append(Opcode.LOAD, dict(buffer=Buffer.LUT, sram_addr=pipeline.table_address(table[1]),
                                          dram_addr=table[0], run=table[1]))
    for t in range(count):
        tile = build(t, pipeline.half(Buffer.ACT, t), pipeline.half(Buffer.OUT, t))
        if not (tile.loads and tile.compute and tile.stores):
            raise ValueError(f"tile {t}: a pipeline tile needs loads, compute and stores")
        for fields in tile.loads:
            pipeline.append(Opcode.LOAD, fields)
        for opcode, fields in tile.compute:
            pipeline.append(opcode, fields)
        for fields in tile.stores:
            pipeline.append(Opcode.STORE, fields)
