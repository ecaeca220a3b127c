"""The packer writes each group's (or each softmax result's) low out_type bytes at the destination's next
bytes, whole words and the last partial one, and says done once, with the last write."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.lut_parts.interfaces import lanes
from aipu.rtl.lut_parts.packer import OutputPacker
from aipu.sim.machine.arch import Buffer
from tests.rtl.configs import CONFIGS
from tests.rtl.parts import WrittenImage
from tests.rtl.simulate import simulate


def _pack(config, dst_addr: int, out_bytes: int, groups: list[list[int]], softmax: bool):
    dut = OutputPacker(config)
    image = WrittenImage(dut.out_write, config.buffer(Buffer.OUT).bytes)
    done = []

    async def testbench(ctx):
        for name, value in dict(is_softmax=softmax, out_log2=out_bytes.bit_length() - 1, dst_addr=dst_addr).items():
            ctx.set(getattr(dut.operands, name), value)
        ctx.set(dut.begin, 1)
        await ctx.tick()
        ctx.set(dut.begin, 0)
        for cycle in range(len(groups) + 3):
            valid, last = cycle < len(groups), cycle == len(groups) - 1
            values = groups[cycle] if valid else []
            if softmax:
                ctx.set(dut.softmax_valid, valid)
                ctx.set(dut.softmax_last, last)
                ctx.set(dut.softmax_result, values[0] if valid else 0xBEEF)
            else:
                ctx.set(dut.group_valid, valid)
                ctx.set(dut.group_last, last)
                ctx.set(dut.group_bytes, len(values) * out_bytes)
                for lane, value in zip(dut.value, values + [0xBEEF] * lanes(config)):
                    ctx.set(lane, value)
            image.sample(ctx)
            if ctx.get(dut.done):
                done.append(cycle)
            await ctx.tick()

    simulate(dut, testbench)
    return image.bytes, done


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("out_bytes", [1, 2])
@pytest.mark.parametrize("dst_addr, count", [(0, 32), (3, 13), (7, 1), (1, 40)])
@pytest.mark.parametrize("softmax", [False, True], ids=["groups", "softmax"])
def test_bytes_land_in_order(config, out_bytes, dst_addr, count, softmax):
    port_bytes = config.buffer(Buffer.OUT).port_bytes
    per_group = 1 if softmax else min(lanes(config), port_bytes // out_bytes)
    values = np.random.default_rng(count).integers(0, 1 << 16, count)
    groups = [values[i:i + per_group].tolist() for i in range(0, count, per_group)]
    written, done = _pack(config, dst_addr, out_bytes, groups, softmax)
    expected = np.zeros_like(written)
    expected[dst_addr:dst_addr + count * out_bytes] = \
        (values.astype(np.uint16) if out_bytes == 2 else values.astype(np.uint8)).view(np.uint8)
    assert np.array_equal(written, expected)
    spill = (dst_addr + (len(groups) - 1) * per_group * out_bytes) % port_bytes + \
        len(groups[-1]) * out_bytes > port_bytes
    assert done == [len(groups) - 1 + spill]
