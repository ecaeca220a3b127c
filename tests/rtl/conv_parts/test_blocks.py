"""The block walk visits the blocks docs/rtl-conv.md lists, in its order, with their operands' addresses."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.conv_parts.blocks import BlockWalk
from aipu.sim.cosim.stimulus.conv import random_conv
from aipu.sim.machine.arch import DType, mac_lanes
from tests.rtl.configs import EVERY_CONFIG
from tests.rtl.conv_parts.model import blocks_of, command_word, geometry_of, set_members
from tests.rtl.simulate import simulate


@EVERY_CONFIG
@pytest.mark.parametrize("w_type", [DType.INT8, DType.INT4], ids=["int8", "int4"])
def test_every_block_in_order(config, w_type):
    rng = np.random.default_rng(config.mac.rows + 1)
    commands = [random_conv(config, rng, w_type=w_type) for _ in range(8)]
    for command in commands:
        dut = BlockWalk(config)
        c, geometry, expected = command.args, geometry_of(config, command), blocks_of(config, command)
        assert len(expected) == config.mac.blocks(c["groups"], geometry["group_in"], geometry["group_out"],
                                                  c["k_h"] * c["k_w"], mac_lanes(w_type))

        async def testbench(ctx):
            ctx.set(dut.command.as_value(), command_word(config, command))
            set_members(ctx, dut.geometry, geometry)
            ctx.set(dut.phase.begin, 1)
            await ctx.tick()
            ctx.set(dut.phase.begin, 0)
            for index, block in enumerate(expected):
                got = {name: ctx.get(getattr(dut.block, name)) for name in block}
                assert got == block, f"block {index} of {command}"
                ctx.set(dut.phase.boundary, 1)
                await ctx.tick()
                ctx.set(dut.phase.boundary, 0)
                await ctx.tick()         # between boundaries the block stays

        simulate(dut, testbench)
