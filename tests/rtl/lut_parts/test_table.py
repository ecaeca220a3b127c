"""The table load copies the table at any byte address into the local table's rows, one a cycle after a
two-cycle prologue, and flags a DIRECT8 entry outside out_type or a bad exp entry (and only those); a lane's
copy of the table serves both rows a lane reads in one cycle."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.lut_parts.interfaces import table_row, table_rows
from aipu.rtl.lut_parts.table import TableCopy, TableLoad
from aipu.sim.machine.arch import SOFTMAX_EXP_BITS, Buffer
from aipu.sim.timing.lut import entries_per_row
from tests.rtl.configs import CONFIGS
from tests.rtl.parts import behind_buffers
from tests.rtl.simulate import simulate


def _load(config, image: np.ndarray, operands: dict) -> tuple[dict, bool, int]:
    """(rows written by address, entries_bad, cycles from begin to the last row)."""
    dut = TableLoad(config)
    rows, outcome = {}, {}

    async def testbench(ctx):
        for name, value in operands.items():
            ctx.set(getattr(dut.operands, name), value)
        ctx.set(dut.begin, 1)
        await ctx.tick()
        ctx.set(dut.begin, 0)
        ctx.set(dut.load, 1)
        for cycle in range(1, 2000):
            if ctx.get(dut.write_en):
                rows[ctx.get(dut.write_addr)] = ctx.get(dut.write_data)
            loaded = ctx.get(dut.loaded)
            await ctx.tick()
            if loaded:
                break
        outcome["cycles"] = cycle
        ctx.set(dut.load, 0)
        outcome["bad"] = ctx.get(dut.entries_bad)

    simulate(behind_buffers(dut, {"lut_read": image}), testbench)
    return rows, outcome["bad"], outcome["cycles"]


def _expected_rows(config, image: np.ndarray, table_addr: int, entries: int) -> dict:
    per_row = entries_per_row(config)
    table = image[table_addr:table_addr + 2 * entries].view(np.uint16).astype(np.int64)
    return {r: sum(int(e) << (16 * i) for i, e in enumerate(table[r * per_row:(r + 1) * per_row]))
            for r in range(-(-entries // per_row))}


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("table_addr, entries", [(0, 256), (7, 9), (130, 33)])
def test_rows_of_a_table_at_any_address(config, table_addr, entries):
    image = np.random.default_rng(entries).integers(0, 256, config.buffer(Buffer.LUT).bytes).astype(np.uint8)
    rows, _, cycles = _load(config, image, dict(table_addr=table_addr, entries=entries, out_min=-2 ** 15,
                                                out_max=2 ** 15 - 1))
    expected = _expected_rows(config, image, table_addr, entries)
    mask = {r: (1 << (16 * min(entries - r * entries_per_row(config), entries_per_row(config)))) - 1 for r in expected}
    assert {r: value & mask[r] for r, value in rows.items()} == expected
    assert cycles == 2 + len(expected)


@pytest.mark.parametrize("bad", [None, 0, 200, 255])
def test_a_direct8_entry_outside_out_type_is_flagged(bad):
    config = CONFIGS["small"]
    image = np.zeros(config.buffer(Buffer.LUT).bytes, np.uint8)
    table = np.random.default_rng(1).integers(-128, 128, 256).astype(np.int16)
    if bad is not None:
        table[bad] = 128
    image[2:2 + 512] = table.view(np.uint8)
    _, flagged, _ = _load(config, image, dict(table_addr=2, entries=256, out_min=-128, out_max=127))
    assert flagged == (bad is not None)


@pytest.mark.parametrize("exp_entry, value", [(None, 0), (0, 0), (1, 0), (0, 1 << SOFTMAX_EXP_BITS), (255, (1 << SOFTMAX_EXP_BITS) + 1)])
def test_a_bad_exp_entry_is_flagged(exp_entry, value):
    config = CONFIGS["default"]
    exps = np.random.default_rng(2).integers(1, 1 << SOFTMAX_EXP_BITS, 256, endpoint=True).astype(np.uint32)
    if exp_entry is not None:
        exps[exp_entry] = value
    image = np.zeros(config.buffer(Buffer.LUT).bytes, np.uint8)
    image[20:20 + 1024] = exps.view(np.uint8)
    _, flagged, _ = _load(config, image, dict(table_addr=20, entries=512, is_softmax=1))
    assert flagged == (exp_entry == 0 and value == 0 or value > 1 << SOFTMAX_EXP_BITS)


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
def test_a_lane_copy_reads_a_row_and_the_next_in_one_cycle(config):
    dut = TableCopy(config)
    rows = table_rows(config)
    table = [int(v) for v in np.random.default_rng(rows).integers(0, 1 << table_row(config).width, rows,
                                                                    dtype=np.uint64)]
    reads = [(a, b) for a in range(rows) for b in (a, a + 1) if b < rows]
    got = []

    async def testbench(ctx):
        ctx.set(dut.write_en, 1)
        for row, value in enumerate(table):
            ctx.set(dut.write_addr, row)
            ctx.set(dut.write_data, value)
            await ctx.tick()
        ctx.set(dut.write_en, 0)
        for a, b in reads:
            ctx.set(dut.row_a, a)
            ctx.set(dut.row_b, b)
            await ctx.tick()
            got.append((ctx.get(dut.data_a), ctx.get(dut.data_b)))

    simulate(dut, testbench)
    assert got == [(table[a], table[b]) for a, b in reads]
