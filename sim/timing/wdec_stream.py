"""What WDEC's timings take from a stream (docs/rtl-wdec.md, "Cycles"): the profile decoder's counts of it, kept
by digest, the DRAM words that hold it, the cycles to the engine's first bits, and NEED_BITS, the most stream
bits one bin consumes. Shared by the timing of a command (``wdec``) and the cycle-by-cycle lanes (``npu_wdec``)
and by the RTL's widths.
"""
from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

import numpy as np

from aipu.codec.npu_profile import ZERO_RUN_BITS, decode_profile_compiled
from aipu.codec.reference.engine import RANGE_BITS
from aipu.sim.machine.arch import HardwareConfig

# The most bits one bin consumes: a renormalisation past ZERO_RUN_BITS - 1 zeros plus 9 bits, then an LPS
# reading one bit and shifting by up to 9. An engine of B stages takes up to B·NEED_BITS a cycle.
NEED_BITS = (ZERO_RUN_BITS - 1 + RANGE_BITS) + 1 + RANGE_BITS



class StreamCounts(NamedTuple):
    bins: int
    morton_skips: int
    zero_run_cycles: int
    leaf_runs: np.ndarray       # ProfileDecode.leaf_runs


def decoded_profile(stream: bytes, shape: tuple[int, int, int, int], continuation: bool = False) -> StreamCounts:
    """The profile decoder's counts of one stream (``continuation``: a continuation part), remembered by the
    stream's digest (a report asks for the cycles and the bins of the same streams; the levels are not kept)."""
    key = (hashlib.blake2b(stream, digest_size=16).digest(), tuple(shape), continuation)
    counts = _STREAM_COUNTS.get(key)
    if counts is None:
        if len(_STREAM_COUNTS) >= _STREAM_COUNTS_KEPT:
            _STREAM_COUNTS.clear()
        decoded = decode_profile_compiled(stream, shape, continuation=continuation)
        counts = _STREAM_COUNTS[key] = StreamCounts(decoded.bins, decoded.morton_skips, decoded.zero_run_cycles,
                                                    decoded.leaf_runs)
    return counts


_STREAM_COUNTS: dict[tuple[bytes, tuple], StreamCounts] = {}
_STREAM_COUNTS_KEPT = 1 << 16


def stream_words(config: HardwareConfig, dram_addr: int, length: int) -> int:
    """DRAM words that hold the stream's bytes."""
    nbytes = config.dram.bytes_per_cycle
    return (dram_addr + length - 1) // nbytes - dram_addr // nbytes + 1


def first_bits_cycles(config: HardwareConfig, dram_addr: int, length: int) -> int:
    """Cycles from the first DRAM request to the 9-bit engine start, which waits until the window holds the
    B·NEED_BITS of a cycle (or the whole stream): the read latency, one cycle each into the FIFO and into the
    window, one per word it takes (words arrive one a cycle) and the start itself."""
    nbytes = config.dram.bytes_per_cycle
    needed = math.ceil((8 * (dram_addr % nbytes) + config.wdec.bins_per_cycle * NEED_BITS) / (8 * nbytes))
    words = min(stream_words(config, dram_addr, length), needed)
    return config.dram.latency_cycles + 2 + words


FETCH_SLACK = 4     # a part decoder's word fetcher holds dram.latency_cycles + FETCH_SLACK words, FIFO and in flight


def fetch_depth(config: HardwareConfig) -> int:
    """Words a part decoder's fetcher holds in its FIFO and in flight: enough to cover the read latency, so
    that after the first answer its FIFO never runs dry."""
    return config.dram.latency_cycles + FETCH_SLACK
