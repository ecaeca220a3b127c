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

:func:`request_schedule` replays these rules; tests/rtl/test_fetch.py checks the RTL against it.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import COMMAND_BYTES, Unit
from aipu.sim.machine.program_image import HEADER_BYTES

UNITS = len(Unit)


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


def request_schedule(geometry: FetchGeometry, header_word: int, queues: dict[Unit, tuple[int, int]], *,
                     dram_ready: Callable[[int], bool], latency: Callable[[int], int],
                     unit_ready: Callable[[Unit, int], bool], max_cycles: int) -> list[tuple[int, int]]:
    """(cycle, DRAM word address) of every request taken, cycle 0 being ``start``'s, for a valid header at word
    ``header_word`` whose queues are ``queues[unit] = (first word address, commands)``. Request i (in the order
    taken) is answered ``latency(i)`` >= 1 cycles after it was taken, or the cycle after the previous answer if
    that is later; ``dram_ready`` and ``unit_ready`` give the DRAM port's ``ready`` and each unit's stream
    ``ready`` in a cycle."""
    state = {unit: _Queue(word, geometry.chunks(count), geometry.chunks_per_fifo, count, deque())
             for unit, (word, count) in queues.items()}
    taken, answers, tags = [], deque(), deque()
    slot = None                                     # the address in the request slot
    phase, header_chosen, header_answers = "HEADER", 0, 0
    chunk_word, chunk_words_left, answered_words, next_unit = 0, 0, 0, 0
    for cycle in range(1, max_cycles):
        if slot is not None and dram_ready(cycle):
            answers.append(max(cycle + latency(len(taken)), answers[-1] + 1 if answers else 0))
            taken.append((cycle, slot))
            slot = None
        if answers and answers[0] == cycle:
            answers.popleft()
            if phase == "HEADER":
                header_answers += 1
            else:
                answered_words += 1
                if answered_words == geometry.words_per_chunk:
                    answered_words = 0
                    state[tags.popleft()].fifo.append(cycle + 1)
        returned = [unit for unit, queue in state.items() if _take(geometry, queue, unit_ready(unit, cycle), cycle)]
        if slot is None and phase == "HEADER" and header_chosen < geometry.header_words:
            slot, header_chosen = header_word + header_chosen, header_chosen + 1
        elif slot is None and phase == "FETCH" and chunk_words_left:
            chunk_word, chunk_words_left = chunk_word + 1, chunk_words_left - 1
            slot = chunk_word
        elif slot is None and phase == "FETCH":
            unit = _round_robin(state, next_unit)
            if unit is not None:
                queue = state[unit]
                slot = chunk_word = queue.word
                chunk_words_left = geometry.words_per_chunk - 1
                queue.word, queue.chunks_left, queue.credits = (queue.word + geometry.words_per_chunk,
                                                                queue.chunks_left - 1, queue.credits - 1)
                tags.append(unit)
                next_unit = (unit + 1) % UNITS
        for unit in returned:
            state[unit].credits += 1
        if phase == "CHECK":
            phase = "FETCH"
        elif phase == "HEADER" and header_answers == geometry.header_words:
            phase = "CHECK"
        elif phase == "FETCH" and all(not q.commands_left for q in state.values()):
            break
    return taken


def _take(geometry: FetchGeometry, queue: _Queue, ready: bool, cycle: int) -> bool:
    """The unit takes a command if its FIFO's head chunk is there; whether that emptied the chunk."""
    if not (ready and queue.fifo and queue.fifo[0] <= cycle):
        return False
    queue.commands_left -= 1
    queue.lane += 1
    if queue.lane == geometry.commands_per_chunk or not queue.commands_left:
        queue.fifo.popleft()
        queue.lane = 0
        return True
    return False


def _round_robin(state: dict[Unit, _Queue], first: int) -> Unit | None:
    """The first unit from ``first`` on, in ``Unit`` order wrapping around, with a chunk left and a credit."""
    for step in range(UNITS):
        unit = Unit((first + step) % UNITS)
        if unit in state and state[unit].chunks_left and state[unit].credits:
            return unit
    return None
