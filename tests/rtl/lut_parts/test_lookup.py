"""A lane looks its element up as golden's definitions do: DIRECT8 by the raw byte, INTERP16 interpolated
between two entries (rows apart or in one row), clamped, for inputs below, inside and beyond the table."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.lut_parts.interfaces import table_rows
from aipu.rtl.lut_parts.lookup import LaneLookup
from aipu.sim.golden.lut import direct_lookup, interpolated_lookup
from aipu.sim.machine.arch import LUT8_ENTRIES
from aipu.sim.timing.lut import entries_per_row
from tests.rtl.configs import CONFIGS
from tests.rtl.simulate import simulate


def _lookups(config, table: np.ndarray, inputs, fields: dict, interp: bool) -> list[int]:
    """The lane's value for each input (a raw byte or an int16 sample), the table in the local table's rows."""
    dut = LaneLookup(config)
    per_row = entries_per_row(config)
    padded = np.zeros(table_rows(config) * per_row, np.int64)
    padded[:table.size] = table
    rows = [sum((int(e) & 0xFFFF) << (16 * i) for i, e in enumerate(padded[r * per_row:(r + 1) * per_row]))
            for r in range(table_rows(config))]
    values = []

    async def testbench(ctx):
        ctx.set(dut.interp, interp)
        for name, value in fields.items():
            ctx.set(getattr(dut, name), value)
        for x in inputs:
            ctx.set(dut.sample if interp else dut.raw, int(x))
            row_a, row_b = ctx.get(dut.row_a), ctx.get(dut.row_b)
            await ctx.tick()
            ctx.set(dut.data_a, rows[row_a])
            ctx.set(dut.data_b, rows[row_b])
            values.append(ctx.get(dut.value))

    simulate(dut, testbench)
    return values


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
def test_direct8_reads_the_raw_byte(config):
    rng = np.random.default_rng(8)
    table = rng.integers(-2 ** 15, 2 ** 15, LUT8_ENTRIES).astype(np.int16)
    x = np.concatenate([[0, 1, 127, 128, 255], rng.integers(0, 256, 40)]).astype(np.uint8)
    expected = direct_lookup(x.view(np.int8), table)
    assert _lookups(config, table, x, {}, interp=False) == (expected.astype(np.int64) & 0xFFFF).tolist()


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("k, f, input_min, qmin, qmax", [(3, 4, -40, -32768, 32767), (6, 0, 100, -500, 900),
                                                          (10, 6, -32768, -30000, 20000), (4, 12, -32768, 0, 255)])
def test_interp16_interpolates_and_clamps(config, k, f, input_min, qmin, qmax):
    rng = np.random.default_rng(k + f)
    table = rng.integers(-2 ** 15, 2 ** 15, (1 << k) + 1).astype(np.int16)
    top = input_min + (1 << (k + f))
    edges = [input_min - 1, input_min, input_min + 1, top - 1, top, min(top + 1, 32767), -32768, 32767]
    x = np.clip(np.concatenate([edges, rng.integers(input_min, min(top, 32767), 40, endpoint=True)]),
                -32768, 32767).astype(np.int16)
    expected, _ = interpolated_lookup(x, table, f, input_min, qmin, qmax, np.int64)
    fields = dict(index_shift=f, table_log2=k, input_min=input_min, qmin=qmin, qmax=qmax)
    assert _lookups(config, table, x, fields, interp=True) == (expected & 0xFFFF).tolist()
