"""The level writer puts a level's byte at wgt_addr + (kernel·taps + tap)·in_c + channel, alone in its word."""
from __future__ import annotations

import pytest

from aipu.rtl.wdec_parts.writer import LevelWriter
from aipu.sim.machine.arch import Buffer
from tests.rtl.configs import CONFIGS
from tests.rtl.simulate import simulate


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
def test_a_level_at_its_byte(config):
    dut = LevelWriter(config)
    port_bytes = config.buffer(Buffer.WEIGHT).port_bytes
    cases = [(0, 0, 0, 0x7F), (2, 5, 3, 0x80), (1, 8, 6, 0x01), (4, 0, 2, 0xFE)]      # kernel, tap, channel, level
    wgt_addr, taps, in_c = 13, 9, 7

    async def testbench(ctx):
        for name, value in dict(wgt_addr=wgt_addr, taps=taps, in_c=in_c).items():
            ctx.set(getattr(dut, name), value)
        assert not ctx.get(dut.weight_write.en)
        for kernel, tap, channel, level in cases:
            for name, value in dict(kernel=kernel, tap=tap, channel=channel, level=level, valid=1).items():
                ctx.set(getattr(dut, name), value)
            address = wgt_addr + (kernel * taps + tap) * in_c + channel
            assert ctx.get(dut.weight_write.en)
            assert ctx.get(dut.weight_write.addr) == address // port_bytes
            assert ctx.get(dut.weight_write.mask) == 1 << address % port_bytes
            assert ctx.get(dut.weight_write.data) == int.from_bytes(bytes([level]) * port_bytes, "little")

    simulate(dut, testbench)
