"""What a run gives back: the memory it leaves, its counts, its execution order and a log of every write."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from aipu.sim.machine.isa import Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.ordering import region_bytes

DRAM = "DRAM"      # the name of DRAM among the spaces a command reads and writes (the buffers are named by Buffer)


@dataclass
class Stats:
    """What the run did. Byte counts are keyed by direction, e.g. ``DRAM->ACT`` or ``OUT->DRAM``."""

    macs: int = 0
    bytes_moved: Counter = field(default_factory=Counter)
    commands: Counter = field(default_factory=Counter)          # unit name -> commands executed
    saturations: dict[str, int] = field(default_factory=dict)   # "REQUANT[3]" -> clamped values
    lut_out_of_range: dict[str, int] = field(default_factory=dict)  # "LUT[2]" -> inputs outside the table

    def to_dict(self) -> dict:
        return {"macs": self.macs, "bytes_moved": dict(self.bytes_moved), "commands": dict(self.commands),
                "saturations": dict(self.saturations), "saturated_values": sum(self.saturations.values()),
                "lut_out_of_range": dict(self.lut_out_of_range)}


@dataclass(frozen=True, slots=True)
class Write:
    """One write call of one command, kept so that a wrong byte can be traced back to the command that wrote it
    (one record per call, never per byte, so the log leaves the interpreter's speed alone)."""

    unit: Unit
    index: int
    space: str
    low: int
    high: int          # exclusive
    dtype: np.dtype    # the element type written
    pattern: tuple[int, ...] | None = None   # strided DMA (base, y_size, y_stride, x_size, x_stride, run)

    def bytes(self) -> np.ndarray:
        """The byte addresses written, in the order of the data written."""
        return region_bytes(self.low, self.high, self.pattern)


@dataclass
class Result:
    memory: Memory
    stats: Stats
    trace: list[tuple[Unit, int]]          # (unit, index in its queue) in execution order
    writes: list[Write] = field(default_factory=list)   # every write, in execution order
