"""The drain writes a block's first ``entries`` slots to the ACC entries from ``acc_first`` (added to the old
ones when accumulating), two words a cycle over ``drain_beats`` cycles, leaves every other byte alone, and
says ``done`` in the last write of the last block; blocks may start every ``drain_beats`` cycles."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.conv_parts.drain import DepthwiseDrain
from aipu.sim.machine.arch import Buffer
from aipu.sim.timing.conv import DepthwiseTiming
from tests.rtl.configs import EVERY_CONFIG
from tests.rtl.simulate import simulate


def _blocks(config, rng, count: int, channels: int) -> list[tuple[int, int]]:
    """(acc_first, entries) of ``count`` blocks over disjoint ACC entries."""
    slots, room = config.mac.rows * config.mac.cols, config.buffer_units(Buffer.ACC) // count
    return [(k * room + int(rng.integers(0, room - slots)), channels * int(rng.integers(1, config.mac.cols + 1)))
            for k in range(count)]


@EVERY_CONFIG
@pytest.mark.parametrize("accumulate", [0, 1])
def test_blocks_land_at_their_entries_only(config, accumulate):
    dut = DepthwiseDrain(config)
    port_bytes, slots = config.buffer(Buffer.ACC).port_bytes, config.mac.rows * config.mac.cols
    rng = np.random.default_rng(slots + accumulate)
    channels = int(rng.integers(1, config.mac.rows + 1))
    drain_beats = DepthwiseTiming.of(config, channels, config.mac.cols).drain_beats
    acc = rng.integers(-2**31, 2**31, size=config.buffer_units(Buffer.ACC)).astype(np.int32)
    banks = rng.integers(-2**31, 2**31, size=(2, slots)).astype(np.int32)
    blocks = _blocks(config, rng, 3, channels)
    expected = acc.copy()
    for k, (first, entries) in enumerate(blocks):
        expected[first:first + entries] = (acc[first:first + entries].astype(np.int64) * accumulate
                                           + banks[k % 2, :entries]).astype(np.int32)
    memory = acc.view(np.uint8)
    done = []

    async def testbench(ctx):
        ctx.set(dut.geometry.drain_beats, drain_beats)
        ctx.set(dut.accumulate, accumulate)
        for b in range(2):
            ctx.set(getattr(dut, f"bank{b}"), int.from_bytes(banks[b].tobytes(), "little"))
        reads = {}
        for cycle in range(len(blocks) * drain_beats + 2):
            block = cycle // drain_beats
            starts = cycle % drain_beats == 0 and block < len(blocks)
            ctx.set(dut.block.start, starts)
            if starts:
                ctx.set(dut.block.bank, block % 2)
                ctx.set(dut.block.acc_first, blocks[block][0])
                ctx.set(dut.block.entries, blocks[block][1])
                ctx.set(dut.block.last, block == len(blocks) - 1)
            for name, read in reads.items():
                ctx.set(getattr(dut, name).data, int.from_bytes(memory[read:read + port_bytes].tobytes(), "little"))
            reads = {name: ctx.get(getattr(dut, name).addr) * port_bytes for name in ("acc_read", "acc_read_b")
                     if ctx.get(getattr(dut, name).en)}
            if ctx.get(dut.done):
                done.append(cycle)
            writes = [(ctx.get(port.addr) * port_bytes, ctx.get(port.data).to_bytes(port_bytes, "little"),
                       ctx.get(port.mask)) for port in (dut.acc_write, dut.acc_write_b) if ctx.get(port.en)]
            for address, data, mask in writes:
                for i in range(port_bytes):
                    if mask >> i & 1:
                        memory[address + i] = data[i]
            await ctx.tick()

    simulate(dut, testbench)
    assert np.array_equal(acc, expected)
    assert done == [len(blocks) * drain_beats + 1]
