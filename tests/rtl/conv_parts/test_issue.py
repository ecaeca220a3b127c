"""The issue walks a block's output pixels and gathers each one's ``act_bytes`` input bytes (``rows`` channels
for each of the block's groups, in the input's type) and ``cols`` old accumulators from ACT and ACC, with where
its accumulators go back, in the command's beats."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.conv_parts.issue import PixelIssue
from aipu.sim.cosim.stimulus.conv import random_conv
from aipu.sim.machine.arch import Buffer, DType
from aipu.sim.timing.conv import conv_output_size
from tests.rtl.configs import EVERY_CONFIG
from tests.rtl.conv_parts.buffers import ReadPorts, run_bytes, tick
from tests.rtl.conv_parts.model import blocks_of, geometry_of, set_members
from tests.rtl.simulate import simulate


def _expected_pixels(config, command, block, act: np.ndarray, acc: np.ndarray) -> list[dict]:
    geometry, (out_h, out_w) = geometry_of(config, command), conv_output_size(command)
    pixels = []
    for p in range(out_h * out_w):
        start = block["act"] + p // out_w * geometry["step_y"] + p % out_w * geometry["step_x"]
        entry = block["acc"] + p * command.args["out_c"]
        pixels.append(dict(x=int.from_bytes(run_bytes(act, start, block["act_bytes"]).tobytes(), "little"),
                           old=int.from_bytes(run_bytes(acc, 4 * entry, 4 * block["cols"]).tobytes(), "little"),
                           place=4 * entry, cols=block["cols"], overwrites=block["overwrites"]))
    return pixels


@EVERY_CONFIG
@pytest.mark.parametrize("w_type", [DType.INT8, DType.INT4], ids=["int8", "int4"])
def test_the_pixels_of_a_block(config, w_type):
    rng = np.random.default_rng(config.mac.rows + 4)
    act, acc = (rng.integers(0, 256, size=config.buffer(b).bytes, dtype=np.uint8) for b in (Buffer.ACT, Buffer.ACC))
    acc_port = config.buffer(Buffer.ACC).port_bytes
    commands = [random_conv(config, rng, w_type=w_type) for _ in range(40)]
    strided = [c for c in commands if (c.args["stride_w"], c.args["stride_h"]) != (1, 1)]
    assert strided, "no strided command to tell step_x from tap_x"
    for command in strided[:3] + commands[:3]:
        geometry = geometry_of(config, command)
        dut = PixelIssue(config)
        act_ports = ReadPorts(act, config.buffer(Buffer.ACT).port_bytes, dut.act_read, dut.act_read_b)
        acc_ports = ReadPorts(acc, acc_port, dut.acc_read, dut.acc_read_b)
        block = blocks_of(config, command)[-1]
        got = []

        async def testbench(ctx):
            set_members(ctx, dut.geometry, geometry)
            ctx.set(dut.out_c, command.args["out_c"])
            set_members(ctx, dut.block, {name: block[name] for name in ("act", "acc", "act_bytes", "cols", "overwrites")})
            set_members(ctx, dut.phase, {"boundary": 1, "bank": 1})
            await ctx.tick()
            set_members(ctx, dut.phase, {"boundary": 0, "issuing": 1})
            for cycle in range(geometry["pixel_cycles"] + 2):
                if cycle == geometry["pixel_cycles"]:
                    ctx.set(dut.phase.issuing, 0)
                if ctx.get(dut.place.valid):
                    assert ctx.get(dut.operands.bank) == 1
                    place = dut.place
                    used_x, used_old = (1 << 8 * block["act_bytes"]) - 1, (1 << 32 * block["cols"]) - 1    # the rest unread
                    got.append(dict(x=ctx.get(dut.operands.x) & used_x, old=ctx.get(dut.operands.old) & used_old,
                                    place=ctx.get(place.acc_word) * acc_port + ctx.get(place.acc_offset),
                                    cols=ctx.get(place.cols), overwrites=ctx.get(dut.operands.overwrites)))
                await tick(ctx, act_ports, acc_ports)

        simulate(dut, testbench)
        assert got == _expected_pixels(config, command, block, act, acc), command
