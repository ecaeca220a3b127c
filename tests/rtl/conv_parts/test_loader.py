"""The loader hands the MAC array each column of a block: ``rows`` weights of its output channel minus the
zero point, 0 outside its group's rows, into the bank the streaming block does not use."""
from __future__ import annotations

import numpy as np

from aipu.rtl.conv_parts.loader import WeightLoader
from aipu.sim.cosim.stimulus.conv import random_conv
from aipu.sim.machine.arch import Buffer
from aipu.sim.timing.conv import ConvTiming
from tests.rtl.configs import EVERY_CONFIG
from tests.rtl.conv_parts.buffers import ReadPorts, run_bytes, tick
from tests.rtl.conv_parts.model import blocks_of, geometry_of, set_members
from tests.rtl.simulate import simulate


def _expected_columns(config, command, block, weight: np.ndarray) -> list[list[int]]:
    geometry = geometry_of(config, command)
    columns = []
    for j in range(block["cols"]):      # the block's columns: the loader reads no weights for the others
        row_lo = j // geometry["group_out"] * geometry["group_in"]     # its group's rows on the diagonal
        start = block["weights"] + j * geometry["weights_per_out_channel"] - row_lo
        run = run_bytes(weight, start, config.mac.rows).view(np.int8).astype(int) - command.args["w_zero_point"]
        columns.append([int(run[r]) if row_lo <= r < row_lo + block["rows"] else 0 for r in range(config.mac.rows)])
    return columns


@EVERY_CONFIG
def test_the_columns_of_the_first_blocks(config):
    rng = np.random.default_rng(config.mac.cols + 3)
    cycles = config.mac.cols * ConvTiming.of(config).weight_beats
    weight = rng.integers(0, 256, size=config.buffer(Buffer.WEIGHT).bytes, dtype=np.uint8)
    for _ in range(4):
        command = random_conv(config, rng)
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
                                    [ctx.get(dut.column.operands[r]) for r in range(config.mac.rows)]))
                    await tick(ctx, ports)

        simulate(dut, testbench)
        expected = [(index, 1 - index % 2, j, column) for index, block in enumerate(blocks)
                    for j, column in enumerate(_expected_columns(config, command, block, weight))]
        assert got == expected, command
