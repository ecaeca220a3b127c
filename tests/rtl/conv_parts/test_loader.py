"""The loader hands the MAC array each column of a block: ``rows`` bytes of its output channel's weights minus the
zero point, as each cell's two multiplier operands (an int8 weight split, or two INT4 weights), 0 outside its
group's cells, into the bank the streaming block does not use."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.conv_parts.loader import WeightLoader
from aipu.sim.cosim.stimulus.conv import random_conv
from aipu.sim.machine.arch import Buffer, DType, unpack_int4
from aipu.sim.timing.conv import ConvTiming
from tests.rtl.configs import EVERY_CONFIG
from tests.rtl.conv_parts.buffers import ReadPorts, run_bytes, tick
from tests.rtl.conv_parts.model import blocks_of, geometry_of, set_members
from tests.rtl.simulate import simulate


def _halves(byte: int, int4: bool, zero_point: int) -> tuple[int, int]:
    """A cell's two multiplier operands from its weight byte (docs/arithmetic.md D23)."""
    if int4:
        return tuple(int(unpack_int4(np.array([byte], np.uint8))[i]) - zero_point for i in range(2))
    weight = int(np.array([byte], np.uint8).view(np.int8)[0]) - zero_point
    return weight & 15, weight >> 4


def _expected_columns(config, command, block, weight: np.ndarray) -> list[list[int]]:
    geometry, zero_point = geometry_of(config, command), command.args["w_zero_point"]
    int4 = bool(geometry["int4_weights"])
    per_byte = 2 if int4 else 1
    columns = []
    for j in range(block["cols"]):      # the block's columns: the loader reads no weights for the others
        row_lo = j // geometry["group_out"] * geometry["group_in"] // per_byte    # its group's cells on the diagonal
        start = block["weights"] + j * geometry["weights_per_out_channel"] - row_lo
        run = run_bytes(weight, start, config.mac.rows)
        cells = [_halves(int(run[r]), int4, zero_point) if row_lo <= r < row_lo + block["rows"] // per_byte
                 else (0, 0) for r in range(config.mac.rows)]
        columns.append([half for cell in cells for half in cell])
    return columns


@EVERY_CONFIG
@pytest.mark.parametrize("w_type", [DType.INT8, DType.INT4], ids=["int8", "int4"])
def test_the_columns_of_the_first_blocks(config, w_type):
    rng = np.random.default_rng(config.mac.cols + 3)
    cycles = config.mac.cols * ConvTiming.of(config).weight_beats
    weight = rng.integers(0, 256, size=config.buffer(Buffer.WEIGHT).bytes, dtype=np.uint8)
    for _ in range(4):
        command = random_conv(config, rng, w_type=w_type)
        dut = WeightLoader(config)
        ports = ReadPorts(weight, config.buffer(Buffer.WEIGHT).port_bytes, dut.weight_read, dut.weight_read_b)
        blocks = blocks_of(config, command)[:3]
        got = []

        async def testbench(ctx):
            set_members(ctx, dut.geometry, geometry_of(config, command))
            ctx.set(dut.w_zero_point, command.args["w_zero_point"])
            for index, block in enumerate(blocks):
                set_members(ctx, dut.block, {"weights": block["weights"], "rows": block["rows"], "cols": block["cols"]})
                ctx.set(dut.phase.bank, index % 2)
                ctx.set(dut.phase.begin if index == 0 else dut.phase.boundary, 1)
                await tick(ctx, ports)
                set_members(ctx, dut.phase, {"begin": 0, "boundary": 0, "loading": 1})
                for cycle in range(cycles + 2):
                    if cycle == cycles:
                        ctx.set(dut.phase.loading, 0)
                    if ctx.get(dut.column.valid) and ctx.get(dut.column.col) < block["cols"]:
                        got.append((index, ctx.get(dut.column.bank), ctx.get(dut.column.col),
                                    [ctx.get(dut.column.halves[h]) for h in range(2 * config.mac.rows)]))
                    await tick(ctx, ports)

        simulate(dut, testbench)
        expected = [(index, 1 - index % 2, j, column) for index, block in enumerate(blocks)
                    for j, column in enumerate(_expected_columns(config, command, block, weight))]
        assert got == expected, command
