"""The record store loads the command's records from PARAM, serves each lane the record of its channel for
every window of lanes (wrapping around the channels, fewer channels than lanes), and flags exactly the
records golden refuses."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.requant_parts.records import RecordStore
from aipu.sim.cosim.stimulus.requant import random_records
from aipu.sim.machine.arch import SHIFT_MAX, Buffer
from aipu.sim.machine.isa import Opcode
from aipu.sim.timing.requant import RequantGeometry
from tests.rtl.configs import CONFIGS
from tests.rtl.parts import behind_buffers, command_word
from tests.rtl.simulate import simulate

BAD = {"reserved": ("reserved", 1), "shift": ("shift", SHIFT_MAX + 1),
       "negative_shift": ("negative_shift", SHIFT_MAX + 1), "negative_shift_set": ("negative_shift", 1),
       "scale": ("scale", -1.0)}
ALSO_RAISED = {"negative_shift": "negative_shift_set"}      # a shift beyond SHIFT_MAX is also not 0


def _legal_records(seed: int, count: int) -> np.ndarray:
    """Random records no flag refuses (negative shifts 0, as dual needs)."""
    records = random_records(np.random.default_rng(seed), count)
    records["negative_shift"] = 0
    return records


def _load(config, records: np.ndarray, param_index: int, channels: int):
    """(for each channel p of lane 0, the records the lanes read back; the flags) after loading ``channels``
    records."""
    dut = RecordStore(config)
    geometry = RequantGeometry.of(config)
    image = np.zeros(config.buffer(Buffer.PARAM).bytes, np.uint8)
    image[:records.nbytes] = records.view(np.uint8)
    read, outcome = [], {}

    async def testbench(ctx):
        ctx.set(dut.command.as_value(), command_word(config, Opcode.REQUANT, param_index=param_index,
                                                     channels=channels))
        ctx.set(dut.begin, 1)
        await ctx.tick()
        ctx.set(dut.begin, 0)
        ctx.set(dut.load, 1)
        reads = 0
        while True:
            reads += 1
            last = ctx.get(dut.last_read)
            await ctx.tick()
            if last:
                break
        assert reads == channels * geometry.reads_per_record
        ctx.set(dut.load, 0)
        await ctx.tick()                # the last read lands
        outcome["flags"] = {name: ctx.get(getattr(dut.flags, name)) for name in BAD}
        await ctx.tick()                # the positions beyond the last channel are written (REQUANT's VERDICT)
        for first in range(channels):
            ctx.set(dut.channel, first)
            await ctx.tick()
            read.append([ctx.get(record.as_value()) for record in dut.record])
        outcome["records"] = read

    simulate(behind_buffers(dut, {"param_read": image}), testbench)
    return outcome["records"], outcome["flags"]


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("channels", [19, 16, 3, 1])
def test_the_lanes_read_the_loaded_records(config, channels):
    records = _legal_records(channels, config.buffer_units(Buffer.PARAM))
    param_index, lanes = 5, RequantGeometry.of(config).lanes
    got, flags = _load(config, records, param_index, channels)
    loaded = [int.from_bytes(r.tobytes(), "little") for r in records[param_index:param_index + channels]]
    assert got == [[loaded[(first + j) % channels] for j in range(lanes)] for first in range(channels)]
    assert not any(flags.values())


@pytest.mark.parametrize("flag", list(BAD))
def test_a_refused_record_raises_its_flag(flag):
    config = CONFIGS["small"]
    records = _legal_records(4, 16)
    field, value = BAD[flag]
    records[9][field] = value
    _, inside = _load(config, records, 2, 10)
    assert inside == {name: int(name in (flag, ALSO_RAISED.get(flag))) for name in BAD}
    _, outside = _load(config, records, 10, 6)       # the bad record is not the command's
    assert not any(outside.values())
