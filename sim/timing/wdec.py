"""WDEC's cycles (docs/rtl-wdec.md, "Cycles"): the weight decoder (``aipu.rtl.wdec``) checks the command,
waits for the first B·NEED_BITS of its stream, then decodes up to B = ``wdec.bins_per_cycle`` bins of one
leaf a cycle (every other bin one a cycle), with a cycle more per Morton candidate outside a CU and per
ZERO_RUN_BITS of a long zero run, and checks the padding. A stream of K parts (docs/codec.md §11) is read
header first and decoded by K of the ``wdec.engines`` lanes at once (``aipu.sim.timing.npu_wdec``), whose
cycles alone on the port this module gives. Each lane's cube stager (docs/rtl-wdec.md, "Stager") writes its
levels to WEIGHT by 8x8x8 cubes: the engine waits while a cube's predecessor still drains, and the last cube is
written after the padding check, so that the cycles of one part too are the unit's, simulated
(:func:`simulated_phases`); :func:`engine_phases`, the formula of the engine alone, is a lower bound.

The counts come from the codec's compiled profile decoder (numba): ``aipu.sim.timing`` imports this module
only when a WDEC command is timed.
"""
from __future__ import annotations

import hashlib

from aipu.codec.errors import CodecError
from aipu.codec.npu_profile import PART_LENGTH, bin_cycles, decode_parts, split_parts
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.errors import ExecutionError
from aipu.sim.timing.dma import DramPhases
from aipu.sim.timing.wdec_stream import StreamCounts, decoded_profile, first_bits_cycles, stream_words


def command_cycles(config: HardwareConfig, command, stream: bytes) -> int:
    """Cycles of a WDEC command on a profile stream that decodes (docs/rtl-wdec.md), alone on its DRAM port: the
    header's words (K > 1 parts), then the ``wdec.engines`` lanes, one a part, sharing the port and the write
    port (``aipu.sim.timing.npu_wdec.WdecUnit``, each request granted when made), each lane's engine held by its
    cube stager and its last cube written after its padding check. One part is no exception: no closed form in
    the stream's counts is exact with the stager (:func:`engine_phases` is the engine alone, a lower bound)."""
    return dram_phases(config, command, stream).cycles


def dram_phases(config: HardwareConfig, command, stream: bytes) -> DramPhases:
    """WDEC's cycles around its DRAM transfer: from the first word to the last bin the stream's words are
    read at the pace the engines use them (at most one a cycle); the check and the read latency come before,
    the padding check and the stagers' last writes after. A stream that does not decode has no timing: the RTL
    stops on it with an error."""
    _decoded_parts(command, stream)
    return simulated_phases(config, command, stream)


def engine_phases(config: HardwareConfig, command, parts: list) -> DramPhases:
    """One part's engine alone (a K = 1 command; ``parts``: ``decode_parts``' list), the formula WDEC took before
    the cube stager: the check, the wait for the first bits, the 9-bit engine start, a cycle per B bins of a leaf
    (up to its end or a zero-run step) and per other bin, per Morton candidate outside a CU and per ZERO_RUN_BITS
    of a long zero run, and the padding check. The unit alone retires 2 + WRITES(last cube) cycles after it at
    the earliest (the flush, the writes, DONE), more where the engine is held."""
    ((part, counts),) = parts
    total = _part_cycles(config, command.dram_addr + part.offset, part.length, counts)
    return _phases(config, total + 1, stream_words(config, command.dram_addr, command.length))


def simulated_phases(config: HardwareConfig, command, stream: bytes) -> DramPhases:
    """The cycles of ``npu_wdec.WdecUnit`` alone on its port (a read answered ``dram.latency_cycles`` after its
    grant), remembered by the stream's digest and what the timing depends on (the stagers' writes: the WEIGHT
    address modulo its port's bytes)."""
    from aipu.sim.timing.npu_wdec import NEVER, WdecUnit

    nbytes, port_bytes = config.dram.bytes_per_cycle, config.buffer(Buffer.WEIGHT).port_bytes
    key = (hashlib.blake2b(stream, digest_size=16).digest(), command.out_c, command.in_c, command.k_h, command.k_w,
           command.parts, command.dram_addr % nbytes, command.wgt_addr % port_bytes, port_bytes, config.dram,
           config.wdec)
    cycles = _SIMULATED.get(key)
    if cycles is None:
        unit = WdecUnit(config, command, stream, 0, latency=config.dram.latency_cycles)
        unit.alone(NEVER)
        if len(_SIMULATED) >= _SIMULATED_KEPT:
            _SIMULATED.clear()
        cycles = _SIMULATED[key] = unit.finish()
    parts = split_parts(stream, command.out_c, command.parts)
    words = sum(stream_words(config, command.dram_addr + part.offset, part.length) for part in parts)
    if command.parts > 1:
        words += stream_words(config, command.dram_addr, PART_LENGTH.size * command.parts)
    return _phases(config, cycles, words)


_SIMULATED: dict[tuple, int] = {}
_SIMULATED_KEPT = 1 << 16        # commands whose cycles are remembered: beyond it the cache starts afresh


def _phases(config: HardwareConfig, cycles: int, words: int) -> DramPhases:
    """``cycles`` split into the check and the read latency before, the padding check after and the transfer."""
    before = 1 + config.dram.latency_cycles
    transfer = cycles - before - 1
    return DramPhases(before, transfer, min(words, transfer), 1)


def _decoded_parts(command, stream: bytes) -> list:
    shape = (command.out_c, command.in_c, command.k_h, command.k_w)
    try:
        return decode_parts(stream, shape, command.parts, decoded_profile)
    except CodecError as error:
        raise ExecutionError(f"the weight stream at dram_addr = {command.dram_addr:#x} ({command.length} bytes) does "
                             f"not decode in the npu profile: {error}") from None


def _part_cycles(config: HardwareConfig, dram_addr: int, length: int, counts: StreamCounts) -> int:
    """One part on its engine: the wait for its first bits and the engine start, its bins (up to B of a leaf
    a cycle), its Morton skips and zero-run steps, and its padding check."""
    bins = bin_cycles(counts, config.wdec.bins_per_cycle)
    return first_bits_cycles(config, dram_addr, length) + bins + counts.morton_skips + counts.zero_run_cycles + 1
