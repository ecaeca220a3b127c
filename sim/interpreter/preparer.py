"""The checks a program has once: each command's fields, and every byte it touches declared, bounds-checked and
race-checked; the counts that do not depend on the data (MACs, bytes moved). Each command becomes a
:class:`Step` whose run-time part is left for the run (the handlers in ``handlers/``)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aipu.sim.interpreter.handlers import HANDLERS
from aipu.sim.interpreter.results import DRAM, Stats, Write
from aipu.sim.interpreter.state import RunState, View, space_name
from aipu.sim.machine.arch import BUFFER_UNIT_BYTES, DTYPE_NUMPY, Buffer, DType, HardwareConfig
from aipu.sim.machine.isa import Unit, dram_run_bytes
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.machine.program import Command
from aipu.sim.machine.ordering import Access, BankChecker, RaceDetector, writes_a_byte_twice


@dataclass(frozen=True, slots=True)
class Step:
    """One command made ready to run: its checks done, its accesses race-checked, its writes listed."""

    unit: Unit
    index: int
    where: str                                   # "CONV[3] CONV": how errors name the command
    execute: Callable[[RunState], None] | None   # the data work (None: FINISH has none)
    writes: tuple[Write, ...]
    traffic: tuple[tuple[str, bool, int], ...] = ()   # (space, written, bytes) of every access, for the reports
    row: np.ndarray | None = None                # the same data work as a row of the compiled run loop


def named_errors(where: str, function: Callable, *arguments):
    """``function(*arguments)``; a ValueError, TypeError or OverflowError it raises is raised again as an
    ExecutionError that names the command ``where``."""
    try:
        return function(*arguments)
    except ExecutionError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        raise ExecutionError(f"{where}: {exc}") from exc


class Preparer:
    """Turns each command into a :class:`Step`, once per program: every check that does not depend on the data
    (field combinations, bounds, store patterns, races between accesses), and the counts the run reports
    that do not depend on it either (MACs, bytes moved). What remains for the run is the data work.

    A handler sees the command being prepared through ``where`` and ``label`` (how errors and counts name it),
    declares its accesses through :meth:`span`, :meth:`tensor` and :meth:`strided_dram`, adds to ``stats`` and
    may set ``row``, the command as a row of the compiled run loop."""

    def __init__(self, config: HardwareConfig, dram_bytes: int, check_hazards: bool) -> None:
        self.config = config
        self.sizes = {DRAM: dram_bytes, **{buffer: config.buffer(buffer).bytes for buffer in Buffer}}
        self.races = RaceDetector() if check_hazards else None
        self.banks = BankChecker(config) if check_hazards else None
        self.stats = Stats()
        self.unit, self.index, self.clock = Unit.LOAD, 0, ()
        self.label = self.where = ""
        self.writes: list[Write] = []
        self.traffic: list[tuple[str, bool, int]] = []
        self.row: np.ndarray | None = None

    def step(self, unit: Unit, index: int, command: Command, clock: tuple[int, ...]) -> Step:
        self.unit, self.index, self.clock, self.writes, self.traffic, self.row = unit, index, clock, [], [], None
        self.label = f"{unit.name}[{index}]"
        self.where = f"{self.label} {command.opcode.name}"
        execute = named_errors(self.where, HANDLERS[command.opcode], self, command)
        self.stats.commands[unit.name] += 1
        return Step(unit, index, self.where, execute, tuple(self.writes), tuple(self.traffic), self.row)

    # --- accesses: every byte a command touches is declared through these ---------------------------
    def span(self, space, field_name: str, address: int, nbytes: int, written: np.dtype | None,
             byte_address: bool = False) -> tuple[int, int]:
        """Bounds-check and race-check a contiguous byte range; return its (first, end) byte. Addresses count
        the buffer's units (int32 entries, parameter records) unless ``byte_address`` (DMA) says bytes.
        ``written``: the element type of a write, None for a read."""
        start = address * (1 if space == DRAM or byte_address else BUFFER_UNIT_BYTES[space])
        if address < 0 or start + nbytes > self.sizes[space]:
            raise ExecutionError(f"{self.where}: field {field_name} = {address:#x}: access of {nbytes} bytes "
                                 f"ends at byte {start + nbytes:#x}, beyond {space_name(space)} "
                                 f"({self.sizes[space]:#x} bytes)")
        self._record(space, start, start + nbytes, written)
        return start, start + nbytes

    def _record(self, space, low: int, high: int, written: np.dtype | None,
                pattern: tuple[int, ...] | None = None) -> None:
        """Log a write (for tracing a mismatch to its command) and race-check any access."""
        if high <= low:
            return
        self.traffic.append((space_name(space), written is not None,
                             high - low if pattern is None else pattern[1] * pattern[3] * pattern[5]))
        if written is not None:
            self.writes.append(Write(self.unit, self.index, space_name(space), low, high, written, pattern))
        if self.races is not None:
            access = Access(space_name(space), low, high, written is not None, self.unit, self.index, self.clock,
                            pattern)
            self.races.access(access)
            self.banks.access(access)

    def tensor(self, space, field_name: str, address: int, shape, dtype, written: bool = False) -> View:
        """``shape`` elements of ``dtype`` at ``address``, read (or written)."""
        np_dtype = DTYPE_NUMPY[dtype] if isinstance(dtype, DType) else np.dtype(dtype)
        start, stop = self.span(space, field_name, address, math.prod(shape) * np_dtype.itemsize,
                                np_dtype if written else None)
        return space, start, stop, np_dtype, tuple(shape)

    def strided_dram(self, field_name: str, address: int, cmd: Command, write: bool) -> tuple:
        """A DMA pattern [y][x][run bytes] over DRAM (strides are unsigned), bounds- and race-checked."""
        elem = DType(cmd.elem_type)
        run = dram_run_bytes(cmd)
        pattern = (address, cmd.y_size, cmd.dram_y_stride, cmd.x_size, cmd.dram_x_stride, run)
        end = address + (cmd.y_size - 1) * cmd.dram_y_stride + (cmd.x_size - 1) * cmd.dram_x_stride + run
        if end > self.sizes[DRAM]:
            raise ExecutionError(f"{self.where}: field {field_name} = {address:#x}: strided access reaches byte "
                                 f"{end - 1:#x}, beyond DRAM ({self.sizes[DRAM]:#x} bytes)")
        if write and writes_a_byte_twice(pattern):
            raise ExecutionError(f"{self.where}: dram_y_stride = {cmd.dram_y_stride}, dram_x_stride = "
                                 f"{cmd.dram_x_stride}: the store pattern writes some bytes twice")
        self._record(DRAM, address, end, DTYPE_NUMPY[elem] if write else None, pattern)
        return address, (cmd.y_size, cmd.x_size, run), (cmd.dram_y_stride, cmd.dram_x_stride, 1)
