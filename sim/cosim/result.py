"""What an RTL run produced, read back from the :class:`aipu.rtl.system.System` the same way on every simulator."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aipu.sim.machine.arch import Buffer
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.memory import Memory


@dataclass(frozen=True)
class RtlError:
    """A unit stopped: the command (its index in the unit's queue) and the field its error status names."""

    unit: Unit
    index: int
    field: str

    def __str__(self) -> str:
        return f"{self.unit.name}[{self.index}] stopped on field {self.field}"


@dataclass
class RtlResult:
    memory: Memory
    cycles: dict[Unit, list[tuple[int, int]]]     # per unit, per retired command: (start cycle, retire cycle)
    total_cycles: int
    done: bool
    errors: list[RtlError] = field(default_factory=list)
    token_error: bool = False                       # FINISH found a token queue not empty
    dram_faults: list[Unit] = field(default_factory=list)

    def command_cycles(self, unit: Unit) -> list[int]:
        """Cycles of each retired command of ``unit``, from its start pulse to its retire pulse."""
        return [end - begin for begin, end in self.cycles[unit]]


def first_difference(expected: Memory, got: Memory) -> str | None:
    """The first byte where two memory images differ, by space, address, expected and RTL value; None if equal."""
    spaces = [("DRAM", expected.dram, got.dram)] + [(b.name, expected.buffers[b], got.buffers[b]) for b in Buffer]
    for name, want, have in spaces:
        differ = np.flatnonzero(want != have)
        if differ.size:
            first = int(differ[0])
            return (f"{name} byte {first:#x}: golden {int(want[first])}, RTL {int(have[first])} "
                    f"({differ.size} bytes differ in {name})")
    return None
