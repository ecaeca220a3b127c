"""Stage A walks the lane groups of a command's accumulators: each lane's entry, its channel and whether it is
inside the command (lane 0's channel: the record store's window), and the OUT byte of each group, for unaligned starts and any channel count."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.requant_parts.fetch import GroupFetch
from aipu.sim.machine.arch import ACC_DTYPE, DTYPE_BYTES, Buffer, DType
from aipu.sim.machine.isa import Opcode
from aipu.sim.timing.requant import RequantGeometry
from tests.rtl.configs import CONFIGS
from tests.rtl.parts import behind_buffers, command_word
from tests.rtl.simulate import simulate

CASES = [(0, 4, 8, 0, DType.INT8), (3, 5, 3, 7, DType.INT16), (13, 2, 11, 1, DType.UINT8), (6, 9, 1, 30, DType.INT16)]


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("acc_addr, pixels, channels, out_addr, out_type", CASES)
def test_groups_lanes_and_channels(config, acc_addr, pixels, channels, out_addr, out_type):
    dut = GroupFetch(config)
    lanes = RequantGeometry.of(config).lanes
    acc = np.random.default_rng(acc_addr).integers(-2 ** 31, 2 ** 31, config.buffer_units(Buffer.ACC)).astype(ACC_DTYPE)
    end = acc_addr + pixels * channels
    groups = []

    async def testbench(ctx):
        ctx.set(dut.command.as_value(), command_word(config, Opcode.REQUANT, acc_addr=acc_addr, pixels=pixels,
                                                     channels=channels, out_addr=out_addr, out_type=out_type))
        ctx.set(dut.begin, 1)
        await ctx.tick()
        ctx.set(dut.begin, 0)
        ctx.set(dut.issue, 1)
        last = False
        while not last:
            last, channel = ctx.get(dut.last), ctx.get(dut.channel)
            await ctx.tick()
            ctx.set(dut.issue, 0)
            assert ctx.get(dut.valid)
            groups.append((channel, ctx.get(dut.in_tile), ctx.get(dut.group_byte),
                           [ctx.get(a) for a in dut.accumulator]))
            ctx.set(dut.issue, not last)
        await ctx.tick()
        assert not ctx.get(dut.valid)

    simulate(behind_buffers(dut, {"acc_read": acc.view(np.uint8)}), testbench)
    first = acc_addr // lanes
    assert len(groups) == (end - 1) // lanes - first + 1
    for g, (channel, in_tile, group_byte, accumulators) in enumerate(groups, start=first):
        entries = range(g * lanes, (g + 1) * lanes)
        assert in_tile == sum(1 << j for j, e in enumerate(entries) if acc_addr <= e < end)
        assert channel == (g * lanes - acc_addr) % channels
        assert accumulators == acc[g * lanes:(g + 1) * lanes].tolist()
        assert group_byte == out_addr + (g * lanes - acc_addr) * DTYPE_BYTES[out_type]
