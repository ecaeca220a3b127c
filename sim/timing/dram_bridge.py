"""The DRAM bridge as a cycle model: which reader each cycle's arbitration grants and when its data
returns, for the bridge of ``aipu.rtl.dram_bridge`` in front of the testbench DRAM's timing rules (docs/rtl.md,
"DRAM bridge"). Plain Python, so the cycle model can replay the RTL's arbitration exactly.

Cycle ``t`` ends with the rising edge ``t``. In cycle ``t`` the bridge grants one of the readers whose request is
valid, if its AR register is free (empty, or handshaking in ``t``) and fewer than ``max_reads`` reads are
outstanding. The winner is the first requester in round-robin order: readers ``p, p + 1, ...`` (mod ``n``), where
``p`` follows the last reader granted (0 before any grant). A request granted in ``t`` is offered on AR in ``t + 1``
and handshaken at the first edge from ``t + 1`` on at which ``arready`` is high; the DRAM presents its R beat
``read_latency`` cycles after that edge (single beats, ``rready`` always high: exactly ``AR + L``), and the reader
sees ``data_valid`` one cycle later. A read is outstanding from its grant to its R handshake.

The write side, for STORE alone on it, never refuses a word under the bridge's default ``max_writes``
(:func:`default_max_writes`): STORE only waits for its last word's answer (:func:`write_hold`).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from aipu.sim.machine.arch import HardwareConfig

BRIDGE_LATENCY = 2      # cycles the bridge adds to the DRAM's read latency: AR registered, R registered


@dataclass
class ReadArbiter:
    """The read side, stepped one cycle at a time: ``step(requests)`` with a bit per reader's valid request
    returns the reader granted in that cycle (None: none). ``returns`` holds ``(cycle, reader)`` of every
    ``data_valid`` still to come or past, in grant order. ``read_depth``: the DRAM's open-read limit
    (``DramParams.read_depth``; its default ``read_latency + 1`` never lowers ``arready`` for single beats)."""

    readers: int
    max_reads: int
    read_latency: int
    read_depth: int = 0
    cycle: int = 0
    pointer: int = 0
    pending: int | None = None                     # the reader whose AR waits in the register
    accepted: deque = field(default_factory=deque)  # AR handshake edges within the last read_latency cycles
    returns: list = field(default_factory=list)    # (data_valid cycle, reader)
    open_until: list = field(default_factory=list)  # R handshake edge of each outstanding read (None: AR pending)

    def __post_init__(self):
        self.read_depth = self.read_depth or self.read_latency + 1

    def step(self, requests: int) -> int | None:
        t, latency = self.cycle, self.read_latency
        while self.accepted and self.accepted[0] < t - latency:
            self.accepted.popleft()
        arready = len(self.accepted) < self.read_depth
        self.open_until = [edge for edge in self.open_until if edge is None or edge >= t]
        slot_free = self.pending is None or arready
        granted = None
        if requests and slot_free and len(self.open_until) < self.max_reads:
            granted = next(reader % self.readers for reader in range(self.pointer, self.pointer + self.readers)
                           if requests >> (reader % self.readers) & 1)
            self.pointer = (granted + 1) % self.readers
        if self.pending is not None and arready:
            self.accepted.append(t)
            self.open_until[self.open_until.index(None)] = t + latency
            self.returns.append((t + latency + 1, self.pending))
            self.pending = None
        if granted is not None:
            self.pending = granted
            self.open_until.append(None)
        self.cycle += 1
        return granted



def testbench_latency(config: HardwareConfig) -> int:
    """The testbench DRAM's read and write latency under the NPU (``npu_dram_params``): with the bridge's two
    cycles, a read is answered ``dram.latency_cycles`` after its grant (the configuration's minimum, 3, leaves
    the DRAM one cycle)."""
    return config.dram.latency_cycles - BRIDGE_LATENCY


def read_cycles(config: HardwareConfig) -> int:
    """Cycles from a read's grant to its ``data_valid`` under the NPU: ``dram.latency_cycles``."""
    return testbench_latency(config) + BRIDGE_LATENCY


def default_max_writes(config: HardwareConfig) -> int:
    """The bridge's default bound on writes lacking their B: ``dram.latency_cycles`` + 1, i.e. ``WL + 3`` on the
    testbench DRAM of write latency ``WL``. A word taken in ``t`` lacks its B until ``t + WL + 2`` (AW in
    ``t + 1``, W in ``t + 2``, B ``WL`` after the W edge), so a writer offering a word every cycle never has more
    than ``WL + 3`` unanswered and is never refused; one fewer and it loses a cycle every ``WL + 3`` words."""
    return config.dram.latency_cycles + 1


def write_hold(config: HardwareConfig) -> int:
    """Cycles from a write word taken to ``write_idle`` if it was the last: its B comes ``WL + 2`` after."""
    return testbench_latency(config) + 3
