"""A WDEC command on the NPU top, cycle by cycle: the unit's E = ``wdec.engines`` lanes (``aipu.rtl.wdec``'s part
decoders), each a word fetcher, window and engine of B = ``wdec.bins_per_cycle`` bins a cycle on one part of the
stream, their requests on the shared DRAM bridge and their engines' progress (docs/rtl-wdec.md).

A lane is the one-engine WDEC of before: its fetcher requests a word whenever its FIFO and its reads in flight
hold fewer than ``dram.latency_cycles + 4`` words, its window takes a word from the FIFO whenever it holds fewer
than ``2 * V`` bits (V = B * NEED_BITS), so after the first words the requests follow the engine's consumption of
the stream, cycle by cycle. The codec's compiled profile walk gives that consumption (``profile_entries_compiled``:
the bits of each engine cycle after the 9-bit start, whether the cycle is a leaf's, completes a level or begins
the leaves of the next 8x8x8 cube, and the cubes in their order), kept per stream digest: a network's tiles come
back. Each lane's levels go through its cube stager (docs/rtl-wdec.md, "Stager"): a cube is written once the
next cube's first level completes (or after the padding check), as WRITES = its rows' WEIGHT words
(``codec.npu_profile.cube_writes``), one write a granted cycle.

The rules, cycle ``t`` ending with edge ``t``, for a command of K parts started in ``s``:

  header     K > 1 only: the unit requests the words of the K part lengths, one a grant, from ``s + 2``; the
             lanes 0 .. K-1 start (as a one-part command would) in ``r``, the cycle of the last header answer
  requests   a lane's valid from its start + 2 while words are left to request and FIFO + in flight < depth; the
             unit requests if the header or any lane does, and a grant goes to the first requesting lane from
             the read pointer (round robin over the E lanes); a word granted in ``t`` is answered
             (``data_valid``) in ``t + LATENCY`` and can leave the FIFO from the next cycle
  window     takes the FIFO's head in ``t`` if its bit count is below ``2 * V`` (the first word without the
             bytes before the part's address); it is *ready* with ``V`` bits or once every word is taken
  stager     a lane's registers FILL (the cube being filled, or none), DRAIN_LEFT (writes of the closed cube still
             to make) and FINISHED (from the cycle after the padding check). DRAIN: a lane with DRAIN_LEFT > 0
             requests the write port; the first such lane from the write pointer (round robin, the pointer past
             it) is granted one write. HOLD: a lane is *held* in a cycle of a leaf's entry (its bins' or their
             zero-run steps') whose cube is not FILL while FILL is a cube and DRAIN_LEFT > 0. CLOSE: a level
             completing in another cube than FILL's sets DRAIN_LEFT = WRITES(FILL) and FILL to its cube (with
             FILL empty, FILL to its cube). FLUSH: FINISHED, FILL a cube and DRAIN_LEFT = 0: DRAIN_LEFT =
             WRITES(FILL), FILL empty. DONE: the first cycle FINISHED with FILL empty and DRAIN_LEFT = 0, the
             lane's retire. All from the registers at the start of the cycle, updated at its end.
  engine     while ready and not held: the 9-bit start, then one cycle of the consumption each cycle, then the
             padding check; else it waits, except on a Morton candidate outside its CU (the leaf walk steps over
             it without the engine). The command retires with its last lane's DONE.

The stepping is numba (``_run``): the unit's state steps lazily, whole stretches per call. Its state depends on
nothing but the cycles in which it was granted, so the cycles before its next request can be stepped before the
timeline gets there (:meth:`WdecUnit.next_request`), and stretches alone on the bridge or after the last grant
in one call each.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from aipu.codec.compiled.jit_cache import SourceKeyedJit
from aipu.codec.npu_profile import (CYCLE_SKIP, MARK_CUBE, MARK_LEAF, MARK_LEVEL, PART_LENGTH, cube_writes,
                                   profile_entries_compiled, split_parts)
from aipu.codec.reference.engine import RANGE_BITS
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.machine.program import Command
from aipu.sim.timing.dram_bridge import read_cycles
from aipu.sim.timing.wdec_stream import NEED_BITS, decoded_profile, fetch_depth, stream_words

BEGIN_CYCLES = 2            # start, then the check: requests from the cycle after
NEVER = 1 << 62
# lanes[i] of a lane: the constants first (those of other modules too, so that the compiled code depends on no
# other source: its cache is keyed by this file alone), then the registers; ANSWER_HEAD and IN_FLIGHT index
# ``answers[i]``, the ring of the data_valid cycles of the words in flight; FROM and END delimit the lane's
# entries in the unit's ``bits`` and ``marks``, POSITION counts from FROM (-1: before the start); CUBES_FROM its
# cubes' WRITES in the unit's ``writes``. RETIRE: the padding check's cycle (FINISHED after it); the stager's FILL
# (a cube ordinal of the lane, -1: empty) and DRAIN_LEFT; NEXT_CUBE: the cubes begun (MARK_CUBE entries taken);
# DONE: the lane's retire (-1: not yet)
(NEED, START_BITS, SKIP, BEGIN, DEPTH, LATENCY, WORD_BITS, FIRST_BITS, WORDS, FROM, END, TO_REQUEST, IN_FLIGHT,
 ANSWER_HEAD, FIFO, UNDELIVERED, BITS, POSITION, RETIRE, CUBES_FROM, FILL, DRAIN_LEFT, NEXT_CUBE, DONE) = range(24)
LANE_SIZE = 24
# unit[]: E, the header's words left to request and the cycle it may request from, the read answer latency,
# the read and write pointers, lanes retired, the command's retire (-1: not yet) and the next cycle to step
(ENGINES, HEADER_LEFT, HEADER_BEGIN, READ_LATENCY, READ_POINTER, WRITE_POINTER, RETIRED, UNIT_RETIRE,
 NOW) = range(9)
UNIT_SIZE = 9
# consumption entries kept over all streams (int8 bits and uint8 marks each): beyond it the cache starts afresh
KEPT_CYCLES = 1 << 28

jit = SourceKeyedJit(Path(__file__).resolve().parent, ("npu_wdec.py",), _nrt=False)


@jit
def _lane_requesting(lane, cycle):
    return cycle >= lane[BEGIN] and lane[TO_REQUEST] > 0 and lane[FIFO] + lane[IN_FLIGHT] < lane[DEPTH]


@jit
def _requesting(unit, lanes, cycle):
    if unit[HEADER_LEFT] > 0:
        return cycle >= unit[HEADER_BEGIN]
    for i in range(lanes.shape[0]):
        if _lane_requesting(lanes[i], cycle):
            return True
    return False


@jit
def _held(lane, mark):
    """HOLD: an entry of ``mark`` is a leaf's in another cube than FILL while FILL's predecessor still drains."""
    if mark & MARK_LEAF == 0 or lane[FILL] < 0 or lane[DRAIN_LEFT] == 0:
        return False
    cube = lane[NEXT_CUBE] if mark & MARK_CUBE else lane[NEXT_CUBE] - 1
    return cube != lane[FILL]


@jit
def _engine(lane, bits, marks, cycle):
    """The lane's engine in ``cycle``: (bits consumed, the cube ordinal of the level the cycle completes or -1);
    the padding check's cycle is recorded."""
    position, entries = lane[POSITION], lane[END] - lane[FROM]
    ready = lane[BITS] >= lane[NEED] or lane[UNDELIVERED] == 0
    if 0 <= position < entries and bits[lane[FROM] + position] == lane[SKIP]:
        lane[POSITION] = position + 1               # a Morton skip: the leaf walk alone, ready or not
    elif ready and position < 0:
        if cycle >= lane[BEGIN]:
            lane[POSITION] = 0
            return lane[START_BITS], -1
    elif ready and position < entries:
        mark = marks[lane[FROM] + position]
        if _held(lane, mark):
            return 0, -1
        lane[POSITION] = position + 1
        if mark & MARK_CUBE:
            lane[NEXT_CUBE] += 1
        return bits[lane[FROM] + position], lane[NEXT_CUBE] - 1 if mark & MARK_LEVEL else -1
    elif ready and lane[RETIRE] < 0:
        lane[RETIRE] = cycle
    return 0, -1


@jit
def _lane_step(lane, answers, bits, marks, cycle, granted):
    """End ``cycle`` for one lane's fetcher, window and engine: the engine consumes if the window is ready (and
    the stager does not hold it), the window takes a word if it has room, an answer arrives, the grant (if any)
    is recorded. The cube ordinal of the level completed, or -1."""
    consumed, completed = _engine(lane, bits, marks, cycle)
    if lane[FIFO] and lane[UNDELIVERED] and lane[BITS] < 2 * lane[NEED]:
        lane[FIFO] -= 1
        lane[BITS] += lane[FIRST_BITS] if lane[UNDELIVERED] == lane[WORDS] else lane[WORD_BITS]
        lane[UNDELIVERED] -= 1
    lane[BITS] -= consumed
    if lane[IN_FLIGHT] and answers[lane[ANSWER_HEAD]] == cycle:
        lane[ANSWER_HEAD] = (lane[ANSWER_HEAD] + 1) % lane[DEPTH]
        lane[IN_FLIGHT] -= 1
        lane[FIFO] += 1
    if granted:
        lane[TO_REQUEST] -= 1
        answers[(lane[ANSWER_HEAD] + lane[IN_FLIGHT]) % lane[DEPTH]] = cycle + lane[LATENCY]
        lane[IN_FLIGHT] += 1
    return completed


@jit
def _first_from(unit, lanes, pointer, cycle, pending):
    """The first lane from ``pointer`` (round robin over the E lanes) that requests a read in ``cycle``
    (``pending`` False) or a write (True: DRAIN_LEFT > 0); -1 for none."""
    engines = unit[ENGINES]
    for j in range(engines):
        i = (pointer + j) % engines
        if i < lanes.shape[0] and (lanes[i, DRAIN_LEFT] > 0 if pending else _lane_requesting(lanes[i], cycle)):
            return i
    return -1


@jit
def _header_step(unit, lanes, cycle, granted):
    """A cycle of the header phase: a granted header word; the last one's answer starts the lanes."""
    if granted:
        unit[HEADER_LEFT] -= 1
        if unit[HEADER_LEFT] == 0:
            for i in range(lanes.shape[0]):
                lanes[i, BEGIN] = cycle + unit[READ_LATENCY] + BEGIN_CYCLES


@jit
def _stager_step(unit, lanes, writes, i, cycle, writer, completed):
    """End ``cycle`` for lane ``i``'s stager (DONE checked before the lane stepped): DRAIN, CLOSE, FLUSH."""
    lane = lanes[i]
    flush = lane[RETIRE] >= 0 and lane[RETIRE] < cycle and lane[FILL] >= 0 and lane[DRAIN_LEFT] == 0
    if i == writer:
        lane[DRAIN_LEFT] -= 1
    if completed >= 0:
        if lane[FILL] >= 0 and completed != lane[FILL]:
            lane[DRAIN_LEFT] = writes[lane[CUBES_FROM] + lane[FILL]]
        lane[FILL] = completed
    elif flush:
        lane[DRAIN_LEFT] = writes[lane[CUBES_FROM] + lane[FILL]]
        lane[FILL] = -1


@jit
def _step(unit, lanes, answers, bits, marks, writes, cycle, granted):
    """End ``cycle`` for the unit: the header, or the read grant's lane, the write arbiter and every lane."""
    unit[NOW] = cycle + 1
    if unit[HEADER_LEFT] > 0:
        _header_step(unit, lanes, cycle, granted)
        return
    reader = -1
    if granted:
        reader = _first_from(unit, lanes, unit[READ_POINTER], cycle, False)
        unit[READ_POINTER] = (reader + 1) % unit[ENGINES]
    writer = _first_from(unit, lanes, unit[WRITE_POINTER], cycle, True)
    if writer >= 0:
        unit[WRITE_POINTER] = (writer + 1) % unit[ENGINES]
    for i in range(lanes.shape[0]):
        lane = lanes[i]
        if lane[DONE] >= 0:
            continue
        if 0 <= lane[RETIRE] < cycle and lane[FILL] < 0 and lane[DRAIN_LEFT] == 0:
            lane[DONE] = cycle
            unit[RETIRED] += 1
            if unit[RETIRED] == lanes.shape[0]:
                unit[UNIT_RETIRE] = cycle
            continue
        completed = _lane_step(lane, answers[i], bits, marks, cycle, i == reader)
        _stager_step(unit, lanes, writes, i, cycle, writer, completed)


@jit
def _requested(unit, lanes):
    if unit[HEADER_LEFT] > 0:
        return False
    for i in range(lanes.shape[0]):
        if lanes[i, TO_REQUEST] > 0:
            return False
    return True


@jit
def _run(unit, lanes, answers, bits, marks, writes, until, alone):
    """Step from ``unit[NOW]`` up to ``until`` or the retire. ``alone``: each request granted as made (WDEC the
    only reader), stopping after the last word's grant; else no grant, stopping at the first cycle that
    requests (not stepped). Returns the grants made."""
    grants = 0
    while unit[NOW] < until and unit[UNIT_RETIRE] < 0:
        cycle = unit[NOW]
        requesting = _requesting(unit, lanes, cycle)
        if requesting and not alone:
            break
        _step(unit, lanes, answers, bits, marks, writes, cycle, requesting)
        grants += requesting
        if requesting and _requested(unit, lanes):
            break
    return grants


class WdecUnit:
    """One WDEC command from its start in ``start``: :meth:`requesting` says whether the unit's request is valid
    in a cycle, :meth:`step` ends the cycle (granted or not). A cycle before ``unit[NOW]`` has been stepped
    already, without a request. ``latency``: the cycles from a grant to its answer (default ``read_cycles``)."""

    def __init__(self, config: HardwareConfig, command: Command, stream: bytes, start: int,
                 latency: int | None = None):
        if command.parts > config.wdec.engines:
            raise ExecutionError(f"parts = {command.parts} exceeds wdec.engines = {config.wdec.engines}: a lane "
                                 "decodes one part")
        latency = read_cycles(config) if latency is None else latency
        shape = (command.out_c, command.in_c, command.k_h, command.k_w)
        parts = split_parts(stream, command.out_c, command.parts)
        entries = [engine_entries(stream[part.offset:part.offset + part.length], (part.k1 - part.k0, *shape[1:]),
                                  config.wdec.bins_per_cycle, index > 0) for index, part in enumerate(parts)]
        self.bits = np.concatenate([bits for bits, _, _ in entries])
        self.marks = np.concatenate([marks for _, marks, _ in entries])
        taps, port_bytes = command.k_h * command.k_w, config.buffer(Buffer.WEIGHT).port_bytes
        writes = [cube_writes(cubes, command.wgt_addr + part.k0 * taps * command.in_c, (part.k1 - part.k0, *shape[1:]),
                              port_bytes) for part, (_, _, cubes) in zip(parts, entries)]
        self.writes = np.concatenate(writes)
        self.lanes = np.zeros((len(parts), LANE_SIZE), dtype=np.int64)
        depth = fetch_depth(config)
        header = 0 if len(parts) == 1 else stream_words(config, command.dram_addr, PART_LENGTH.size * len(parts))
        offset = cubes = 0
        for lane, part, (bits, _, _), own in zip(self.lanes, parts, entries, writes):
            lane[:] = _lane(config, command.dram_addr + part.offset, part.length, depth, latency)
            lane[BEGIN] = start + BEGIN_CYCLES if header == 0 else NEVER
            lane[FROM], lane[END], lane[CUBES_FROM] = offset, offset + len(bits), cubes
            offset += len(bits)
            cubes += len(own)
        self.unit = np.zeros(UNIT_SIZE, dtype=np.int64)
        self.unit[[ENGINES, HEADER_LEFT, HEADER_BEGIN, READ_LATENCY, UNIT_RETIRE, NOW]] = (
            config.wdec.engines, header, start + BEGIN_CYCLES, latency, -1, start)
        self.answers = np.zeros((len(parts), depth), dtype=np.int64)

    def _run(self, until: int, alone: bool) -> int:
        return _run(self.unit, self.lanes, self.answers, self.bits, self.marks, self.writes, until, alone)

    def _catch_up(self, cycle: int) -> None:
        """Step the cycles before ``cycle`` without a grant: the timeline visits every cycle WDEC requests in."""
        if self.unit[NOW] < cycle:
            self._run(cycle, False)
            if self.unit[NOW] != cycle:
                raise AssertionError(f"WDEC requested in cycle {self.unit[NOW]}, which the timeline skipped")

    def requesting(self, cycle: int) -> bool:
        if cycle < self.unit[NOW]:
            return False
        self._catch_up(cycle)
        return bool(_requesting(self.unit, self.lanes, cycle))

    @property
    def requested(self) -> bool:
        """Every word has been granted: the rest follows without the bridge (:meth:`finish`)."""
        return bool(_requested(self.unit, self.lanes))

    def step(self, cycle: int, granted: bool) -> None:
        """End ``cycle`` (nothing for a cycle stepped already, which was not granted)."""
        if cycle < self.unit[NOW]:
            assert not granted, f"WDEC granted in cycle {cycle}, stepped already without a request"
            return
        self._catch_up(cycle)
        _step(self.unit, self.lanes, self.answers, self.bits, self.marks, self.writes, cycle, granted)

    def next_request(self, cycle: int) -> int:
        """The first cycle from ``cycle`` in which WDEC requests, the cycles before it stepped: no grant can come
        to it before it requests, whatever the others do."""
        self._catch_up(cycle)
        self._run(NEVER, False)
        return int(self.unit[NOW])

    def alone(self, until: int) -> bool:
        """Step up to ``until`` as the only reader (each request granted when made), or to the last word's grant;
        whether any request was granted."""
        return self._run(until, True) > 0

    def finish(self) -> int:
        """With every word granted, step on until the retire; its cycle."""
        self._run(NEVER, False)
        return int(self.unit[UNIT_RETIRE])


def _lane(config: HardwareConfig, dram_addr: int, length: int, depth: int, latency: int) -> np.ndarray:
    """A lane's registers at its reset, on the part of ``length`` bytes at ``dram_addr``."""
    lane = np.zeros(LANE_SIZE, dtype=np.int64)
    nbytes = config.dram.bytes_per_cycle
    words = stream_words(config, dram_addr, length)
    lane[[NEED, START_BITS, SKIP, DEPTH, LATENCY, WORD_BITS, FIRST_BITS]] = (
        config.wdec.bins_per_cycle * NEED_BITS, RANGE_BITS, CYCLE_SKIP, depth, latency, 8 * nbytes,
        8 * (nbytes - dram_addr % nbytes))
    lane[[WORDS, TO_REQUEST, UNDELIVERED, POSITION, RETIRE, FILL, DONE]] = words, words, words, -1, -1, -1, -1
    return lane


def engine_entries(stream: bytes, shape: tuple[int, int, int, int], bins_per_cycle: int, continuation: bool = False
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An engine's cycles on one part's stream (``continuation``: a continuation part) at B bins a cycle
    (``profile_entries_compiled``, sized by the decoder's counts, which it has already): the bits of each, its
    marks and the cubes, remembered by its digest."""
    key = (hashlib.blake2b(stream, digest_size=16).digest(), tuple(shape), bins_per_cycle, continuation)
    entries = _ENGINE_ENTRIES.get(key)
    if entries is None:
        if sum(len(bits) for bits, _, _ in _ENGINE_ENTRIES.values()) >= KEPT_CYCLES:
            _ENGINE_ENTRIES.clear()
        entries = _ENGINE_ENTRIES[key] = profile_entries_compiled(
            stream, shape, bins_per_cycle, decoded_profile(stream, shape, continuation), continuation)
    return entries


_ENGINE_ENTRIES: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
