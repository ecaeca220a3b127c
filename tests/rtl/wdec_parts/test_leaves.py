"""The leaf walk visits the CTUs in stream order and each CU's leaves in the codec's Morton order
(codec.npu_profile.morton_leaves), one skip per candidate outside the CU."""
from __future__ import annotations

import pytest

from aipu.codec.npu_profile import SPLIT_FLAG_MIN_CU, morton_leaves
from aipu.rtl.wdec_parts.leaves import LeafWalk
from aipu.sim.machine.arch import DEFAULT
from tests.rtl.simulate import simulate


def _expected(out_c: int, in_c: int, k_h: int, k_w: int, ctu_size: int) -> list:
    """Per CTU: (split_flag coded, its leaves as (kernel, tap, channel) or None per skip)."""
    ctus = []
    for c0 in range(0, in_c, ctu_size):
        for k0 in range(0, out_c, ctu_size):
            height, width = min(ctu_size, in_c - c0), min(ctu_size, out_c - k0)
            leaves = [None if leaf is None else (k0 + leaf[2], leaf[0], c0 + leaf[1])
                      for leaf in morton_leaves(k_h * k_w, height, width)]
            ctus.append((height > SPLIT_FLAG_MIN_CU or width > SPLIT_FLAG_MIN_CU, leaves))
    return ctus


def _walked(out_c: int, in_c: int, k_h: int, k_w: int, ctu_size_idx: int) -> list:
    dut = LeafWalk(DEFAULT)
    ctus = []

    async def testbench(ctx):
        for name, value in dict(out_c=out_c, in_c=in_c, k_h=k_h, k_w=k_w, ctu_size_idx=ctu_size_idx).items():
            ctx.set(getattr(dut, name), value)
        ctx.set(dut.begin, 1)
        await ctx.tick()
        ctx.set(dut.begin, 0)
        assert ctx.get(dut.taps) == k_h * k_w
        while True:
            ctx.set(dut.first_leaf, 1)
            await ctx.tick()
            ctx.set(dut.first_leaf, 0)
            leaves = []
            while not ctx.get(dut.cu_end):
                step = dut.skip if ctx.get(dut.outside) else dut.next_leaf
                leaves.append(None if step is dut.skip else
                              tuple(ctx.get(part) for part in (dut.kernel, dut.tap, dut.channel)))
                ctx.set(step, 1)
                await ctx.tick()
                ctx.set(step, 0)
            ctus.append((bool(ctx.get(dut.split_coded)), leaves))
            if ctx.get(dut.last_ctu):
                return
            ctx.set(dut.next_ctu, 1)
            await ctx.tick()
            ctx.set(dut.next_ctu, 0)

    simulate(dut, testbench)
    return ctus


@pytest.mark.parametrize("out_c,in_c,k_h,k_w,ctu_size_idx", [(3, 5, 3, 3, 0), (20, 3, 1, 1, 2), (5, 17, 2, 3, 2),
                                                             (9, 9, 1, 5, 3), (1, 1, 15, 15, 0)])
def test_ctus_and_leaves_in_the_codecs_order(out_c, in_c, k_h, k_w, ctu_size_idx):
    assert _walked(out_c, in_c, k_h, k_w, ctu_size_idx) == _expected(out_c, in_c, k_h, k_w, 64 >> ctu_size_idx)
