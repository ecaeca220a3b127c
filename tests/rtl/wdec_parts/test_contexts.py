"""The context memory reads every context as the software's context model (codec/reference/engine.py) after
the same updates, in the cycle after each update, and as fresh after ``clear``."""
from __future__ import annotations

import numpy as np

from aipu.codec.reference.engine import LG_PMPS_INIT, ContextModels
from aipu.rtl.wdec_parts.contexts import ContextMemory
from tests.rtl.simulate import simulate


def test_updates_follow_update_ctx_and_clear_makes_contexts_fresh():
    rng = np.random.default_rng(4)
    dut = ContextMemory()
    model = ContextModels()
    indices = (0, 1, 9, 250, 689)
    seen = []

    async def testbench(ctx):
        for step in range(600):
            index = int(rng.choice(indices))
            skewed = index in (9, 250)      # mostly one value: lgPmps wanders far, the MPS flips back and forth
            bin_ = int(rng.random() < (0.95 if skewed else 0.5)) ^ (step // 100) % 2
            update = int(rng.random() < 0.9)
            ctx.set(dut.port.index, index)
            mps, _, lg = model.state(index)
            assert (ctx.get(dut.port.mps), ctx.get(dut.port.lg)) == (mps, lg), f"step {step}, context {index}"
            seen.append((mps, lg))
            ctx.set(dut.port.bin, bin_)
            ctx.set(dut.port.update, update)
            await ctx.tick()
            if update:
                model.update(index, bin_)
        ctx.set(dut.port.update, 0)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        for index in indices:
            ctx.set(dut.port.index, index)
            assert (ctx.get(dut.port.mps), ctx.get(dut.port.lg)) == (0, LG_PMPS_INIT)

    simulate(dut, testbench)
    assert len({state for state in seen}) > 50 and {mps for mps, _ in seen} == {0, 1}
