"""The softmax stream computes golden's softmax of every row, one result a cycle in element order, from either
source buffer and either input type, the exp table in the local table's rows."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib.memory import Memory

from aipu.rtl.lut_parts.interfaces import table_rows
from aipu.rtl.lut_parts.softmax import SoftmaxStream
from aipu.sim.golden.softmax import EXP_MAX, build_softmax_table, softmax
from aipu.sim.machine.arch import LUT8_ENTRIES, Buffer, DType
from aipu.sim.machine.isa import Opcode
from aipu.sim.timing.lut import entries_per_row
from tests.rtl.configs import CONFIGS
from tests.rtl.parts import behind_buffers, command_word
from tests.rtl.simulate import simulate


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("src_buf, in_type, rows, length", [(Buffer.ACT, DType.INT8, 3, 7), (Buffer.OUT, DType.UINT8, 2, 12),
                                                            (Buffer.ACT, DType.UINT8, 1, 1)])
def test_rows_match_golden(config, src_buf, in_type, rows, length):
    rng = np.random.default_rng(rows * length)
    table = build_softmax_table(0.1) if in_type == DType.INT8 else rng.integers(1, EXP_MAX, LUT8_ENTRIES, endpoint=True)
    images = {b: rng.integers(0, 256, config.buffer(b).bytes).astype(np.uint8) for b in (Buffer.ACT, Buffer.OUT)}
    src_addr, multiplier, shift, zero_point, qmin, qmax = 9, 40000, 3, -5, -128, 120
    dut = SoftmaxStream(config)
    results = []

    async def testbench(ctx):
        ctx.set(dut.command.as_value(), command_word(
            config, Opcode.SOFTMAX, src_buf=src_buf, src_addr=src_addr, rows=rows, length=length, in_type=in_type,
            out_type=DType.INT8, multiplier=multiplier, shift=shift, out_zero_point=zero_point, qmin=qmin, qmax=qmax))
        ctx.set(dut.begin, 1)
        await ctx.tick()
        ctx.set(dut.begin, 0)
        for _ in range(3 * rows * length + 40):
            if ctx.get(dut.valid):
                results.append((ctx.get(dut.result), ctx.get(dut.last)))
            await ctx.tick()

    m = Module()
    m.submodules.sources = behind_buffers(dut, {"act_read": images[Buffer.ACT], "out_read": images[Buffer.OUT]})
    per_row = entries_per_row(config) // 2                  # exp entries per table row
    padded = np.zeros(table_rows(config) * per_row, np.int64)
    padded[:LUT8_ENTRIES] = table
    m.submodules.table = memory = Memory(shape=len(dut.lookup_data), depth=table_rows(config), init=[
        sum(int(e) << (32 * i) for i, e in enumerate(padded[r * per_row:(r + 1) * per_row]))
        for r in range(table_rows(config))])
    lookup = memory.read_port()
    m.d.comb += [lookup.addr.eq(dut.lookup_addr), dut.lookup_data.eq(lookup.data)]
    simulate(m, testbench)

    x = images[src_buf][src_addr:src_addr + rows * length].view(np.int8 if in_type == DType.INT8 else np.uint8)
    expected = softmax(x.reshape(rows, length), np.asarray(table, np.uint32), multiplier=multiplier, shift=shift,
                       out_zero_point=zero_point, qmin=qmin, qmax=qmax, out_dtype=np.int8)
    assert [value for value, _ in results] == (expected.reshape(-1).astype(np.int64) & 0xFFFF).tolist()
    assert [last for _, last in results] == [0] * (rows * length - 1) + [1]
