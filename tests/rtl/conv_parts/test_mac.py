"""The MAC array: weight columns into either bank, then each pixel's sums are numpy's (x - zp) @ W + old,
wrapped to int32, from the bank the pixel names, or without ``old`` when the block overwrites: with int8 weights
(split into each cell's two halves) and with INT4 weights (two a cell, over twice the input channels)."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.conv_parts.mac import MacArray
from aipu.sim.machine.arch import DType, unpack_int4
from tests.rtl.configs import CONFIGS
from tests.rtl.simulate import simulate


def _pack(values, bits: int) -> int:
    return sum((int(v) & ((1 << bits) - 1)) << (bits * i) for i, v in enumerate(values))


def _halves(weights: np.ndarray, int4: bool) -> np.ndarray:
    """A column's operands as the loader hands them: two per cell."""
    if int4:
        return weights
    return np.stack([weights & 15, weights >> 4], axis=-1).reshape(*weights.shape[:-1], -1)


def _channels(x: np.ndarray, in_type: DType) -> np.ndarray:
    """The run's input channels: its bytes as int8 or uint8, or its nibbles as INT4."""
    if in_type == DType.INT4:
        return unpack_int4(x).astype(np.int64)
    return (x.view(np.int8) if in_type == DType.INT8 else x).astype(np.int64)


@pytest.mark.parametrize("name", ["small", "mac8x16"])
@pytest.mark.parametrize("w_type", [DType.INT8, DType.INT4], ids=["int8", "int4"])
def test_sums_of_either_bank(name, w_type):
    config = CONFIGS[name]
    rows, cols = config.mac.rows, config.mac.cols
    int4 = w_type == DType.INT4
    dut = MacArray(config)
    rng = np.random.default_rng(rows * cols)
    # weight operands w - w_zero_point: one a cell, or two INT4 ones a cell
    banks = rng.integers(-15, 16, size=(2, cols, 2 * rows)) if int4 else rng.integers(-255, 256, size=(2, cols, rows))
    types = [DType.INT8, DType.UINT8, DType.INT4] if int4 else [DType.INT8, DType.UINT8]

    async def testbench(ctx):
        ctx.set(dut.int4_weights, int4)
        ctx.set(dut.column.valid, 1)
        for bank in range(2):
            for col in range(cols):
                ctx.set(dut.column.bank, bank)
                ctx.set(dut.column.col, col)
                ctx.set(dut.column.halves.as_value(), _pack(_halves(banks[bank, col], int4), 5))
                await ctx.tick()
        ctx.set(dut.column.valid, 0)
        for case in range(18):
            bank, overwrites, in_type = case % 2, case % 3 == 0, types[case // 2 % len(types)]
            low, high = {DType.INT8: (-128, 127), DType.UINT8: (0, 255), DType.INT4: (-8, 7)}[in_type]
            zero_point = int(rng.integers(low, high + 1))
            x = rng.integers(0, 256, size=2 * rows, dtype=np.uint8)
            old = rng.integers(-2**31, 2**31, size=cols, dtype=np.int64)
            channels = _channels(x, in_type)[:banks.shape[2]]
            dot = banks[bank] @ (channels - zero_point)
            expected = (dot + (0 if overwrites else old)).astype(np.int32)       # wraps like the register
            for field, value in dict(in_type=in_type.value, in_zero_point=zero_point).items():
                ctx.set(getattr(dut, field), value)
            for field, value in dict(x=_pack(x, 8), old=_pack(old, 32), bank=bank, overwrites=overwrites).items():
                ctx.set(getattr(dut.operands, field), value)
            assert ctx.get(dut.sums) == _pack(expected, 32), f"case {case}"

    simulate(dut, testbench)
