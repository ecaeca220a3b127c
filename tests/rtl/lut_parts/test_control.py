"""The phases: the load with its prologue, then a group a cycle (LUT) or one softmax start, the faults decided
in the first cycle after the load only, and the command's end at the packer's done."""
from __future__ import annotations

import pytest

from aipu.rtl.lut_parts.control import LutControl
from tests.rtl.simulate import simulate

NAMES = ("opcode", "src_addr", "table_addr")
OUTPUTS = ("begin", "load", "prime", "prime_hold", "advance", "softmax_begin", "fault")


def _run(rows: int, groups: int, *, softmax: bool = False, refused: bool = False, finish: int = 1) -> dict:
    """The cycles each output is high in, from ``start`` at cycle 0 (and again ``finish`` cycles after done)."""
    dut = LutControl(NAMES)
    high = {name: [] for name in OUTPUTS}
    fields = []

    async def testbench(ctx):
        steps = advances = 0
        done_at = restart = None
        for cycle in range(rows + groups + 20):
            ctx.set(dut.start, cycle in (0, restart))
            ctx.set(dut.is_softmax, softmax)
            ctx.set(dut.refused, refused)
            ctx.set(dut.field, 2)
            ctx.set(dut.prologue, steps < 2)
            ctx.set(dut.prologue_last, steps == 1)
            ctx.set(dut.loaded, steps == rows + 1)
            ctx.set(dut.last_group, advances == groups - 1)
            ctx.set(dut.done, cycle == done_at)
            for name, cycles in high.items():
                if ctx.get(getattr(dut, name)):
                    cycles.append(cycle)
            if ctx.get(dut.fault):
                fields.append(NAMES[ctx.get(dut.fault_field)])
            steps += ctx.get(dut.load)
            advances += ctx.get(dut.advance)
            if (ctx.get(dut.advance) and advances == groups) or ctx.get(dut.softmax_begin):
                done_at = cycle + finish
            if cycle == done_at and restart is None:
                restart, steps, advances = cycle + 1, 0, 0
            await ctx.tick()

    simulate(dut, testbench)
    return {**high, "fields": fields}


@pytest.mark.parametrize("rows, groups", [(1, 1), (5, 3), (16, 9)])
def test_load_then_a_group_a_cycle(rows, groups):
    run = _run(rows, groups)
    first_run = rows + 3
    again = first_run + groups + 1                # started in the cycle after done
    assert run["begin"] == [0, again]
    assert run["load"][:rows + 2] == list(range(1, rows + 3))
    assert run["prime"][:2] == [1, 2] and run["prime_hold"][:1] == [2]
    assert run["advance"][:groups] == list(range(first_run, first_run + groups))
    assert run["fault"] == [] and run["softmax_begin"] == []


def test_softmax_starts_once_after_the_load():
    run = _run(4, 1, softmax=True, finish=30)
    assert run["softmax_begin"] == [4 + 3] and run["advance"] == [] and run["fault"] == []


@pytest.mark.parametrize("softmax", [False, True])
def test_a_refusal_in_the_first_cycle_after_the_load(softmax):
    run = _run(4, 3, softmax=softmax, refused=True)
    assert run["fault"] == [4 + 3] and run["fields"] == ["table_addr"]
    assert run["advance"] == run["softmax_begin"] == []
