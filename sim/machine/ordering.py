"""In what order the units run their commands, and which accesses the tokens order.

:func:`schedule` plays a program's token protocol without touching data: the order in which units run
(fixed or random), each command's vector clock, deadlock and unbalanced tokens. :class:`RaceDetector`
then checks, access by access, that two accesses to overlapping bytes (at least one a write) are ordered
by a token chain, and :class:`BankChecker` that two commands of different units using one bank of a banked
buffer are. The interpreter does all three once per program (:func:`aipu.sim.interpreter.prepare`).
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import numpy as np

from aipu.sim.machine.arch import BANKED_BUFFERS, HardwareConfig
from aipu.sim.machine.errors import BankError, DeadlockError, ExecutionError, HazardError
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.program import Command


@dataclass
class Access:
    space: str
    low: int
    high: int          # exclusive
    write: bool
    unit: Unit
    index: int
    clock: tuple[int, ...]
    pattern: tuple[int, ...] | None = None   # strided DMA (base, y_size, y_stride, x_size, x_stride, run)

    def bytes(self) -> np.ndarray:
        """The exact byte addresses touched (only computed when a conflict must be confirmed)."""
        return region_bytes(self.low, self.high, self.pattern)


def region_bytes(low: int, high: int, pattern: tuple[int, ...] | None) -> np.ndarray:
    """The byte addresses of a contiguous range or of a strided pattern, in access order."""
    if pattern is None:
        return np.arange(low, high, dtype=np.int64)
    return _pattern_offsets(*pattern).reshape(-1)


def _pattern_offsets(base: int, y_size: int, y_stride: int, x_size: int, x_stride: int, run: int) -> np.ndarray:
    return (base + np.arange(y_size, dtype=np.int64)[:, None, None] * y_stride
            + np.arange(x_size, dtype=np.int64)[None, :, None] * x_stride
            + np.arange(run, dtype=np.int64)[None, None, :])


def writes_a_byte_twice(pattern: tuple[int, ...]) -> bool:
    """Whether a DMA pattern's byte offsets repeat. Rows laid out one after another (each run within its
    x stride, each row within its y stride) never do; otherwise every byte is marked once, no sort."""
    _, y_size, y_stride, x_size, x_stride, run = pattern
    if (x_size == 1 or x_stride >= run) and (y_size == 1 or y_stride >= (x_size - 1) * x_stride + run):
        return False
    offsets = _pattern_offsets(*pattern)
    low = int(offsets.min())
    marks = np.zeros(int(offsets.max()) - low + 1, np.bool_)
    marks[offsets.reshape(-1) - low] = True
    return int(np.count_nonzero(marks)) != offsets.size


class RaceDetector:
    """Vector-clock happens-before check over byte ranges. Strided DMA accesses are first compared by
    their bounding intervals; an unordered pair that overlaps there is confirmed on the exact bytes.
    Reads and writes are kept apart, so that a read is compared with the writes only."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, bool], list[Access]] = {}    # (space, write) -> accesses

    def access(self, access: Access) -> None:
        writes = self.records.setdefault((access.space, True), [])
        reads = self.records.setdefault((access.space, False), [])
        for old in (writes + reads if access.write else writes):
            if (old.unit != access.unit and old.low < access.high and access.low < old.high
                    and old.clock[old.unit] > access.clock[old.unit]
                    and (old.pattern is None and access.pattern is None
                         or np.intersect1d(old.bytes(), access.bytes()).size)):
                raise HazardError(
                    f"{old.unit.name}[{old.index}] ({'write' if old.write else 'read'}) and "
                    f"{access.unit.name}[{access.index}] ({'write' if access.write else 'read'}) are not ordered "
                    f"by tokens but both access {access.space} [{max(old.low, access.low):#x}, "
                    f"{min(old.high, access.high):#x})")
        if access.write:   # accesses this write covers and follows can no longer race with anything new
            for records in (writes, reads):
                records[:] = [old for old in records
                              if not (old.clock[old.unit] <= access.clock[old.unit]
                                      and access.low <= old.low and old.high <= access.high)]
        (writes if access.write else reads).append(access)


class BankChecker:
    """Static bank ownership (docs/isa.md, "Banks"): while a command uses a bank of ACT, WEIGHT, ACC or OUT,
    no command of another unit that the tokens do not order before or after it may use that bank, not even
    to read. Per bank only each unit's latest access is kept: a unit's commands run one after another, so
    if its latest is ordered before a new access, so are all its earlier ones."""

    def __init__(self, config: HardwareConfig) -> None:
        self.config = config
        self.banked = {buffer.name: buffer for buffer in BANKED_BUFFERS}
        self.latest: dict[tuple[str, int], dict[Unit, Access]] = {}

    def access(self, access: Access) -> None:
        buffer = self.banked.get(access.space)
        if buffer is None:
            return
        size = self.config.bank_bytes(buffer)
        for bank in self.config.banks(buffer, access.low, access.high):
            users = self.latest.setdefault((access.space, bank), {})
            for unit, old in users.items():
                if unit != access.unit and old.clock[unit] > access.clock[unit]:
                    raise BankError(
                        f"{old.unit.name}[{old.index}] and {access.unit.name}[{access.index}] are not ordered by "
                        f"tokens but both use {access.space} bank {bank} [{bank * size:#x}, {(bank + 1) * size:#x}):"
                        f" a bank serves the commands of one unit at a time")
            users[access.unit] = access


def schedule(queues: dict[Unit, tuple[Command, ...]], token_depth: int, rng: random.Random | None):
    """The order in which the units run their commands, with each command's vector clock.

    rng None: whenever several units are ready, the lowest-numbered one runs; otherwise ``rng`` picks any
    ready unit. Returns (order, clocks, failure): a deadlock or unbalanced tokens at FINISH end the order at
    the point of failure and come back as the exception to raise once the commands before it are checked.
    Which units are ready depends only on the token counts, and a ready unit stays ready until it runs
    (only it pops its incoming queues and pushes its outgoing ones), so every schedule runs the same commands
    with the same happens-before relation: races and deadlocks found on one schedule hold for all."""
    heads = {unit: 0 for unit in Unit}
    tokens: dict[tuple[Unit, Unit], deque] = {(a, b): deque() for a in Unit for b in Unit if a != b}
    unit_clock = {unit: (0,) * len(Unit) for unit in Unit}
    order: list[tuple[Unit, int]] = []
    clocks: list[tuple[int, ...]] = []

    def remaining(unit: Unit) -> bool:
        return heads[unit] < len(queues[unit])

    def blocker(unit: Unit) -> str | None:
        """Why the unit's head command cannot run now (None: it can)."""
        command = queues[unit][heads[unit]]
        for source in sorted(command.pop):
            if not tokens[(source, unit)]:
                return f"waits for a token {source.name}->{unit.name} (0 available)"
        for target in sorted(command.push):
            if len(tokens[(unit, target)]) >= token_depth:
                return f"cannot push {unit.name}->{target.name}: token queue full ({token_depth}/{token_depth})"
        if command.opcode == Opcode.FINISH:
            busy = [u.name for u in Unit if u != unit and remaining(u)]
            if busy:
                return f"FINISH waits for queues {', '.join(busy)} to drain"
        return None

    units = tuple(Unit)
    left = sum(len(queues[unit]) for unit in units)
    while left:
        if rng is None:       # the fixed schedule needs only the first ready unit
            ready = next(([unit] for unit in units if remaining(unit) and blocker(unit) is None), [])
        else:
            ready = [unit for unit in units if remaining(unit) and blocker(unit) is None]
        if not ready:
            stuck = "; ".join(f"{u.name}[{heads[u]}] {queues[u][heads[u]].opcode.name} {blocker(u)}"
                              for u in Unit if remaining(u))
            return order, clocks, DeadlockError(f"deadlock after {len(order)} commands: {stuck}")
        unit = rng.choice(ready) if rng is not None else ready[0]
        index = heads[unit]
        command = queues[unit][index]
        clock = list(unit_clock[unit])
        for source in sorted(command.pop):
            clock = [max(a, b) for a, b in zip(clock, tokens[(source, unit)].popleft())]
        clock[unit] += 1
        clock = tuple(clock)
        unit_clock[unit] = clock
        for target in command.push:
            tokens[(unit, target)].append(clock)
        heads[unit] += 1
        left -= 1
        order.append((unit, index))
        clocks.append(clock)
        if command.opcode == Opcode.FINISH:
            unbalanced = {f"{a.name}->{b.name}": len(q) for (a, b), q in tokens.items() if q}
            if unbalanced:
                return order, clocks, ExecutionError(f"{unit.name}[{index}] FINISH: unbalanced tokens left in "
                                                     f"queues {unbalanced}")
    return order, clocks, None
