"""The NPU top's timeline (``aipu.rtl.npu.Npu``), cycle for cycle: every command's start and retire with the
command fetcher filling the units' FIFOs and one DRAM bridge shared by the readers (docs/cycle-model.md, "The
NPU top").

Cycle 0 is START's. Besides the sequencer's rules (``aipu.sim.timing.sequencer``; the units are reset in cycle
0 and take from cycle 1), three things set the Npu apart from the test harness (``dram="ports"``):

* a unit takes a command only from the cycle the fetcher has put it in its FIFO, and each take may return a
  credit that sends the fetcher for the unit's next chunk (:class:`aipu.sim.timing.fetch.Fetcher`);
* LOAD reads through the bridge's one read grant a cycle, round robin between the fetcher, LOAD and WDEC
  (``aipu.sim.timing.dram_bridge``): a LOAD's requests are its probe (offered in the cycle after its start)
  and one per step of its walk, step ``k + 1`` offered ``slot[k]`` cycles after step ``k`` was granted (the
  probe: one cycle); a request not granted is offered again. Every read is answered ``dram.latency_cycles``
  after its grant (the read-side limits never bind: one grant a cycle, each open for fewer cycles than they
  allow), and the LOAD retires ``latency + slot[last] - 1 + after`` cycles after its last step's grant. Alone
  on the bridge every request is granted when offered: the formula (``aipu.sim.timing.dma``);
* WDEC's lanes' word fetchers read through the same grant (the unit's, round robin between its lanes), as
  their FIFOs make room, and each lane's engine waits when its window lacks bits or its write is held
  (:class:`aipu.sim.timing.npu_wdec.WdecUnit`);
* STORE writes through the bridge's write side, which no other unit uses, and retires once every write has
  been answered (``write_idle``): a function of the command alone (:func:`store_cycles`).

Time advances from event to event: a cycle is visited only if a unit takes, starts or retires a command in
it, the fetcher requests or receives a word, LOAD is refused, or WDEC requests beside another reader (its
cycles before such a request step at once: npu_wdec.WdecUnit.next_request). While LOAD (or WDEC) is the only
reader that can request before the next event, its grants up to it are placed first, each when requested.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing import command_cycles
from aipu.sim.timing.dma import CHECK_CYCLES, codebook_cycles, dram_slots
from aipu.sim.timing.dram_bridge import read_cycles, write_hold
from aipu.sim.timing.fetch import FetchGeometry, Fetcher
from aipu.sim.timing.sequencer import NEXT_START, token_wait

READERS = 3                 # the bridge's readers in ARID order: the fetcher, LOAD, WDEC (aipu.rtl.npu.READERS)
FETCH_READER, LOAD_READER, WDEC_READER = 0, 1, 2
FIFO_DEPTH = 4              # the Npu's default fifo_depth: commands each unit's FIFO holds at least
FIRST_TAKE = 1              # START resets the units in cycle 0: they take from cycle 1
TAKE_TO_START = NEXT_START - 1      # take, check, start
NEVER = 1 << 62


def store_cycles(config: HardwareConfig, command: Command) -> tuple[int, int]:
    """A STORE's formula cycles and its cycles from start to retire on the Npu: its walk offers its last word
    ``before + 1 + slot[0] + ... + slot[last]`` cycles after the start, the bridge takes every word as it is
    offered (``dram_bridge.default_max_writes``), and the STORE retires when the last word's B has come."""
    before, slots, after = dram_slots(config, command)
    return before + int(slots.sum()) + after, before + 1 + int(slots.sum()) + write_hold(config)


@dataclass
class _Requests:
    """A LOAD's requests still to be granted: request ``k`` is offered ``gaps[k - 1]`` cycles after request
    ``k - 1``'s grant; ``offered`` is the cycle from which request ``index`` is offered. ``prefix[k]`` sums
    ``gaps[:k]``, so that a run of grants each at its offer is placed at once."""

    gaps: np.ndarray
    prefix: np.ndarray
    tail: int                   # cycles from the last grant to the retire
    index: int
    offered: int
    work: int                   # the LOAD's formula cycles

    @classmethod
    def of_load(cls, config: HardwareConfig, command: Command, start: int) -> _Requests:
        before, slots, after = dram_slots(config, command)
        gaps = np.concatenate(([1], slots)).astype(np.int64)     # the probe, then the walk's steps
        prefix = np.concatenate(([0], np.cumsum(gaps)))
        probe = start + CHECK_CYCLES + codebook_cycles(config, command)    # after the codebook's reads
        return cls(gaps, prefix, read_cycles(config) + int(slots[-1]) - 1 + after, 0, probe,
                   before + int(slots.sum()) + after)

    def grant(self, cycle: int) -> int | None:
        """Request ``index`` granted in ``cycle``; the retire cycle once the last one is."""
        self.index += 1
        if self.index == self.gaps.size:
            return cycle + self.tail
        self.offered = cycle + int(self.gaps[self.index - 1])
        return None

    def grant_alone(self, until: int) -> tuple[bool, int | None]:
        """Every request offered before ``until`` granted when offered (no other reader requests before it):
        whether any was, and the retire cycle if the last one was."""
        base = self.offered - int(self.prefix[self.index])
        end = min(int(np.searchsorted(self.prefix, until - base)), self.gaps.size)
        if end <= self.index:
            return False, None
        self.index = end
        if end == self.gaps.size:
            return True, base + int(self.prefix[end - 1]) + self.tail
        self.offered = base + int(self.prefix[end])
        return True, None


@dataclass
class _Sequencer:
    """One unit's place in its queue: ``index`` the command taken or next to take, ``idle`` the cycle from
    which it may take it, ``taken`` the cycle it did (None: not yet), ``start`` and ``retire`` once known."""

    idle: int = FIRST_TAKE
    index: int = 0
    taken: int | None = None
    start: int | None = None
    retire: int | None = None
    earliest: int | None = None     # the start, once everything it waits for is known (it then stays)
    checked: int = -1               # NpuTimeline.changes when the start was last sought
    work: int = 0                   # the formula's cycles of the command under way
    waited_on: str | None = None


class NpuTimeline:
    """The timeline of ``program`` on the Npu: :meth:`run` gives, per unit and command, (ready, start, retire,
    work, waited_on) as :class:`aipu.sim.cycle.CommandTiming` holds them."""

    def __init__(self, program: Program, memory: Memory) -> None:
        self.config, self.memory = program.config, memory
        self.queues = {unit: tuple(program.queues[unit]) for unit in Unit}
        self.depth = self.config.queues.token_depth
        geometry = FetchGeometry.of(self.config, FIFO_DEPTH)
        self.fetcher = Fetcher(geometry, 0, {unit: (0, len(queue)) for unit, queue in self.queues.items()})
        self.units = {unit: _Sequencer() for unit in Unit}
        self.pushed: dict[tuple[Unit, Unit], list[int]] = defaultdict(list)   # retire cycle of each push
        self.popped: dict[tuple[Unit, Unit], list[int]] = defaultdict(list)   # start cycle of each pop
        self.timings: dict[Unit, list[tuple]] = {unit: [] for unit in Unit}
        self.load: _Requests | None = None
        self.wdec = None                        # a WDEC command with words still to request (npu_wdec.WdecUnit)
        self.pointer = 0                    # the bridge's round-robin pointer
        self.changes = 0                    # starts and retires so far: what a waiting start depends on

    def run(self) -> dict[Unit, list[tuple]]:
        cycle = FIRST_TAKE
        while cycle is not None:
            self._cycle(cycle)
            cycle = self._next(cycle)
        left = [unit.name for unit in Unit if len(self.timings[unit]) < len(self.queues[unit])]
        if left:      # ordering.schedule found the program free of deadlock; the timing cannot add one
            raise AssertionError(f"the Npu's cycle model stopped with commands left on {', '.join(left)}")
        return self.timings

    def _cycle(self, cycle: int) -> None:
        """Everything that happens in ``cycle``: retires, starts, takes, the bridge's grant, the fetcher."""
        for unit, seq in self.units.items():
            if seq.retire == cycle:
                self._retire(unit, cycle)
        for unit, seq in self.units.items():
            if seq.taken is not None and seq.start is None and self._earliest(unit) == cycle:
                self._start(unit, cycle)
        fetcher = self.fetcher
        for unit, seq in self.units.items():
            head = fetcher.head(unit)
            if seq.taken is None and head is not None and head <= cycle and seq.idle <= cycle:
                fetcher.take(unit)
                seq.taken = cycle
        requesting = [fetcher.slot is not None, self.load is not None and self.load.offered <= cycle,
                      self.wdec is not None and self.wdec.requesting(cycle)]
        answer, granted = None, None
        if any(requesting):             # the first requester from the pointer on, wrapping around
            granted = next(reader % READERS for reader in range(self.pointer, self.pointer + READERS)
                           if requesting[reader % READERS])
            self.pointer = (granted + 1) % READERS
            if granted == FETCH_READER:
                answer = cycle + read_cycles(self.config)
            elif granted == LOAD_READER:
                self._load_retires(self.load.grant(cycle))
        if self.wdec is not None:
            self.wdec.step(cycle, granted == WDEC_READER)
            if self.wdec.requested:
                self.units[Unit.WDEC].retire, self.wdec = self.wdec.finish(), None
        fetcher.step(cycle, answer)

    def _next(self, cycle: int) -> int | None:
        """The next cycle in which something happens (None: nothing ever will). While LOAD alone will request
        until then, its grants up to then are placed first."""
        events = []
        for unit, seq in self.units.items():
            if seq.retire is not None:
                events.append(seq.retire)
            elif seq.taken is not None and seq.start is None:
                earliest = self._earliest(unit)
                if earliest is not None:
                    events.append(earliest)
            elif seq.taken is None and self.fetcher.head(unit) is not None:
                events.append(max(seq.idle, self.fetcher.head(unit), cycle + 1))
        fetcher = self.fetcher
        if fetcher.requesting:
            events.append(cycle + 1)
        elif fetcher.answers:
            events.append(fetcher.answers[0])
        load, wdec = self.load, self.wdec
        if load is not None and load.offered <= cycle:
            return cycle + 1        # LOAD refused in this cycle: offered again
        beside = load is not None or fetcher.requesting
        if wdec is not None and beside:
            events.append(wdec.next_request(cycle + 1))     # WDEC beside other readers: each request visited
        horizon = min(events, default=None)
        if wdec is not None and not beside:
            return self._wdec_alone(NEVER if horizon is None else horizon)
        if load is None or horizon is not None and horizon <= load.offered:
            return horizon
        granted, retire = load.grant_alone(NEVER if horizon is None else horizon)
        if granted:
            self.pointer = (LOAD_READER + 1) % READERS
        if retire is not None:
            self._load_retires(retire)
            return min(horizon, retire) if horizon is not None else retire
        return min(horizon, load.offered) if horizon is not None else load.offered

    def _wdec_alone(self, horizon: int) -> int:
        """Step WDEC, the only reader that can request, up to ``horizon`` (each request granted when made); the
        next cycle to visit."""
        wdec = self.wdec
        if wdec.alone(horizon):
            self.pointer = (WDEC_READER + 1) % READERS
        if wdec.requested:
            self.units[Unit.WDEC].retire, self.wdec = wdec.finish(), None
            return min(horizon, self.units[Unit.WDEC].retire)
        return horizon

    def _load_retires(self, retire: int | None) -> None:
        if retire is not None:
            self.units[Unit.LOAD].retire, self.load = retire, None

    def _earliest(self, unit: Unit) -> int | None:
        """The cycle the unit's taken command starts, if everything it waits for is known (None: not yet).
        Known, it stays: later pushes and pops cannot change the ones it waits for."""
        seq = self.units[unit]
        if seq.earliest is None and seq.checked != self.changes:
            seq.earliest, seq.checked = self._waits(unit, seq), self.changes
        return seq.earliest

    def _waits(self, unit: Unit, seq: _Sequencer) -> int | None:
        """The start as ``aipu.sim.cycle`` finds it, from the take; ``seq.waited_on`` names what held it last
        ("fetch": the take, when the FIFO was empty as the unit went idle)."""
        command = self.queues[unit][seq.index]
        waited_on = "fetch" if seq.taken > seq.idle else None
        found = token_wait(command, unit, seq.taken + TAKE_TO_START, waited_on, self.pushed, self.popped, self.depth,
                           self._drained)
        if found is None:
            return None
        start, seq.waited_on = found
        return start

    def _drained(self, unit: Unit) -> int | None:
        """None while ``unit`` has commands left to time; else its last retire (-1 for none)."""
        if len(self.timings[unit]) < len(self.queues[unit]):
            return None
        return self.timings[unit][-1][2] if self.timings[unit] else -1

    def _start(self, unit: Unit, cycle: int) -> None:
        seq = self.units[unit]
        command = self.queues[unit][seq.index]
        seq.start = cycle
        self.changes += 1
        for source in command.pop:
            self.popped[source, unit].append(cycle)
        if command.opcode == Opcode.LOAD:
            self.load = _Requests.of_load(self.config, command, cycle)
            seq.work = self.load.work
        elif command.opcode == Opcode.WDEC:
            from aipu.sim.timing.npu_wdec import WdecUnit       # the codec's decoders: only when a WDEC is timed

            try:                    # a stream that does not decode has no timing: the RTL stops on it
                seq.work = command_cycles(self.config, command, self.memory)
            except ExecutionError as error:
                raise ExecutionError(f"WDEC[{seq.index}]: {error}") from None
            stream = self.memory.dram[command.dram_addr:command.dram_addr + command.length].tobytes()
            self.wdec = WdecUnit(self.config, command, stream, cycle)
        elif command.opcode == Opcode.STORE:
            seq.work, duration = store_cycles(self.config, command)
            seq.retire = cycle + duration
        else:
            seq.work = command_cycles(self.config, command, self.memory)
            seq.retire = cycle + seq.work
            if seq.retire == cycle:
                self._retire(unit, cycle)

    def _retire(self, unit: Unit, cycle: int) -> None:
        seq = self.units[unit]
        command = self.queues[unit][seq.index]
        self.changes += 1
        for target in command.push:
            self.pushed[unit, target].append(cycle)
        work = seq.work
        if unit == Unit.WDEC:   # lanes' round-robin arbiters: a refused grant may even shorten a split stream
            work = min(work, cycle - seq.start)
        self.timings[unit].append((seq.idle + TAKE_TO_START, seq.start, cycle, work, seq.waited_on))
        self.units[unit] = _Sequencer(idle=cycle + 1, index=seq.index + 1)
