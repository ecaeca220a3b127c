"""What an RTL run produced, read back from the :class:`aipu.rtl.system.System` the same way on every simulator,
and where it first departs from the interpreter."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aipu.sim.interpreter import Result
from aipu.sim.machine.arch import ACC_DTYPE, Buffer
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Program


@dataclass(frozen=True)
class RtlError:
    """A unit stopped: the command (its index in the unit's queue) and the field its error status names (or,
    with ``cause`` "a bank conflict in", the buffer whose bank refused its access)."""

    unit: Unit
    index: int
    field: str
    cause: str = "field"

    def __str__(self) -> str:
        return f"{self.unit.name}[{self.index}] stopped on {self.cause} {self.field}"


@dataclass
class RtlResult:
    memory: Memory
    cycles: dict[Unit, list[tuple[int, int]]]     # per unit, per retired command: (start cycle, retire cycle)
    total_cycles: int
    done: bool
    errors: list[RtlError] = field(default_factory=list)
    token_error: bool = False                       # FINISH found a token queue not empty
    dram_faults: list[Unit] = field(default_factory=list)
    run_seconds: float = 0.0    # wall time the simulator ran free, from run to the stop (no build, load, read-back)
    build_seconds: float | None = None    # the Verilog build this run had to compile first; None: none compiled
    registers: dict[str, int] = field(default_factory=dict)    # host registers read after the run (NPU top)

    def command_cycles(self, unit: Unit) -> list[int]:
        """Cycles of each retired command of ``unit``, from its start pulse to its retire pulse."""
        return [end - begin for begin, end in self.cycles[unit]]


def _differences(expected: Memory, got: Memory) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    """Every space (DRAM, then the buffers) that differs: name, golden bytes, RTL bytes, differing addresses."""
    spaces = [("DRAM", expected.dram, got.dram)] + [(b.name, expected.buffers[b], got.buffers[b]) for b in Buffer]
    return [(name, want, have, differ) for name, want, have in spaces
            if (differ := np.flatnonzero(want != have)).size]


def first_difference(expected: Memory, got: Memory) -> str | None:
    """The first byte where two memory images differ, by space, address, expected and RTL value; None if equal."""
    differences = _differences(expected, got)
    if not differences:
        return None
    name, want, have, differ = differences[0]
    first = int(differ[0])
    return (f"{name} byte {first:#x}: golden {int(want[first])}, RTL {int(have[first])} "
            f"({differ.size} bytes differ in {name})")


@dataclass(frozen=True)
class Mismatch:
    """The first wrong element of an RTL run, named by the command that should have produced it.

    A tile is a command here: the lowering (:mod:`aipu.compiler.lowering`) keeps no map from commands to the
    tiles they belong to, so the unit and queue index are the tile's identity."""

    space: str                  # DRAM or a buffer name
    address: int                # byte address of the element's first byte in the space
    element: int                # index of the element in what the command wrote (no command: in the space)
    dtype: np.dtype             # the type the command wrote; no command: int32 in ACC, bytes elsewhere
    golden: int
    rtl: int
    differing_bytes: int        # over every space
    unwritten_bytes: int        # of those, bytes that no command writes (preloaded content the RTL changed)
    unit: Unit | None = None    # None: the element is in bytes no command writes
    index: int | None = None    # the command's index in its unit's queue
    command: str = ""           # the command's disassembly line
    cycles: tuple[int, int] | None = None   # RTL (start, retire) cycles; None if the RTL never retired it

    def __str__(self) -> str:
        what = f"{self.space} {self.dtype.name} element {self.element} at byte {self.address:#x}"
        values = f"golden {self.golden}, RTL {self.rtl}"
        total = f"bytes differing: {self.differing_bytes}" + (
            f"; written by no command: {self.unwritten_bytes}" if self.unwritten_bytes else "")
        if self.unit is None:
            return f"{what}, written by no command: {values} ({total})"
        when = f"RTL cycles {self.cycles[0]}..{self.cycles[1]}" if self.cycles else "the RTL never retired it"
        return f"{self.unit.name}[{self.index}] wrote {what}: {values}; {when} ({total})\n  {self.command}"


def first_mismatch(program: Program, expected: Result, got: RtlResult) -> Mismatch | None:
    """The first element where the RTL's memory departs from the interpreter's; None if every byte agrees.

    Each differing byte is blamed on its last writer in the interpreter's write log (the command whose output
    it holds at the end); of those commands the one first in execution order is reported, at the first
    differing element of its output. Only if no command wrote any differing byte is the first such byte
    reported (DRAM, then the buffers)."""
    differences = _differences(expected.memory, got.memory)
    if not differences:
        return None
    blamed = None      # (write position, golden bytes, RTL bytes, differing addresses whose last writer it is)
    unwritten = []     # (space, golden bytes, RTL bytes, differing addresses no command wrote)
    for name, want, have, differ in differences:
        writer = _last_writers(expected, name, want.size)[differ]
        unwritten.append((name, want, have, differ[writer < 0]))
        if (writer >= 0).any():
            position = int(writer[writer >= 0].min())
            if blamed is None or position < blamed[0]:
                blamed = (position, want, have, differ[writer == position])
    counts = dict(differing_bytes=sum(differ.size for *_, differ in differences),
                  unwritten_bytes=sum(addresses.size for *_, addresses in unwritten))
    if blamed is None:
        name, want, have, addresses = next(entry for entry in unwritten if entry[3].size)
        dtype = np.dtype(ACC_DTYPE if name == Buffer.ACC.name else np.uint8)
        return Mismatch(name, **_element(np.arange(want.size), int(addresses[0]), dtype, want, have), **counts)
    position, want, have, addresses = blamed
    write = expected.writes[position]
    order = write.bytes()
    retired = got.cycles.get(write.unit, [])
    return Mismatch(write.space, **_element(order, int(np.flatnonzero(np.isin(order, addresses))[0]), write.dtype,
                                            want, have), **counts,
                    unit=write.unit, index=write.index,
                    command=program.queues[write.unit][write.index].describe(program.config),
                    cycles=tuple(retired[write.index]) if write.index < len(retired) else None)


def _last_writers(expected: Result, space: str, size: int) -> np.ndarray:
    """Per byte of ``space``, the position in the write log of the last write to it; -1 if none."""
    writer = np.full(size, -1, np.int64)
    for position, write in enumerate(expected.writes):
        if write.space == space:
            writer[write.bytes()] = position
    return writer


def _element(order: np.ndarray, position: int, dtype: np.dtype, want: np.ndarray, have: np.ndarray) -> dict:
    """The element of ``dtype`` holding byte ``position`` of the bytes ``order`` lists: its index, address
    and golden and RTL values (little-endian, as the memory images are)."""
    size = dtype.itemsize
    element = position // size
    span = order[element * size:(element + 1) * size]
    little = dtype.newbyteorder("<")
    return dict(address=int(span[0]), element=element, dtype=dtype, golden=int(want[span].view(little)[0]),
                rtl=int(have[span].view(little)[0]))
