"""The command fetcher's geometry and its DRAM request schedule, cycle by cycle (docs/rtl.md, "Command fetch").

The fetcher (``aipu.rtl.fetch``) moves the program image's queues (``aipu.sim.machine.program_image``) from
DRAM into one FIFO per unit in *chunks*: a chunk is one command read as ``words_per_chunk`` DRAM words when a
DRAM word is narrower than a command, else one DRAM word holding ``commands_per_chunk`` commands. Its rules:

  cycle 0         ``start``; PROGRAM_BASE checked (HEADER from cycle 1)
  HEADER          the header's words requested in address order, then their responses awaited;
                  the cycle after the last response: CHECK; the cycle after CHECK: FETCH
  request slot    one registered request (``valid``, ``addr``) held until taken (``valid`` and ``ready``);
                  in a cycle where it is empty or taken, the next request (if any) is chosen into it
  FETCH choice    the chunk under way continues with its next word; else the first unit in round-robin
                  order (from the unit after the last one chosen, LOAD first after start) that has a chunk
                  left and a credit starts its next chunk
  credits         per unit, ``chunks_per_fifo`` at start; one spent when a chunk is chosen, one returned in
                  the cycle after the unit takes the chunk's last command (so the FIFO never overflows)
  FIFO            a chunk enters in the cycle its last word's response arrives and can be taken from the
                  next cycle; the unit takes one command per cycle its stream is ready

:class:`Fetcher` steps these rules one cycle at a time (the NPU's cycle model drives it), :func:`request_schedule`
replays them against given DRAM and unit traffic; tests/rtl/test_fetch.py checks the RTL against it.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import COMMAND_BYTES, Unit
from aipu.sim.machine.program_image import HEADER_BYTES

UNITS = len(Unit)
_UNITS = tuple(Unit)


@dataclass(frozen=True)
class FetchGeometry:
    """How the fetcher of ``config`` with FIFOs of at least ``fifo_depth`` commands cuts queues into chunks."""

    word_bytes: int
    fifo_depth: int

    @classmethod
    def of(cls, config: HardwareConfig, fifo_depth: int) -> FetchGeometry:
        if fifo_depth < 1:
            raise ValueError(f"fifo_depth = {fifo_depth}: at least 1 command")
        return cls(config.dram.bytes_per_cycle, fifo_depth)

    @property
    def words_per_chunk(self) -> int:
        return max(1, COMMAND_BYTES // self.word_bytes)

    @property
    def commands_per_chunk(self) -> int:
        return max(1, self.word_bytes // COMMAND_BYTES)

    @property
    def chunk_bytes(self) -> int:
        return max(COMMAND_BYTES, self.word_bytes)

    @property
    def header_words(self) -> int:
        return -(-HEADER_BYTES // self.word_bytes)

    @property
    def chunks_per_fifo(self) -> int:
        """FIFO depth in chunks: ``fifo_depth`` commands rounded up to whole chunks, at least two (a unit takes
        commands from one chunk while the next arrives)."""
        return max(2, -(-self.fifo_depth // self.commands_per_chunk))

    def chunks(self, commands: int) -> int:
        return -(-commands // self.commands_per_chunk)


@dataclass
class _Queue:
    """One unit's state in the replay: its next chunk's first word, chunks left, credits, FIFO and progress."""

    word: int
    chunks_left: int
    credits: int
    commands_left: int
    fifo: deque           # cycles from which each arrived chunk can be taken
    lane: int = 0


class Fetcher:
    """The fetcher's rules as a state stepped one cycle at a time, for a valid header at word ``header_word``
    whose queues are ``queues[unit] = (first word address, commands)``.

    In each cycle ``t`` from 1 on: ``slot`` is the word address offered (None: no request); the units that take
    a command in ``t`` call :meth:`take` (a unit may take while :meth:`head` <= ``t``); then :meth:`step` is told
    whether the request was taken in ``t`` and when its answer will come (``answer`` >= ``t`` + 1; answers come
    in request order, at least one cycle apart) and moves to ``t + 1``."""

    def __init__(self, geometry: FetchGeometry, header_word: int, queues: dict[Unit, tuple[int, int]]):
        self.geometry = geometry
        self.state = {unit: _Queue(word, geometry.chunks(count), geometry.chunks_per_fifo, count, deque())
                      for unit, (word, count) in queues.items()}
        self.answers, self.tags = deque(), deque()
        self.slot = None                                # the address in the request register
        self.phase, self.header_word, self.header_chosen, self.header_answers = "HEADER", header_word, 0, 0
        self.chunk_word, self.chunk_words_left, self.answered_words, self.next_unit = 0, 0, 0, 0
        self.returned: list[Unit] = []

    @property
    def done(self) -> bool:
        """Every queue's commands have been taken (nothing is left to request or answer)."""
        return self.phase == "FETCH" and all(not queue.commands_left for queue in self.state.values())

    @property
    def requesting(self) -> bool:
        """A request is offered in the next cycle, or the next cycle's step may choose one (or leave CHECK):
        otherwise only an answer or :meth:`take` can make the fetcher act again."""
        if self.slot is not None or self.phase == "CHECK":
            return True
        if self.phase == "HEADER":
            return self.header_chosen < self.geometry.header_words
        return bool(self.chunk_words_left) or _round_robin(self.state, self.next_unit) is not None

    def head(self, unit: Unit) -> int | None:
        """The cycle from which ``unit`` can take its next command (None: its FIFO is empty)."""
        fifo = self.state[unit].fifo if unit in self.state else None
        return fifo[0] if fifo else None

    def take(self, unit: Unit) -> None:
        """``unit`` takes its next command in this cycle; the chunk's last command returns a credit after
        this cycle's choice."""
        queue, geometry = self.state[unit], self.geometry
        queue.commands_left -= 1
        queue.lane += 1
        if queue.lane == geometry.commands_per_chunk or not queue.commands_left:
            queue.fifo.popleft()
            queue.lane = 0
            self.returned.append(unit)

    def step(self, cycle: int, answer: int | None) -> None:
        """End cycle ``cycle``: the request in the slot was taken if ``answer`` (the cycle of its answer) is
        given; answers due arrive; the next request is chosen into an empty slot; credits return."""
        geometry, state = self.geometry, self.state
        if answer is not None:
            self.answers.append(max(answer, self.answers[-1] + 1 if self.answers else 0))
            self.slot = None
        if self.answers and self.answers[0] == cycle:
            self.answers.popleft()
            if self.phase == "HEADER":
                self.header_answers += 1
            else:
                self.answered_words += 1
                if self.answered_words == geometry.words_per_chunk:
                    self.answered_words = 0
                    state[self.tags.popleft()].fifo.append(cycle + 1)
        if self.slot is None and self.phase == "HEADER" and self.header_chosen < geometry.header_words:
            self.slot, self.header_chosen = self.header_word + self.header_chosen, self.header_chosen + 1
        elif self.slot is None and self.phase == "FETCH" and self.chunk_words_left:
            self.chunk_word, self.chunk_words_left = self.chunk_word + 1, self.chunk_words_left - 1
            self.slot = self.chunk_word
        elif self.slot is None and self.phase == "FETCH":
            unit = _round_robin(state, self.next_unit)
            if unit is not None:
                queue = state[unit]
                self.slot = self.chunk_word = queue.word
                self.chunk_words_left = geometry.words_per_chunk - 1
                queue.word, queue.chunks_left, queue.credits = (queue.word + geometry.words_per_chunk,
                                                                queue.chunks_left - 1, queue.credits - 1)
                self.tags.append(unit)
                self.next_unit = (unit + 1) % UNITS
        for unit in self.returned:
            state[unit].credits += 1
        self.returned.clear()
        if self.phase == "CHECK":
            self.phase = "FETCH"
        elif self.phase == "HEADER" and self.header_answers == geometry.header_words:
            self.phase = "CHECK"


def request_schedule(geometry: FetchGeometry, header_word: int, queues: dict[Unit, tuple[int, int]], *,
                     dram_ready: Callable[[int], bool], latency: Callable[[int], int],
                     unit_ready: Callable[[Unit, int], bool], max_cycles: int) -> list[tuple[int, int]]:
    """(cycle, DRAM word address) of every request taken, cycle 0 being ``start``'s, for a valid header at word
    ``header_word`` whose queues are ``queues[unit] = (first word address, commands)``. Request i (in the order
    taken) is answered ``latency(i)`` >= 1 cycles after it was taken, or the cycle after the previous answer if
    that is later; ``dram_ready`` and ``unit_ready`` give the DRAM port's ``ready`` and each unit's stream
    ``ready`` in a cycle."""
    fetcher, taken = Fetcher(geometry, header_word, queues), []
    for cycle in range(1, max_cycles):
        answer = None
        if fetcher.slot is not None and dram_ready(cycle):
            answer = cycle + latency(len(taken))
            taken.append((cycle, fetcher.slot))
        for unit in fetcher.state:
            head = fetcher.head(unit)
            if head is not None and head <= cycle and unit_ready(unit, cycle):
                fetcher.take(unit)
        fetcher.step(cycle, answer)
        if fetcher.done:
            break
    return taken


def _round_robin(state: dict[Unit, _Queue], first: int) -> Unit | None:
    """The first unit from ``first`` on, in ``Unit`` order wrapping around, with a chunk left and a credit."""
    for step in range(UNITS):
        unit = _UNITS[(first + step) % UNITS]
        queue = state.get(unit)
        if queue is not None and queue.chunks_left and queue.credits:
            return unit
    return None
