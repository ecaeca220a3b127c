"""A WDEC command on the NPU top, cycle by cycle: its word fetcher's requests on the shared DRAM bridge and its
engine's progress through the stream (``aipu.rtl.wdec_parts``: fetcher, window, engine).

Alone on the bridge WDEC takes its formula's cycles (``aipu.sim.timing.wdec``); beside LOAD or the command
fetcher its words may be granted later, which delays the engine's start and could stall it. And its requests
take grants from the others, when they come: the fetcher requests a word whenever its FIFO and its reads in
flight hold fewer than ``dram.latency_cycles + 4`` words, and the window takes a word from the FIFO whenever
it holds fewer than ``2 * NEED_BITS`` bits, so after the first words the requests follow the engine's
consumption of the stream, cycle by cycle. The codec's compiled profile walk gives that consumption
(``profile_cycles_compiled``, equal to the reference's ``decode_profile_stream(..., cycles=...)``: the bits
of each engine cycle after the 9-bit start), kept per stream digest: a network's tiles come back.

The rules, cycle ``t`` ending with edge ``t``, for a command started in ``s``:

  requests   valid from ``s + 2`` while words are left to request and FIFO + in flight < depth; a word granted
             in ``t`` is answered (``data_valid``) in ``t + dram.latency_cycles`` and can leave the FIFO from the
             next cycle
  window     takes the FIFO's head in ``t`` if its bit count is below ``2 * NEED_BITS`` (the first word without
             the bytes before ``dram_addr``); it is *ready* with ``NEED_BITS`` bits or once every word is taken
  engine     while ready: the 9-bit start, then one cycle of the consumption each cycle, then the padding
             check, in whose cycle the command retires; not ready, it waits, except on a Morton candidate
             outside its CU (the leaf walk steps over it without the engine)

The stepping is numba (``_run``): a stream's state steps lazily, whole stretches per call. Its state depends
on nothing but the cycles in which it was granted, so the cycles before its next request can be stepped
before the timeline gets there (:meth:`WdecStream.next_request`), and stretches alone on the bridge or after
the last grant in one call each.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from aipu.codec.compiled.jit_cache import SourceKeyedJit
from aipu.codec.npu_profile import CYCLE_SKIP, profile_cycles_compiled
from aipu.codec.reference.engine import RANGE_BITS
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.program import Command
from aipu.sim.timing.dram_bridge import read_cycles
from aipu.sim.timing.wdec import NEED_BITS, decoded_profile, stream_words

FIFO_SLACK = 4              # the word fetcher's FIFO holds dram.latency_cycles + 4 words
BEGIN_CYCLES = 2            # start, then the check: requests from the cycle after
NEVER = 1 << 62
# state[] of a stream: the constants first (those of other modules too, so that the compiled code depends on no
# other source: its cache is keyed by this file alone), then the registers; ANSWER_HEAD and IN_FLIGHT index
# ``answers``, the ring of the data_valid cycles of the words in flight
(NEED, START_BITS, SKIP, BEGIN, DEPTH, LATENCY, WORD_BITS, FIRST_BITS, WORDS, TO_REQUEST, IN_FLIGHT, ANSWER_HEAD, FIFO,
 UNDELIVERED, BITS, POSITION, RETIRE, NOW) = range(18)
STATE_SIZE = 18
# consumption entries kept over all streams (int8 each): beyond it the cache starts afresh
KEPT_CYCLES = 1 << 28

jit = SourceKeyedJit(Path(__file__).resolve().parent, ("npu_wdec.py",), _nrt=False)


@jit
def _requesting(state, cycle):
    return cycle >= state[BEGIN] and state[TO_REQUEST] > 0 and state[FIFO] + state[IN_FLIGHT] < state[DEPTH]


@jit
def _step(state, answers, consumption, cycle, granted):
    """End ``cycle``: the engine consumes if the window is ready, the window takes a word if it has room, an
    answer arrives, the grant (if any) is recorded."""
    consumed, position = 0, state[POSITION]
    ready = state[BITS] >= state[NEED] or state[UNDELIVERED] == 0
    if 0 <= position < consumption.shape[0] and consumption[position] == state[SKIP]:
        state[POSITION] = position + 1              # a Morton skip: the leaf walk alone, ready or not
    elif ready and position < 0:
        if cycle >= state[BEGIN]:
            consumed, state[POSITION] = state[START_BITS], 0
    elif ready and position < consumption.shape[0]:
        consumed, state[POSITION] = consumption[position], position + 1
    elif ready and state[RETIRE] < 0:
        state[RETIRE] = cycle
    if state[FIFO] and state[UNDELIVERED] and state[BITS] < 2 * state[NEED]:
        state[FIFO] -= 1
        state[BITS] += state[FIRST_BITS] if state[UNDELIVERED] == state[WORDS] else state[WORD_BITS]
        state[UNDELIVERED] -= 1
    state[BITS] -= consumed
    if state[IN_FLIGHT] and answers[state[ANSWER_HEAD]] == cycle:
        state[ANSWER_HEAD] = (state[ANSWER_HEAD] + 1) % state[DEPTH]
        state[IN_FLIGHT] -= 1
        state[FIFO] += 1
    if granted:
        state[TO_REQUEST] -= 1
        answers[(state[ANSWER_HEAD] + state[IN_FLIGHT]) % state[DEPTH]] = cycle + state[LATENCY]
        state[IN_FLIGHT] += 1
    state[NOW] = cycle + 1


@jit
def _run(state, answers, consumption, until, alone):
    """Step from ``state[NOW]`` up to ``until`` or the retire. ``alone``: each request granted as made (WDEC the
    only reader), stopping after the last word's grant; else no grant, stopping at the first cycle that
    requests (not stepped). Returns the grants made."""
    grants = 0
    while state[NOW] < until and state[RETIRE] < 0:
        cycle = state[NOW]
        requesting = _requesting(state, cycle)
        if requesting and not alone:
            break
        _step(state, answers, consumption, cycle, requesting)
        grants += requesting
        if requesting and state[TO_REQUEST] == 0:
            break
    return grants


class WdecStream:
    """One WDEC command from its start in ``start``: :meth:`requesting` says whether its request is valid in a
    cycle, :meth:`step` ends the cycle (granted or not). A cycle before ``state[NOW]`` has been stepped already,
    without a request."""

    def __init__(self, config: HardwareConfig, command: Command, stream: bytes, start: int):
        self.consumption = engine_cycles(stream, (command.out_c, command.in_c, command.k_h, command.k_w))
        nbytes = config.dram.bytes_per_cycle
        words = stream_words(config, command.dram_addr, command.length)
        self.state = np.zeros(STATE_SIZE, dtype=np.int64)
        self.state[[NEED, START_BITS, SKIP, BEGIN, DEPTH, LATENCY, WORD_BITS, FIRST_BITS]] = (
            NEED_BITS, RANGE_BITS, CYCLE_SKIP, start + BEGIN_CYCLES, config.dram.latency_cycles + FIFO_SLACK,
            read_cycles(config), 8 * nbytes, 8 * (nbytes - command.dram_addr % nbytes))
        self.state[[WORDS, TO_REQUEST, UNDELIVERED, POSITION, RETIRE, NOW]] = words, words, words, -1, -1, start
        self.answers = np.zeros(self.state[DEPTH], dtype=np.int64)

    def _catch_up(self, cycle: int) -> None:
        """Step the cycles before ``cycle`` without a grant: the timeline visits every cycle WDEC requests in."""
        if self.state[NOW] < cycle:
            _run(self.state, self.answers, self.consumption, cycle, False)
            if self.state[NOW] != cycle:
                raise AssertionError(f"WDEC requested in cycle {self.state[NOW]}, which the timeline skipped")

    def requesting(self, cycle: int) -> bool:
        if cycle < self.state[NOW]:
            return False
        self._catch_up(cycle)
        return bool(_requesting(self.state, cycle))

    @property
    def requested(self) -> bool:
        """Every word has been granted: the rest follows without the bridge (:meth:`finish`)."""
        return self.state[TO_REQUEST] == 0

    def step(self, cycle: int, granted: bool) -> None:
        """End ``cycle`` (nothing for a cycle stepped already, which was not granted)."""
        if cycle < self.state[NOW]:
            assert not granted, f"WDEC granted in cycle {cycle}, stepped already without a request"
            return
        self._catch_up(cycle)
        _step(self.state, self.answers, self.consumption, cycle, granted)

    def next_request(self, cycle: int) -> int:
        """The first cycle from ``cycle`` in which WDEC requests, the cycles before it stepped: no grant can come
        to it before it requests, whatever the others do."""
        self._catch_up(cycle)
        _run(self.state, self.answers, self.consumption, NEVER, False)
        return int(self.state[NOW])

    def alone(self, until: int) -> bool:
        """Step up to ``until`` as the only reader (each request granted when made), or to the last word's grant;
        whether any request was granted."""
        return _run(self.state, self.answers, self.consumption, until, True) > 0

    def finish(self) -> int:
        """With every word granted, step on until the retire; its cycle."""
        _run(self.state, self.answers, self.consumption, NEVER, False)
        return int(self.state[RETIRE])


def engine_cycles(stream: bytes, shape: tuple[int, int, int, int]) -> np.ndarray:
    """The engine's bits per cycle of one stream (``profile_cycles_compiled``, sized by the formula's counts,
    which it has already), remembered by its digest."""
    key = (hashlib.blake2b(stream, digest_size=16).digest(), tuple(shape))
    cycles = _ENGINE_CYCLES.get(key)
    if cycles is None:
        if sum(map(len, _ENGINE_CYCLES.values())) >= KEPT_CYCLES:
            _ENGINE_CYCLES.clear()
        cycles = _ENGINE_CYCLES[key] = profile_cycles_compiled(stream, shape, decoded_profile(stream, shape))
    return cycles


_ENGINE_CYCLES: dict[tuple[bytes, tuple], np.ndarray] = {}
