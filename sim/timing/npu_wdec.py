"""A WDEC command on the NPU top, cycle by cycle: its word fetcher's requests on the shared DRAM bridge and its
engine's progress through the stream (``aipu.rtl.wdec_parts``: fetcher, window, engine).

Alone on the bridge WDEC takes its formula's cycles (``aipu.sim.timing.wdec``); beside LOAD or the command
fetcher its words may be granted later, which delays the engine's start and could stall it. And its requests
take grants from the others, when they come: the fetcher requests a word whenever its FIFO and its reads in
flight hold fewer than ``dram.latency_cycles + 4`` words, and the window takes a word from the FIFO whenever
it holds fewer than ``2 * NEED_BITS`` bits, so after the first words the requests follow the engine's
consumption of the stream, cycle by cycle. The codec's reference decoder gives that consumption
(``decode_profile_stream(..., cycles=...)``: the bits of each engine cycle after the 9-bit start).

The rules, cycle ``t`` ending with edge ``t``, for a command started in ``s``:

  requests   valid from ``s + 2`` while words are left to request and FIFO + in flight < depth; a word granted
             in ``t`` is answered (``data_valid``) in ``t + dram.latency_cycles`` and can leave the FIFO from the
             next cycle
  window     takes the FIFO's head in ``t`` if its bit count is below ``2 * NEED_BITS`` (the first word without
             the bytes before ``dram_addr``); it is *ready* with ``NEED_BITS`` bits or once every word is taken
  engine     while ready: the 9-bit start, then one cycle of the consumption each cycle, then the padding
             check, in whose cycle the command retires; not ready, it waits, except on a Morton candidate
             outside its CU (the leaf walk steps over it without the engine)
"""
from __future__ import annotations

from collections import deque

from aipu.codec.npu_profile import decode_profile_stream
from aipu.codec.reference.engine import RANGE_BITS
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.program import Command
from aipu.sim.timing.dram_bridge import read_cycles
from aipu.sim.timing.wdec import NEED_BITS

FIFO_SLACK = 4              # the word fetcher's FIFO holds dram.latency_cycles + 4 words
BEGIN_CYCLES = 2            # start, then the check: requests from the cycle after


class WdecStream:
    """One WDEC command from its start in ``start``: :meth:`requesting` says whether its request is valid in a
    cycle, :meth:`step` ends the cycle (granted or not); ``retire`` is set in the cycle it retires."""

    def __init__(self, config: HardwareConfig, command: Command, stream: bytes, start: int):
        self.consumption: list[int | None] = []   # bits per engine cycle after the start (None: a skip)
        decode_profile_stream(stream, (command.out_c, command.in_c, command.k_h, command.k_w),
                              cycles=self.consumption)
        nbytes = config.dram.bytes_per_cycle
        words = (command.dram_addr + command.length - 1) // nbytes - command.dram_addr // nbytes + 1
        self.depth, self.latency = config.dram.latency_cycles + FIFO_SLACK, read_cycles(config)
        self.word_bits, self.first_bits = 8 * nbytes, 8 * (nbytes - command.dram_addr % nbytes)
        self.begin = start + BEGIN_CYCLES
        self.words = self.to_request = self.undelivered = words
        self.answers: deque[int] = deque()        # data_valid cycles of the words in flight
        self.fifo = 0
        self.bits = 0                             # the window's count
        self.position = -1                        # -1: before the 9-bit start; len(consumption): the padding check
        self.retire: int | None = None

    def requesting(self, cycle: int) -> bool:
        return cycle >= self.begin and self.to_request > 0 and self.fifo + len(self.answers) < self.depth

    @property
    def requested(self) -> bool:
        """Every word has been granted: the rest follows without the bridge (:meth:`finish`)."""
        return self.to_request == 0

    def step(self, cycle: int, granted: bool) -> None:
        """End ``cycle``: the engine consumes if the window is ready, the window takes a word if it has room,
        an answer arrives, the grant (if any) is recorded."""
        consumed, ready = 0, self.bits >= NEED_BITS or not self.undelivered
        if 0 <= self.position < len(self.consumption) and self.consumption[self.position] is None:
            self.position += 1                          # a Morton skip: the leaf walk alone, ready or not
        elif ready and self.position < 0:
            if cycle >= self.begin:
                consumed, self.position = RANGE_BITS, 0
        elif ready and self.position < len(self.consumption):
            consumed = self.consumption[self.position]
            self.position += 1
        elif ready and self.retire is None:
            self.retire = cycle
        if self.fifo and self.undelivered and self.bits < 2 * NEED_BITS:
            self.fifo -= 1
            self.bits += self.first_bits if self.undelivered == self.words else self.word_bits
            self.undelivered -= 1
        self.bits -= consumed
        if self.answers and self.answers[0] == cycle:
            self.answers.popleft()
            self.fifo += 1
        if granted:
            self.to_request -= 1
            self.answers.append(cycle + self.latency)

    def finish(self, cycle: int) -> int:
        """With every word granted, step from ``cycle`` on until the retire; its cycle."""
        while self.retire is None:
            self.step(cycle, False)
            cycle += 1
        return self.retire
