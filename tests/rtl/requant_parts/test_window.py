"""The OUT window writes every element's low out_type nibbles at its place (INT4: two a byte, the even element
low), whole words and the last partial one with a byte mask, and nothing else, for any out_addr and a group
start inside a word."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.requant_parts.window import OutputWindow
from aipu.sim.machine.arch import BYTE_TYPES, DTYPE_BITS, DTYPE_NUMPY, Buffer, DType, dtype_bounds, pack_int4
from aipu.sim.machine.isa import Opcode
from aipu.sim.timing.requant import RequantGeometry
from tests.rtl.configs import CONFIGS
from tests.rtl.parts import WrittenImage, command_word
from tests.rtl.simulate import simulate


TYPES = (*BYTE_TYPES, DType.INT4)


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("out_type", TYPES, ids=[t.name for t in TYPES])
@pytest.mark.parametrize("lead, count, out_addr", [(0, 16, 0), (3, 21, 5), (1, 2, 31), (2, 1, 6)])
def test_elements_land_at_their_bytes(config, out_type, lead, count, out_addr):
    dut = OutputWindow(config)
    lanes, nibbles = RequantGeometry.of(config).lanes, DTYPE_BITS[out_type] // 4
    lead %= lanes                                       # lanes of the first group before the command's first entry
    count += count % 2 if out_type == DType.INT4 else 0     # INT4 outputs fill whole bytes
    values = np.random.default_rng(count).integers(*dtype_bounds(out_type), count, endpoint=True)
    image = WrittenImage(dut.out_write, config.buffer(Buffer.OUT).bytes)

    async def testbench(ctx):
        ctx.set(dut.command.as_value(), command_word(config, Opcode.REQUANT, out_addr=out_addr, out_type=out_type))
        ctx.set(dut.begin, 1)
        await ctx.tick()
        ctx.set(dut.begin, 0)
        for first in range(-lead, count, lanes):
            indices = [first + j for j in range(lanes)]
            ctx.set(dut.valid, 1)
            ctx.set(dut.group_nibble, 2 * out_addr + first * nibbles)
            ctx.set(dut.in_tile, sum(1 << j for j, k in enumerate(indices) if 0 <= k < count))
            for lane, k in zip(dut.value, indices):
                ctx.set(lane, int(values[k]) if 0 <= k < count else 0x5A5A - 0x10000)
            image.sample(ctx)
            await ctx.tick()
        ctx.set(dut.valid, 0)
        image.sample(ctx)
        await ctx.tick()
        ctx.set(dut.flush, 1)
        image.sample(ctx)
        await ctx.tick()

    simulate(dut, testbench)
    expected = np.zeros_like(image.bytes)
    stored = pack_int4(values) if out_type == DType.INT4 else values.astype(DTYPE_NUMPY[out_type]).view(np.uint8)
    expected[out_addr:out_addr + stored.size] = stored
    assert np.array_equal(image.bytes, expected)
    port_bytes = config.buffer(Buffer.OUT).port_bytes
    assert image.writes == (out_addr + stored.size - 1) // port_bytes - out_addr // port_bytes + 1
