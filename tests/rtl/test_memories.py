"""Every memory has at most two ports (one read and one write port, two read ports, or a read port and a read
port and a write port on one address: a read-write port), as an SRAM macro has, counted in the elaborated
Amaranth design (``memory_ports``, sim/cosim/synth.py; `aipu rtl synth` counts them again after synthesis): every
memory inside a unit and every memory of the NPU top, its banked buffers included. The System top's buffers are
multi-ported (a harness) and are not checked here."""
from __future__ import annotations

import pytest

from aipu.rtl.npu import Npu
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
    assert over_two_ports(memory_ports(UNITS[unit](config))) == []


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
def test_no_memory_of_the_npu_has_more_than_two_ports(config):
    memories = memory_ports(Npu(config))
    assert over_two_ports(memories) == []
    buffers = [memory for memory in memories if memory["name"].startswith("buffer_")]
    assert len(buffers) == 4 * 4 + 2        # ACT, WEIGHT, ACC, OUT in two banks of two sub-banks; LUT, PARAM
    assert all(memory["read_ports"] <= 2 and memory["write_ports"] <= 1 for memory in buffers)
