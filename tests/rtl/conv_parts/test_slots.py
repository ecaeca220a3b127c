"""The slot operands squeeze a tap's run into ACC order: the bytes of the positions that are outputs, in order,
``channels`` to a position, each slot with kernel byte ``slot mod channels`` minus the weight zero point."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.conv_parts.slots import SlotOperands
from aipu.sim.machine.arch import DType
from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.program import Command
from tests.rtl.configs import CONFIGS
from tests.rtl.conv_parts.model import command_word
from tests.rtl.simulate import simulate


def _dwconv(channels: int, w_zero_point: int) -> Command:
    return Command.make(Opcode.DWCONV, in_addr=0, in_h=1, in_w=1, channels=channels, in_type=DType.INT8,
                        in_zero_point=0, wgt_addr=0, w_zero_point=w_zero_point, k_h=1, k_w=1, stride_h=1,
                        stride_w=1, dilation_h=1, dilation_w=1, acc_addr=0, accumulate=0)


@pytest.mark.parametrize("name", ["small", "mac8x16"])      # DEFAULT's 256 slots: tests/rtl/test_conv.py
def test_kept_positions_fill_the_slots_in_order(name):
    config = CONFIGS[name]
    rows, cols = config.mac.rows, config.mac.cols
    dut = SlotOperands(config)
    rng = np.random.default_rng(rows + cols)

    async def testbench(ctx):
        for _ in range(12):
            channels, w_zero_point = int(rng.integers(1, rows + 1)), int(rng.integers(-128, 128))
            kept = rng.random(cols) < rng.choice([0.3, 0.7, 1.0])
            run = rng.integers(0, 256, size=rows * cols, dtype=np.uint8)
            kernel = rng.integers(-128, 128, size=rows).astype(np.int8)
            ctx.set(dut.command.as_value(), command_word(config, _dwconv(channels, w_zero_point)))
            ctx.set(dut.tap.run, int.from_bytes(run.tobytes(), "little"))
            ctx.set(dut.tap.kernel, int.from_bytes(kernel.tobytes(), "little"))
            ctx.set(dut.tap.kept, sum(1 << j for j in range(cols) if kept[j]))
            for j in range(cols):
                ctx.set(dut.tap.skip[j], channels * int(np.sum(~kept[:j])))
            expected = np.concatenate([run[j * channels:(j + 1) * channels] for j in range(cols) if kept[j]]
                                      or [np.zeros(0, np.uint8)])
            x = ctx.get(dut.operands.x).to_bytes(rows * cols, "little")
            assert bytes(x[:len(expected)]) == expected.tobytes(), (channels, kept)
            for e in range(rows * cols):
                assert ctx.get(dut.operands.w[e]) == int(kernel[e % channels]) - w_zero_point

    simulate(dut, testbench)
