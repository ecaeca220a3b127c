"""The parts header alone: the K u32 lengths at any byte offset, from as many DRAM words as hold them."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.wdec_parts.header import PartsHeader
from aipu.sim.machine.arch import hardware_config_from_dict
from tests.rtl.configs import CONFIGS, wdec_cascade
from tests.rtl.simulate import simulate


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("seed", range(2))
def test_lengths_at_any_offset(config, seed):
    rng = np.random.default_rng(seed)
    engines = 5
    config = wdec_cascade(config, 1, engines)
    nbytes, latency = config.dram.bytes_per_cycle, config.dram.latency_cycles
    dram = rng.integers(0, 256, size=256, dtype=np.uint8)
    dram_addr, parts = int(rng.integers(0, 64)), int(rng.integers(2, engines + 1))
    dut = PartsHeader(config)
    outcome = {}

    async def testbench(ctx):
        ctx.set(dut.dram_addr, dram_addr)
        ctx.set(dut.parts, parts)
        ctx.set(dut.begin, 1)
        await ctx.tick()
        ctx.set(dut.begin, 0)
        answers, requested = {}, []
        for cycle in range(200):
            due = answers.pop(cycle, None)
            ctx.set(dut.dram_read.data_valid, due is not None)
            word = 0 if due is None else int.from_bytes(dram[due * nbytes:(due + 1) * nbytes].tobytes(), "little")
            ctx.set(dut.dram_read.data, word)
            ctx.set(dut.dram_read.ready, 1)
            if ctx.get(dut.complete):
                outcome["complete"] = cycle
            if ctx.get(dut.dram_read.valid):
                requested.append(cycle)
                answers[cycle + latency] = ctx.get(dut.dram_read.addr)
            await ctx.tick()
            if "complete" in outcome:
                break
        outcome["lengths"] = [ctx.get(length) for length in dut.lengths][:parts]
        outcome["requested"] = requested

    simulate(dut, testbench)
    words = (dram_addr + 4 * parts - 1) // nbytes - dram_addr // nbytes + 1
    assert outcome["requested"] == list(range(words))                    # back to back from the first cycle
    assert outcome["complete"] == words - 1 + latency                    # the last word's answer
    expected = [int.from_bytes(dram[dram_addr + 4 * i:dram_addr + 4 * i + 4].tobytes(), "little") for i in range(parts)]
    assert outcome["lengths"] == expected
