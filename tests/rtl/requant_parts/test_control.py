"""The phases take the cycles of sim.timing.requant's formula, and a refusal in CHECK or VERDICT ends the command
before anything streams."""
from __future__ import annotations

import pytest

from aipu.rtl.requant_parts.control import RequantControl
from aipu.sim.timing.requant import FIXED_CYCLES
from tests.rtl.simulate import simulate

NAMES = ("opcode", "acc_addr", "param_shift")


def _run(reads: int, groups: int, refused: str | None = None) -> dict:
    """Cycle by cycle from ``start`` (cycle 0): the cycles each output was high in."""
    dut = RequantControl(NAMES)
    high = {name: [] for name in ("begin", "load", "issue", "flush", "done", "fault")}
    seen = {"field": None}

    async def testbench(ctx):
        loads = issues = 0
        for cycle in range(reads + groups + 12):
            ctx.set(dut.start, cycle == 0)
            ctx.set(dut.last_read, loads == reads - 1)
            ctx.set(dut.last_group, issues == groups - 1)
            ctx.set(dut.region_fault, refused == "region")
            ctx.set(dut.verdict_fault, refused == "verdict")
            ctx.set(dut.region_field, 1)
            ctx.set(dut.verdict_field, 2)
            for name, cycles in high.items():
                if ctx.get(getattr(dut, name)):
                    cycles.append(cycle)
            if ctx.get(dut.fault):
                seen["field"] = NAMES[ctx.get(dut.fault_field)]
            loads += ctx.get(dut.load)
            issues += ctx.get(dut.issue)
            await ctx.tick()

    simulate(dut, testbench)
    return {**high, **seen}


@pytest.mark.parametrize("reads, groups", [(1, 1), (4, 3), (16, 9)])
def test_a_command_takes_the_formula_s_cycles(reads, groups):
    run = _run(reads, groups)
    assert run["begin"] == [1]
    assert run["load"] == list(range(2, 2 + reads))
    assert run["issue"] == list(range(reads + 4, reads + 4 + groups))
    assert run["done"] == run["flush"] == [FIXED_CYCLES + reads + groups]
    assert run["fault"] == []


def test_refusals_end_the_command_before_it_streams():
    region = _run(4, 3, "region")
    assert region["fault"] == [1] and region["field"] == "acc_addr" and region["load"] == region["issue"] == []
    verdict = _run(4, 3, "verdict")
    assert verdict["fault"] == [4 + 3] and verdict["field"] == "param_shift"
    assert verdict["issue"] == verdict["done"] == []
