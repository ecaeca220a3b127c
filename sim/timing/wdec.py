"""WDEC's cycles (docs/rtl-wdec.md, "Cycles"): the weight decoder (``aipu.rtl.wdec``) checks the command,
waits for the first NEED_BITS of its stream, then decodes one bin a cycle, with a cycle more per Morton
candidate outside a CU and per ZERO_RUN_BITS of a long zero run, and checks the padding.

The counts come from the codec's compiled profile decoder (numba): ``aipu.sim.timing`` imports this module
only when a WDEC command is timed.
"""
from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

from aipu.codec.errors import CodecError
from aipu.codec.npu_profile import ZERO_RUN_BITS, decode_profile_compiled
from aipu.codec.reference.engine import RANGE_BITS
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.timing.dma import DramPhases

# The most bits one cycle consumes: a renormalisation past ZERO_RUN_BITS - 1 zeros plus 9 bits, then an LPS
# reading one bit and shifting by up to 9.
NEED_BITS = (ZERO_RUN_BITS - 1 + RANGE_BITS) + 1 + RANGE_BITS


def command_cycles(config: HardwareConfig, command, stream: bytes) -> int:
    """Cycles of a WDEC command on a profile stream that decodes (docs/rtl-wdec.md): the check, the wait for
    the first bits, the 9-bit engine start, one cycle per bin, per Morton candidate outside a CU and per
    ZERO_RUN_BITS of a long zero run, and the padding check."""
    return dram_phases(config, command, stream).cycles


def dram_phases(config: HardwareConfig, command, stream: bytes) -> DramPhases:
    """WDEC's cycles around its DRAM transfer: from the first word to the last bin the stream's words are
    read at the pace the engine uses them (at most one a cycle); the check and the read latency come before,
    the padding check after. A stream that does not decode has no timing: the RTL stops on it with an error."""
    try:
        decoded = decoded_profile(stream, (command.out_c, command.in_c, command.k_h, command.k_w))
    except CodecError as error:
        raise ExecutionError(f"the weight stream at dram_addr = {command.dram_addr:#x} ({command.length} bytes) does "
                             f"not decode in the npu profile: {error}") from None
    first = first_bits_cycles(config, command.dram_addr, command.length) - config.dram.latency_cycles
    bins = -(-decoded.bins // config.wdec.bins_per_cycle)      # the RTL: one a cycle
    transfer = first + bins + decoded.morton_skips + decoded.zero_run_cycles
    words = _stream_words(config, command.dram_addr, command.length)
    return DramPhases(1 + config.dram.latency_cycles, transfer, min(words, transfer), 1)


class StreamCounts(NamedTuple):
    bins: int
    morton_skips: int
    zero_run_cycles: int


def decoded_profile(stream: bytes, shape: tuple[int, int, int, int]) -> StreamCounts:
    """The profile decoder's counts of one stream, remembered by the stream's digest (a report asks for the
    cycles and the bins of the same streams; the decoded levels are not kept)."""
    key = (hashlib.blake2b(stream, digest_size=16).digest(), tuple(shape))
    counts = _STREAM_COUNTS.get(key)
    if counts is None:
        if len(_STREAM_COUNTS) >= _STREAM_COUNTS_KEPT:
            _STREAM_COUNTS.clear()
        decoded = decode_profile_compiled(stream, shape)
        counts = _STREAM_COUNTS[key] = StreamCounts(decoded.bins, decoded.morton_skips, decoded.zero_run_cycles)
    return counts


_STREAM_COUNTS: dict[tuple[bytes, tuple], StreamCounts] = {}
_STREAM_COUNTS_KEPT = 1 << 16


def _stream_words(config: HardwareConfig, dram_addr: int, length: int) -> int:
    """DRAM words that hold the stream's bytes."""
    nbytes = config.dram.bytes_per_cycle
    return (dram_addr + length - 1) // nbytes - dram_addr // nbytes + 1


def first_bits_cycles(config: HardwareConfig, dram_addr: int, length: int) -> int:
    """Cycles from the first DRAM request to the 9-bit engine start, which waits until the window holds
    NEED_BITS (or the whole stream): the read latency, one cycle each into the FIFO and into the window, one
    per word it takes (words arrive one a cycle) and the start itself."""
    nbytes = config.dram.bytes_per_cycle
    needed = math.ceil((8 * (dram_addr % nbytes) + NEED_BITS) / (8 * nbytes))
    words = min(_stream_words(config, dram_addr, length), needed)
    return config.dram.latency_cycles + 2 + words
