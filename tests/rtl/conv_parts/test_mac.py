"""The MAC array: weight columns into either bank, then each pixel's sums are numpy's (x - zp) @ W + old,
wrapped to int32, from the bank the pixel names, or without ``old`` when the block overwrites."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.conv_parts.mac import MacArray
from aipu.sim.machine.arch import DType
from tests.rtl.configs import CONFIGS
from tests.rtl.simulate import simulate


def _pack(values, bits: int) -> int:
    return sum((int(v) & ((1 << bits) - 1)) << (bits * i) for i, v in enumerate(values))


@pytest.mark.parametrize("name", ["small", "mac8x16"])
def test_sums_of_either_bank(name):
    config = CONFIGS[name]
    rows, cols = config.mac.rows, config.mac.cols
    dut = MacArray(config)
    rng = np.random.default_rng(rows * cols)
    banks = rng.integers(-255, 256, size=(2, cols, rows))        # weight operands: w - w_zero_point

    async def testbench(ctx):
        ctx.set(dut.column.valid, 1)
        for bank in range(2):
            for col in range(cols):
                ctx.set(dut.column.bank, bank)
                ctx.set(dut.column.col, col)
                ctx.set(dut.column.operands.as_value(), _pack(banks[bank, col], 9))
                await ctx.tick()
        ctx.set(dut.column.valid, 0)
        for case in range(12):
            bank, overwrites = case % 2, case % 3 == 0
            in_type = DType.INT8 if case % 4 < 2 else DType.UINT8
            zero_point = int(rng.integers(-128, 128) if in_type == DType.INT8 else rng.integers(0, 256))
            x = rng.integers(0, 256, size=rows, dtype=np.uint8)
            old = rng.integers(-2**31, 2**31, size=cols, dtype=np.int64)
            values = x.view(np.int8) if in_type == DType.INT8 else x
            dot = banks[bank] @ (values.astype(np.int64) - zero_point)
            expected = (dot + (0 if overwrites else old)).astype(np.int32)       # wraps like the register
            for field, value in dict(in_type=in_type.value, in_zero_point=zero_point).items():
                ctx.set(getattr(dut, field), value)
            for field, value in dict(x=_pack(x, 8), old=_pack(old, 32), bank=bank, overwrites=overwrites).items():
                ctx.set(getattr(dut.operands, field), value)
            assert ctx.get(dut.sums) == _pack(expected, 32), f"case {case}"

    simulate(dut, testbench)
