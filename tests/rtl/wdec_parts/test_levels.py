"""The level decoder turns the codec's bins of every int8 level (uni_map_nzflag, uni_sign, UEGk(16, 0)) into
the level, asks for each bin in its context, and refuses a magnitude outside int8 at the bin that settles it."""
from __future__ import annotations

import numpy as np

from aipu.codec.reference.binarization import encode_uegk
from aipu.codec.reference.elements import element_spec
from aipu.rtl.wdec_parts.levels import LevelDecoder
from tests.rtl.simulate import simulate

NZFLAG, SIGN, MAGNITUDE = (element_spec(name).ctx_start for name in ("uni_map_nzflag", "uni_sign", "uni_abs_q"))


def _bins(level: int, previous: int) -> list[tuple[int, int]]:
    """(ctxIdx, bin) of one leaf's level after a leaf of level ``previous`` (the codec's contexts)."""
    if level == 0:
        return [(NZFLAG, 0)]
    bins = [(NZFLAG, 1), (SIGN + (0 if previous < 0 else 1 if previous == 0 else 2), int(level < 0))]
    encode_uegk(lambda index, bin_: bins.append((MAGNITUDE + 2 + index, bin_)), abs(level), 16, 0)
    return bins


def _decode(levels: list[int]) -> list[tuple[str, int]]:
    """Per level, the decoder's outcome: ("complete", level) at its last bin or ("too_large", bins decoded up
    to and including the refused one); every bin's context is checked on the way."""
    dut = LevelDecoder()
    outcomes = []

    async def testbench(ctx):
        ctx.set(dut.cu_start, 1)
        await ctx.tick()
        ctx.set(dut.cu_start, 0)
        previous = 0
        for level in levels:
            bins = _bins(level, previous)
            for count, (context, bin_) in enumerate(bins, 1):
                assert ctx.get(dut.context) == context, f"level {level}"
                ctx.set(dut.decoded, 1)
                ctx.set(dut.bin, bin_)
                refused, complete = ctx.get(dut.too_large), ctx.get(dut.complete)
                assert complete == (count == len(bins) and not refused), f"level {level}, bin {count}"
                outcome = ("too_large", count) if refused else ("complete", ctx.get(dut.level))
                await ctx.tick()
                if refused:
                    break
            ctx.set(dut.decoded, 0)
            outcomes.append(outcome)
            if outcome[0] == "too_large":
                ctx.set(dut.cu_start, 1)         # a command stops on it; the next CU starts afresh
                await ctx.tick()
                ctx.set(dut.cu_start, 0)
            previous = 0 if outcome[0] == "too_large" else level

    simulate(dut, testbench)
    return outcomes


def test_every_int8_level():
    levels = [int(level) for level in np.random.default_rng(1).permutation(np.arange(-128, 128))] + [0, 0, -5, 0]
    assert _decode(levels) == [("complete", level & 0xFF) for level in levels]


def test_magnitudes_beyond_int8_are_refused():
    ones = 2 + 16 + 7                   # nzflag, sign, the unary prefix, the 7th Exp-Golomb one
    assert _decode([128, -129, 143, 1000, -128]) == [
        ("too_large", len(_bins(128, 0))), ("too_large", len(_bins(-129, 0))),    # at their last bin
        ("too_large", ones), ("too_large", ones), ("complete", 0x80)]
