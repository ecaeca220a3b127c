"""WDEC's arbiters alone: reads round robin with every answer back at its requester, in order, whatever the
DRAM's stalls and latencies; levels onto the WEIGHT port one a cycle, round robin, the winner granted."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.wdec_parts.arbiters import ReadArbiter, WriteArbiter
from tests.rtl.configs import SMALL
from tests.rtl.simulate import simulate


def _round_robin(requests: list[int], pointer: int) -> int | None:
    """The model: the first requester from ``pointer`` on, wrapping."""
    n = len(requests)
    return next(((pointer + offset) % n for offset in range(n) if requests[(pointer + offset) % n]), None)


@pytest.mark.parametrize("seed", range(3))
def test_reads_go_round_robin_and_answers_come_back_to_their_requester(seed):
    rng = np.random.default_rng(seed)
    requesters = 3
    dut = ReadArbiter(SMALL, requesters, in_flight=16)
    wanted = [[int(a) for a in rng.integers(0, 1 << 12, size=8)] for _ in range(requesters)]
    received = [[] for _ in range(requesters)]

    async def testbench(ctx):
        pointer, answers, last_due = 0, {}, 0
        sent = [0] * requesters
        for cycle in range(400):
            requests = [int(sent[i] < len(wanted[i]) and rng.random() < 0.7) for i in range(requesters)]
            for i, reader in enumerate(dut.readers):
                ctx.set(reader.valid, requests[i])
                ctx.set(reader.addr, wanted[i][sent[i]] if sent[i] < len(wanted[i]) else 0)
            ready = int(rng.random() < 0.8)
            ctx.set(dut.dram_read.ready, ready)
            due = answers.pop(cycle, None)
            ctx.set(dut.dram_read.data_valid, due is not None)
            ctx.set(dut.dram_read.data, due or 0)
            for i, reader in enumerate(dut.readers):
                if ctx.get(reader.data_valid):
                    received[i].append(ctx.get(reader.data))
            winner = _round_robin(requests, pointer)
            granted = [ctx.get(reader.ready) & requests[i] for i, reader in enumerate(dut.readers)]
            assert granted == [int(ready and i == winner) for i in range(requesters)]
            if ready and winner is not None:
                assert ctx.get(dut.dram_read.addr) == wanted[winner][sent[winner]]
                sent[winner] += 1
                pointer = (winner + 1) % requesters
                last_due = max(cycle + int(rng.integers(1, 6)), last_due + 1)     # in request order, any latency
                answers[last_due] = ctx.get(dut.dram_read.addr)
            await ctx.tick()

    simulate(dut, testbench)
    assert received == wanted


def test_levels_take_turns_at_the_weight_port():
    rng = np.random.default_rng(4)
    writers = 4
    dut = WriteArbiter(SMALL, writers)

    async def testbench(ctx):
        pointer = 0
        for cycle in range(200):
            pending = [int(rng.random() < 0.6) for _ in range(writers)]
            ctx.set(dut.pending, sum(bit << i for i, bit in enumerate(pending)))
            for i, write in enumerate(dut.writes):
                ctx.set(write.addr, 10 * i + cycle % 7)
                ctx.set(write.data, i + 1)
                ctx.set(write.mask, 1 << (i % 4))
            winner = _round_robin(pending, pointer)
            assert ctx.get(dut.grant) == (0 if winner is None else 1 << winner)
            assert ctx.get(dut.weight_write.en) == int(winner is not None)
            if winner is not None:
                assert ctx.get(dut.weight_write.addr) == 10 * winner + cycle % 7
                assert ctx.get(dut.weight_write.data) == winner + 1
                pointer = (winner + 1) % writers
            await ctx.tick()

    simulate(dut, testbench)
