"""The sequencer: a command takes the cycles of sim/timing/conv.py's formula, every phase loads ``cols``
columns and streams its block's pixels from the bank it does not load, and a refused command stops in setup."""
from __future__ import annotations

import numpy as np

from aipu.rtl.conv_parts.sequencer import ConvSequencer
from aipu.sim.cosim.stimulus.conv import random_conv
from aipu.sim.timing.conv import ConvTiming, command_cycles
from tests.rtl.configs import EVERY_CONFIG, SMALL
from tests.rtl.conv_parts.model import blocks_of, geometry_of, set_members
from tests.rtl.simulate import simulate


def _run(config, geometry: dict, blocks: int, refused: bool = False) -> dict:
    """Start a command of ``blocks`` blocks; per phase (from the first boundary) the cycles loading, the cycles
    issuing and the bank; the cycle of ``done`` counted from ``start``."""
    dut = ConvSequencer(config)
    trace = {"phases": [[0, 0, None]], "done": None}

    async def testbench(ctx):
        set_members(ctx, dut.geometry, geometry)
        ctx.set(dut.start, 1)
        boundaries = 0
        for cycle in range(20 * geometry["block_cycles"] * (blocks + 1) + 20):
            ctx.set(dut.last, boundaries == blocks - 1)       # the block being loaded is the last one
            ctx.set(dut.refused, refused and ctx.get(dut.setup.check))
            phase = trace["phases"][-1]
            phase[0] += ctx.get(dut.phase.loading)
            phase[1] += ctx.get(dut.phase.issuing)
            if ctx.get(dut.phase.issuing):
                phase[2] = ctx.get(dut.phase.bank)
            if ctx.get(dut.done):
                trace["done"] = cycle
                break
            if ctx.get(dut.phase.boundary):
                boundaries += 1
                trace["phases"].append([0, 0, None])
            await ctx.tick()
            ctx.set(dut.start, 0)

    simulate(dut, testbench)
    return trace


@EVERY_CONFIG
def test_cycles_and_phases(config):
    timing, rng = ConvTiming.of(config), np.random.default_rng(config.mac.rows + 2)
    for _ in range(6):
        command = random_conv(config, rng)
        geometry, blocks = geometry_of(config, command), len(blocks_of(config, command))
        trace = _run(config, geometry, blocks)
        assert trace["done"] == command_cycles(config, command)
        loads = config.mac.cols * timing.weight_beats
        streams = [[loads, geometry["pixel_cycles"], (b + 1) % 2] for b in range(blocks - 1)]  # phase -1 fills bank 1
        assert trace["phases"] == [[loads, 0, None], *streams, [0, geometry["pixel_cycles"], blocks % 2]]


def test_a_refused_command_neither_loads_nor_issues():
    geometry = geometry_of(SMALL, random_conv(SMALL, np.random.default_rng(4)))
    assert _run(SMALL, geometry, 3, refused=True) == {"phases": [[0, 0, None]], "done": None}
