"""The element fetch hands each lane its element, group after group, from either source buffer at any byte
address, and stages each group's output bytes; the last group is the command's remainder."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.lut_parts.fetch import ElementFetch
from aipu.sim.machine.arch import DTYPE_BYTES, Buffer, DType
from aipu.sim.machine.isa import Opcode
from aipu.sim.timing.lut import group_elements
from tests.rtl.configs import CONFIGS
from tests.rtl.parts import behind_buffers, command_word
from tests.rtl.simulate import simulate

CASES = [(Buffer.ACT, DType.INT8, DType.INT8, 0, 40), (Buffer.OUT, DType.UINT8, DType.INT16, 5, 23),
         (Buffer.ACT, DType.INT16, DType.INT8, 6, 17), (Buffer.OUT, DType.INT16, DType.INT16, 3, 1)]


def _log2(value: int) -> int:
    return value.bit_length() - 1


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("src_buf, in_type, out_type, src_addr, count", CASES)
def test_each_lane_gets_its_element(config, src_buf, in_type, out_type, src_addr, count):
    dut = ElementFetch(config)
    group = group_elements(config, src_buf, in_type, out_type)
    images = {buffer: np.random.default_rng(buffer).integers(0, 256, config.buffer(buffer).bytes).astype(np.uint8)
              for buffer in (Buffer.ACT, Buffer.OUT)}
    size = DTYPE_BYTES[in_type]
    elements = images[src_buf][src_addr:src_addr + count * size].view(np.int16 if size == 2 else np.uint8)
    seen, staged = [], []

    async def testbench(ctx):
        ctx.set(dut.command.as_value(), command_word(config, Opcode.LUT, src_buf=src_buf, src_addr=src_addr,
                                                     count=count, in_type=in_type, out_type=out_type))
        for name, value in dict(from_out=src_buf == Buffer.OUT, source_log2=_log2(config.buffer(src_buf).port_bytes),
                                in_log2=_log2(size), out_log2=_log2(DTYPE_BYTES[out_type]),
                                group_log2=_log2(group)).items():
            ctx.set(getattr(dut.operands, name), value)
        ctx.set(dut.begin, 1)
        await ctx.tick()
        ctx.set(dut.begin, 0)
        for hold in (0, 1):                                  # the prologue's two reads
            ctx.set(dut.prime, 1)
            ctx.set(dut.prime_hold, hold)
            await ctx.tick()
        ctx.set(dut.prime, 0)
        ctx.set(dut.advance, 1)
        last = False
        while not last:
            last = ctx.get(dut.last_group)
            seen.append([ctx.get(lane) for lane in (dut.sample if size == 2 else dut.raw)])
            await ctx.tick()
            staged.append((ctx.get(dut.staged_valid), ctx.get(dut.staged_last), ctx.get(dut.staged_bytes)))
        ctx.set(dut.advance, 0)
        await ctx.tick()
        assert not ctx.get(dut.staged_valid)

    simulate(behind_buffers(dut, {"act_read": images[Buffer.ACT], "out_read": images[Buffer.OUT]}), testbench)
    assert len(seen) == -(-count // group)
    for g, lanes in enumerate(seen):
        taken = elements[g * group:(g + 1) * group]
        assert lanes[:len(taken)] == taken.astype(np.int64).tolist()
        assert staged[g] == (1, g == len(seen) - 1, len(taken) * DTYPE_BYTES[out_type])
