"""The fetcher hands on the stream's DRAM words in order, each once, requesting back to back while the DRAM
and the window keep up, whatever the DRAM's and the window's stalls."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.wdec_parts.fetcher import WordFetcher
from tests.rtl.configs import CONFIGS, SMALL
from tests.rtl.simulate import simulate


def _fetch(config, dram_addr: int, length: int, rng, stall: float) -> tuple[list[int], list[int], bool]:
    """(words handed on, cycles of the requests taken, drained at the end) of one stream."""
    dut = WordFetcher(config)
    nbytes, latency = config.dram.bytes_per_cycle, config.dram.latency_cycles
    memory = {}
    handed, requested, outcome = [], [], {}

    def word(address: int) -> int:
        return memory.setdefault(address, int(rng.integers(0, 1 << 62)) % (1 << (8 * nbytes)))

    async def testbench(ctx):
        ctx.set(dut.span.dram_addr, dram_addr)
        ctx.set(dut.span.length, length)
        ctx.set(dut.span.begin, 1)
        await ctx.tick()
        ctx.set(dut.span.begin, 0)
        responses = {}
        total = (dram_addr + length - 1) // nbytes - dram_addr // nbytes + 1
        for cycle in range(20 * total + 4 * latency):
            ctx.set(dut.dram_read.ready, int(rng.random() >= stall))
            ctx.set(dut.words.ready, int(rng.random() >= stall))
            due = responses.pop(cycle, None)
            ctx.set(dut.dram_read.data_valid, due is not None)
            ctx.set(dut.dram_read.data, word(due) if due is not None else 0)
            if ctx.get(dut.dram_read.valid) and ctx.get(dut.dram_read.ready):
                requested.append(cycle)
                responses[cycle + latency] = ctx.get(dut.dram_read.addr)
            if ctx.get(dut.words.valid) and ctx.get(dut.words.ready):
                handed.append(ctx.get(dut.words.payload))
            await ctx.tick()
            if len(handed) == total and not responses:
                break
        outcome["drained"] = ctx.get(dut.drained)

    simulate(dut, testbench)
    first = dram_addr // nbytes
    assert handed == [word(first + i) for i in range(len(handed))]
    return handed, requested, outcome["drained"]


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
def test_every_word_once_in_order_back_to_back(config):
    nbytes = config.dram.bytes_per_cycle
    dram_addr, length = 3 * nbytes + 1, 40 * nbytes
    handed, requested, drained = _fetch(config, dram_addr, length, np.random.default_rng(1), stall=0.0)
    assert len(handed) == (dram_addr + length - 1) // nbytes - dram_addr // nbytes + 1 and drained
    assert requested == list(range(len(handed)))          # one request a cycle from the first cycle on


@pytest.mark.parametrize("seed", range(3))
def test_stalls_lose_and_repeat_nothing(seed):
    rng = np.random.default_rng(seed)
    nbytes = SMALL.dram.bytes_per_cycle
    dram_addr, length = int(rng.integers(0, 64)), int(rng.integers(1, 30 * nbytes))
    handed, requested, drained = _fetch(SMALL, dram_addr, length, rng, stall=0.4)
    assert len(handed) == len(requested) == (dram_addr + length - 1) // nbytes - dram_addr // nbytes + 1
    assert drained
