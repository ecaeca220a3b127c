"""Stage A walks the lane groups of a command's accumulators: each output lane's entries (two with dual), its
channel and whether it is inside the command (lane 0's channel: the record store's window), and the OUT nibble
of each group, for unaligned starts, any channel count and every output type."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.requant_parts.fetch import GroupFetch
from aipu.sim.machine.arch import ACC_DTYPE, DTYPE_BITS, Buffer, DType
from aipu.sim.machine.isa import Opcode
from aipu.sim.timing.requant import RequantGeometry
from tests.rtl.configs import CONFIGS
from tests.rtl.parts import behind_buffers, command_word
from tests.rtl.simulate import simulate

CASES = [(0, 4, 8, 0, DType.INT8, 0), (3, 5, 3, 7, DType.INT16, 0), (13, 2, 11, 1, DType.UINT8, 0),
         (6, 9, 1, 30, DType.INT16, 0), (5, 3, 4, 2, DType.INT4, 0), (0, 4, 6, 3, DType.INT4, 1),
         (5, 3, 3, 1, DType.INT8, 1), (12, 2, 5, 0, DType.INT16, 1), (7, 5, 1, 4, DType.UINT8, 1)]


def expected_outputs(group: int, lanes: int, acc_addr: int, end: int, dual: int) -> list[tuple[int, int, bool]]:
    """Output lane i's (first entry, second entry or -1, inside the command) for the group: an entry a lane,
    or with dual the pairs whose second entry (odd offset from acc_addr) lies in the group, in lane order."""
    entries = range(group * lanes, (group + 1) * lanes)
    if not dual:
        return [(e, -1, acc_addr <= e < end) for e in entries]
    return [(e - 1, e, acc_addr <= e - 1 and e < end) for e in entries if (e - acc_addr) % 2]


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("acc_addr, pixels, channels, out_addr, out_type, dual", CASES)
def test_groups_lanes_and_channels(config, acc_addr, pixels, channels, out_addr, out_type, dual):
    dut = GroupFetch(config)
    lanes = RequantGeometry.of(config).lanes
    acc = np.random.default_rng(acc_addr).integers(-2 ** 31, 2 ** 31, config.buffer_units(Buffer.ACC)).astype(ACC_DTYPE)
    end = acc_addr + pixels * channels * (1 + dual)
    groups = []

    async def testbench(ctx):
        ctx.set(dut.command.as_value(), command_word(config, Opcode.REQUANT, acc_addr=acc_addr, pixels=pixels,
                                                     channels=channels, out_addr=out_addr, out_type=out_type,
                                                     dual=dual))
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
            groups.append((channel, ctx.get(dut.in_tile), ctx.get(dut.group_nibble),
                           [ctx.get(a) for a in dut.accumulator], [ctx.get(a) for a in dut.second]))
            ctx.set(dut.issue, not last)
        await ctx.tick()
        assert not ctx.get(dut.valid)

    simulate(behind_buffers(dut, {"acc_read": acc.view(np.uint8)}), testbench)
    first = acc_addr // lanes
    assert len(groups) == (end - 1) // lanes - first + 1
    nibbles = DTYPE_BITS[out_type] // 4
    for g, (channel, in_tile, group_nibble, accumulators, seconds) in enumerate(groups, start=first):
        outputs = expected_outputs(g, lanes, acc_addr, end, dual)
        assert in_tile == sum(1 << i for i, (_, _, inside) in enumerate(outputs) if inside)
        for i, (a, b, inside) in enumerate(outputs):
            if inside:
                assert accumulators[i] == acc[a] and (b < 0 or seconds[i] == acc[b])
        if outputs:
            index = (outputs[0][0] - acc_addr) // (1 + dual)        # output lane 0's output
            assert channel == index % channels
            assert group_nibble == 2 * out_addr + index * nibbles
