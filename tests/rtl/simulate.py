"""One clocked Amaranth simulation of a unit's part (WDEC's, CONV's) under a testbench."""
from __future__ import annotations

from amaranth.sim import Simulator


def simulate(part, testbench) -> None:
    sim = Simulator(part)
    sim.add_clock(1e-9, if_exists=True)     # a combinational part has no clock
    sim.add_testbench(testbench)
    sim.run()
