"""WDEC's cycles (docs/rtl-wdec.md, "Cycles"): the weight decoder (``aipu.rtl.wdec``) checks the command,
waits for the first B·NEED_BITS of its stream, then decodes up to B = ``wdec.bins_per_cycle`` bins of one
leaf a cycle (every other bin one a cycle), with a cycle more per Morton candidate outside a CU and per
ZERO_RUN_BITS of a long zero run, and checks the padding. A stream of several
parts (docs/codec.md §11) is, in this model, read header first and decoded by ``wdec.engines`` engines.

The counts come from the codec's compiled profile decoder (numba): ``aipu.sim.timing`` imports this module
only when a WDEC command is timed.
"""
from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

import numpy as np

from aipu.codec.errors import CodecError
from aipu.codec.npu_profile import PART_LENGTH, ZERO_RUN_BITS, bin_cycles, decode_parts, decode_profile_compiled
from aipu.codec.reference.engine import RANGE_BITS
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.timing.dma import DramPhases

# The most bits one bin consumes: a renormalisation past ZERO_RUN_BITS - 1 zeros plus 9 bits, then an LPS
# reading one bit and shifting by up to 9. An engine of B stages takes up to B·NEED_BITS a cycle.
NEED_BITS = (ZERO_RUN_BITS - 1 + RANGE_BITS) + 1 + RANGE_BITS


def command_cycles(config: HardwareConfig, command, stream: bytes) -> int:
    """Cycles of a WDEC command on a profile stream that decodes (docs/rtl-wdec.md): the check, the wait for
    the first bits, the 9-bit engine start, a cycle per B bins of a leaf (up to its end or a zero-run step) and
    per other bin, per Morton candidate outside a CU and per
    ZERO_RUN_BITS of a long zero run, and the padding check; with several parts, the header's words and then
    the slowest of the ``wdec.engines`` engines, each decoding its parts one after another."""
    return dram_phases(config, command, stream).cycles


def dram_phases(config: HardwareConfig, command, stream: bytes) -> DramPhases:
    """WDEC's cycles around its DRAM transfer: from the first word to the last bin the stream's words are
    read at the pace the engines use them (at most one a cycle); the check and the read latency come before,
    the padding check after. A stream that does not decode has no timing: the RTL stops on it with an error."""
    shape = (command.out_c, command.in_c, command.k_h, command.k_w)
    try:
        parts = decode_parts(stream, shape, command.parts, decoded_profile)
    except CodecError as error:
        raise ExecutionError(f"the weight stream at dram_addr = {command.dram_addr:#x} ({command.length} bytes) does "
                             f"not decode in the npu profile: {error}") from None
    engines = [0] * config.wdec.engines          # part i on engine i mod engines, each part after the previous
    for index, (part, counts) in enumerate(parts):
        engines[index % len(engines)] += _part_cycles(config, command.dram_addr + part.offset, part.length, counts)
    header = 0 if command.parts == 1 else (config.dram.latency_cycles
                                           + stream_words(config, command.dram_addr, PART_LENGTH.size * command.parts))
    before = 1 + config.dram.latency_cycles
    transfer = header + max(engines) - config.dram.latency_cycles - 1
    words = stream_words(config, command.dram_addr, command.length)
    return DramPhases(before, transfer, min(words, transfer), 1)


def _part_cycles(config: HardwareConfig, dram_addr: int, length: int, counts: StreamCounts) -> int:
    """One part on its engine: the wait for its first bits and the engine start, its bins (up to B of a leaf
    a cycle), its Morton skips and zero-run steps, and its padding check."""
    bins = bin_cycles(counts, config.wdec.bins_per_cycle)
    return first_bits_cycles(config, dram_addr, length) + bins + counts.morton_skips + counts.zero_run_cycles + 1


class StreamCounts(NamedTuple):
    bins: int
    morton_skips: int
    zero_run_cycles: int
    leaf_runs: np.ndarray       # ProfileDecode.leaf_runs


def decoded_profile(stream: bytes, shape: tuple[int, int, int, int]) -> StreamCounts:
    """The profile decoder's counts of one stream, remembered by the stream's digest (a report asks for the
    cycles and the bins of the same streams; the decoded levels are not kept)."""
    key = (hashlib.blake2b(stream, digest_size=16).digest(), tuple(shape))
    counts = _STREAM_COUNTS.get(key)
    if counts is None:
        if len(_STREAM_COUNTS) >= _STREAM_COUNTS_KEPT:
            _STREAM_COUNTS.clear()
        decoded = decode_profile_compiled(stream, shape)
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
