"""The header fields check the software decoder's header bins against the profile and the command, naming the
field that disagrees; the CTU flags ask for each flag in its context, split_flag only where it is coded."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.codec.npu_profile import (PROFILE_CTU_FLAGS, PROFILE_CU_FLAGS, PROFILE_SPLIT_FLAG, decode_profile_stream,
                                   encode_profile_stream)
from aipu.codec.reference.elements import element_spec
from aipu.codec.reference.engine import TRACE_BYPASS
from aipu.rtl.wdec_parts.elements import CtuFlags, HeaderFields
from aipu.sim.cosim.stimulus.wdec import layer_stream, random_weights
from aipu.sim.machine.arch import DEFAULT
from tests.rtl.simulate import simulate

ERROR_NAMES = ("k_h", "k_w", "in_c", "out_c", "stream", "profile")
SHAPE = (5, 3, 2, 3)


def _header_bins(max_ctu_size: int, continuation: bool = False) -> list[int]:
    trace: list[tuple[int, int]] = []
    weights = random_weights(np.random.default_rng(1), SHAPE)
    stream = encode_profile_stream(weights, max_ctu_size, continuation) if continuation else layer_stream(weights,
                                                                                                         max_ctu_size)
    decode_profile_stream(stream, SHAPE, trace, continuation=continuation)
    first_context_bin = next(index for index, (context, _) in enumerate(trace) if context != TRACE_BYPASS)
    return [bin_ for _, bin_ in trace[:first_context_bin]]


def _read_header(bins: list[int], shape, continuation: bool = False) -> tuple[int, str | None, int]:
    """(bins read, the fault or None, ctu_size_idx) of the header fields on ``bins``."""
    dut = HeaderFields(DEFAULT, ERROR_NAMES, continuation)
    outcome = {}

    async def testbench(ctx):
        for name, value in zip(("out_c", "in_c", "k_h", "k_w"), shape):
            ctx.set(getattr(dut, name), value)
        ctx.set(dut.begin, 1)
        await ctx.tick()
        ctx.set(dut.begin, 0)
        for count, bin_ in enumerate(bins, 1):
            ctx.set(dut.decoded, 1)
            ctx.set(dut.bin, bin_)
            if ctx.get(dut.fault) or ctx.get(dut.complete):
                outcome["read"] = count
                outcome["fault"] = ERROR_NAMES[ctx.get(dut.fault_field)] if ctx.get(dut.fault) else None
                break
            await ctx.tick()
        await ctx.tick()
        outcome["ctu_size_idx"] = ctx.get(dut.ctu_size_idx)

    simulate(dut, testbench)
    return outcome["read"], outcome["fault"], outcome["ctu_size_idx"]


@pytest.mark.parametrize("max_ctu_size,index", [(64, 0), (16, 2)])
def test_a_profile_header_completes_at_its_last_bin(max_ctu_size, index):
    bins = _header_bins(max_ctu_size)
    assert _read_header(bins, SHAPE) == (len(bins), None, index)


@pytest.mark.parametrize("max_ctu_size,index", [(64, 0), (16, 2), (8, 3)])
def test_a_continuation_header_is_max_ctu3d_idx_alone(max_ctu_size, index):
    bins = _header_bins(max_ctu_size, continuation=True)
    assert len(bins) == element_spec("max_ctu3d_idx").fixed_length
    assert _read_header(bins, (0, 0, 0, 0), continuation=True) == (len(bins), None, index)


def test_the_field_that_disagrees_is_the_fault():
    bins = _header_bins(64)
    assert _read_header(bins, (5, 3, 2, 1))[1] == "k_w"
    assert _read_header(bins, (4, 3, 2, 3))[1] == "out_c"
    second_field = element_spec("integer_input").fixed_length            # total_trainable_layer's first bin
    flipped = bins[:second_field] + [1 - bins[second_field]] + bins[second_field + 1:]
    assert _read_header(flipped, SHAPE)[1] == "profile"


@pytest.mark.parametrize("split_coded", [0, 1])
def test_ctu_flags_in_their_contexts(split_coded):
    flags = [*PROFILE_CTU_FLAGS, *([PROFILE_SPLIT_FLAG] if split_coded else []), *PROFILE_CU_FLAGS]
    expected = [element_spec(name).ctx_start + (name == "map_mode_flag") for name, _ in flags]
    dut = CtuFlags()
    asked, ends = [], []

    async def testbench(ctx):
        ctx.set(dut.split_coded, split_coded)
        for wrong in (False, True):
            ctx.set(dut.begin, 1)
            await ctx.tick()
            ctx.set(dut.begin, 0)
            for index, (_, value) in enumerate(flags):
                bad = wrong and index == 2
                asked.append(ctx.get(dut.context))
                ctx.set(dut.decoded, 1)
                ctx.set(dut.bin, value ^ bad)
                ends.append((ctx.get(dut.mismatch), ctx.get(dut.complete)))
                await ctx.tick()
                if bad:
                    break
            ctx.set(dut.decoded, 0)

    simulate(dut, testbench)
    assert asked == expected + expected[:3]
    assert ends == [(0, 0)] * (len(flags) - 1) + [(0, 1)] + [(0, 0), (0, 0), (1, 0)]
