"""The cube stager alone: levels fed in Morton order (as the leaf walk gives them, one a cycle or with gaps)
land at their WEIGHT bytes through row writes, whatever the write arbiter's grants; the engine is held only
when a level of a new cube meets a cube still draining; the last cube drains after ``finished``."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.codec.reference.geometry import CTU_SIZES
from aipu.rtl.wdec_parts.stager import CubeStager
from aipu.sim.machine.arch import Buffer
from tests.rtl.configs import CONFIGS, SMALL
from tests.rtl.simulate import simulate


def morton_leaves(out_c: int, in_c: int, taps: int, ctu: int) -> list[tuple[int, int, int]]:
    """(kernel, tap, channel) of every leaf in the profile's order: CTUs over (channel rows, kernel columns), in
    each the Morton order over (z, y = channel, x = kernel) of a cube as deep as its largest extent."""
    leaves = []
    for c0 in range(0, in_c, ctu):
        for k0 in range(0, out_c, ctu):
            extents = (taps, min(ctu, in_c - c0), min(ctu, out_c - k0))
            levels = max((extent - 1).bit_length() for extent in extents)
            for index in range(1 << (3 * levels)):
                z, y, x = (sum(((index >> (3 * bit + 2 - axis)) & 1) << bit for bit in range(levels))
                           for axis in range(3))
                if z < extents[0] and y < extents[1] and x < extents[2]:
                    leaves.append((k0 + x, z, c0 + y))
    return leaves


def _stage(config, shape, wgt_addr: int, rng, gaps: float, grants: float):
    """WEIGHT after feeding the leaves of ``shape`` [O, I, taps], and the cycles the stager held a leaf."""
    out_c, in_c, taps = shape
    nbytes = config.buffer(Buffer.WEIGHT).port_bytes
    levels = rng.integers(0, 256, size=(out_c, taps, in_c))
    weight = np.zeros(config.buffer(Buffer.WEIGHT).bytes, np.uint8)
    leaves = morton_leaves(out_c, in_c, taps, int(rng.choice(CTU_SIZES)))
    dut = CubeStager(config)
    outcome = {"held": 0}

    async def testbench(ctx):
        for name, value in dict(wgt_addr=wgt_addr, out_c=out_c, in_c=in_c).items():
            ctx.set(getattr(dut, name), value)
        ctx.set(dut.leaf.taps, taps)
        ctx.set(dut.begin, 1)
        await ctx.tick()
        ctx.set(dut.begin, 0)
        index, finished = 0, False
        for _ in range(40 * len(leaves) + 1000):
            kernel, tap, channel = leaves[min(index, len(leaves) - 1)]
            ctx.set(dut.leaf.kernel, kernel)
            ctx.set(dut.leaf.tap, tap)
            ctx.set(dut.leaf.channel, channel)
            ctx.set(dut.leaf.level, int(levels[kernel, tap, channel]))
            in_leaf = index < len(leaves)
            ctx.set(dut.leaf.in_leaf, in_leaf)
            granted = ctx.get(dut.pending) and rng.random() < grants
            ctx.set(dut.grant, granted)
            held = ctx.get(dut.hold)
            outcome["held"] += held
            completes = in_leaf and not held and rng.random() >= gaps
            ctx.set(dut.leaf.valid, completes)
            ctx.set(dut.finished, index == len(leaves) and not finished)
            finished |= index == len(leaves)
            if granted:
                address, data, mask = (ctx.get(getattr(dut.write, name)) for name in ("addr", "data", "mask"))
                for byte in range(nbytes):
                    if mask >> byte & 1:
                        weight[address * nbytes + byte] = data >> (8 * byte) & 0xFF
            if ctx.get(dut.done):
                break
            index += completes
            await ctx.tick()
        else:
            raise AssertionError("the stager never finished")

    simulate(dut, testbench)
    expected = np.zeros_like(weight)
    expected[wgt_addr:wgt_addr + levels.size] = levels.reshape(-1)
    return weight, expected, outcome["held"]


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("shape", [(3, 20, 2), (10, 7, 9), (17, 13, 1), (2, 9, 25)])
def test_every_level_lands_at_its_byte(config, shape):
    rng = np.random.default_rng(sum(shape))
    wgt_addr = int(rng.integers(0, 40))
    weight, expected, _ = _stage(config, shape, wgt_addr, rng, gaps=0.5, grants=0.7)
    assert (weight == expected).all()


def test_a_new_cube_waits_for_the_drain():
    """A level every cycle and no grants for a while: the second cube's first leaf is held until the first
    cube's rows are written."""
    weight, expected, held = _stage(SMALL, (16, 16, 1), 3, np.random.default_rng(0), gaps=0.0, grants=0.2)
    assert (weight == expected).all() and held > 0
