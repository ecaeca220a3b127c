"""Every memory inside a unit has at most two ports (one read and one write port, or two read ports), as an
SRAM macro has, counted in the elaborated Amaranth design (``memory_ports``, sim/cosim/synth.py; `aipu rtl
synth` counts them again after synthesis). The System top's buffers are multi-ported and are not checked here."""
from __future__ import annotations

import pytest

from aipu.sim.cosim.synth import memory_ports, over_two_ports
from aipu.sim.cosim.verilog import available_units
from aipu.sim.machine.isa import Unit
from tests.rtl.configs import CONFIGS

UNITS = available_units()
SLOW = {(Unit.CONV, "default")}      # elaborating CONV on DEFAULT takes 20 s and more


@pytest.mark.parametrize("unit, config", [
    pytest.param(unit, config, id=f"{unit.name.lower()}-{name}",
                 marks=[pytest.mark.slow] if (unit, name) in SLOW else [])
    for unit in UNITS for name, config in CONFIGS.items()])
def test_no_memory_of_a_unit_has_more_than_two_ports(unit, config):
    memories = memory_ports(UNITS[unit](config))
    assert over_two_ports(memories) == []
    assert all(memory["read_ports"] + memory["write_ports"] == memory["ports"] for memory in memories)
