"""The level decoder turns the codec's bins of every int8 level (uni_map_nzflag, uni_sign, UEGk(16, 0)) into
the level, up to a bin a lane a cycle, asks for each bin in its context, wants no bin after the level's end,
and refuses a magnitude outside int8 at the bin that settles it."""
from __future__ import annotations

import numpy as np
import pytest

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


def _decode(levels: list[int], lanes: int) -> list[tuple[str, int]]:
    """Per level, the decoder's outcome: ("complete", level) at its last bin or ("too_large", bins decoded up
    to and including the refused one), its bins fed ``lanes`` a cycle while the decoder wants them; every
    lane's context is checked on the way."""
    dut = LevelDecoder(lanes)
    outcomes = []

    async def testbench(ctx):
        ctx.set(dut.cu_start, 1)
        await ctx.tick()
        ctx.set(dut.cu_start, 0)
        previous = 0
        for level in levels:
            bins = _bins(level, previous)
            count, outcome = 0, None
            while outcome is None:
                for index, (context, bin_) in enumerate(bins[count:count + lanes]):
                    lane = dut.lanes[index]
                    assert ctx.get(lane.context) == context, f"level {level}, bin {count}"
                    assert ctx.get(lane.wants), f"level {level}, bin {count}"
                    ctx.set(lane.decoded, 1)
                    ctx.set(lane.bin, bin_)
                    count += 1
                    refused, complete = ctx.get(dut.too_large), ctx.get(dut.complete)
                    assert complete == (count == len(bins) and not refused), f"level {level}, bin {count}"
                    if refused or complete:
                        outcome = ("too_large", count) if refused else ("complete", ctx.get(dut.level))
                        assert index + 1 == lanes or not ctx.get(dut.lanes[index + 1].wants)
                        break
                await ctx.tick()
                for lane in dut.lanes:
                    ctx.set(lane.decoded, 0)
            outcomes.append(outcome)
            if outcome[0] == "too_large":
                ctx.set(dut.cu_start, 1)         # a command stops on it; the next CU starts afresh
                await ctx.tick()
                ctx.set(dut.cu_start, 0)
            previous = 0 if outcome[0] == "too_large" else level

    simulate(dut, testbench)
    return outcomes


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_every_int8_level(lanes):
    levels = [int(level) for level in np.random.default_rng(1).permutation(np.arange(-128, 128))] + [0, 0, -5, 0]
    assert _decode(levels, lanes) == [("complete", level & 0xFF) for level in levels]


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_magnitudes_beyond_int8_are_refused(lanes):
    ones = 2 + 16 + 7                   # nzflag, sign, the unary prefix, the 7th Exp-Golomb one
    assert _decode([128, -129, 143, 1000, -128], lanes) == [
        ("too_large", len(_bins(128, 0))), ("too_large", len(_bins(-129, 0))),    # at their last bin
        ("too_large", ones), ("too_large", ones), ("complete", 0x80)]
