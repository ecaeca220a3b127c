"""The context memory reads every context as the software's context model (codec/reference/engine.py) after
the same updates, in the cycle after each update, on every port with its bank rotation, and as fresh after
``clear``."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.codec.reference.engine import LG_PMPS_INIT, ContextModels
from aipu.rtl.wdec_parts.contexts import ContextMemory
from tests.rtl.simulate import simulate

INDICES = (0, 1, 9, 250, 689, 42, 43, 130, 131, 500, 501, 502)


@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_updates_follow_update_ctx_and_clear_makes_contexts_fresh(lanes):
    """Context c lives in bank c mod lanes (the test's choice; WDEC's is a leaf bin's position): each cycle a
    random rotation, and on port j a context of bank (rotation + j) mod lanes."""
    rng = np.random.default_rng(4)
    dut = ContextMemory(lanes)
    model = ContextModels()
    banks = [[index for index in INDICES if index % lanes == bank] for bank in range(lanes)]
    seen = []

    async def testbench(ctx):
        for step in range(600 // lanes):
            rotation = int(rng.integers(lanes))
            ctx.set(dut.rotation, rotation)
            updates = []
            for lane, port in enumerate(dut.ports):
                index = int(rng.choice(banks[(rotation + lane) % lanes]))
                skewed = index in (9, 250, 43)      # mostly one value: lgPmps wanders, the MPS flips back and forth
                bin_ = int(rng.random() < (0.95 if skewed else 0.5)) ^ (step // 100) % 2
                update = int(rng.random() < 0.9)
                ctx.set(port.index, index)
                mps, _, lg = model.state(index)
                assert (ctx.get(port.mps), ctx.get(port.lg)) == (mps, lg), f"step {step}, context {index}"
                seen.append((mps, lg))
                ctx.set(port.bin, bin_)
                ctx.set(port.update, update)
                updates += [(index, bin_)] * update
            await ctx.tick()
            for index, bin_ in updates:
                model.update(index, bin_)
        for port in dut.ports:
            ctx.set(port.update, 0)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        for index in INDICES:
            port = dut.ports[0]
            ctx.set(dut.rotation, (index % lanes))
            ctx.set(port.index, index)
            assert (ctx.get(port.mps), ctx.get(port.lg)) == (0, LG_PMPS_INIT)

    simulate(dut, testbench)
    assert len({state for state in seen}) > 50 and {mps for mps, _ in seen} == {0, 1}
