"""The setup registers the geometry docs/rtl-conv.md defines for legal commands, and refuses illegal ones in
its second cycle naming the field the interpreter names."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.commands import error_fields
from aipu.rtl.conv_parts.setup import ConvSetup
from aipu.sim.cosim.stimulus.conv import random_conv, random_dwconv
from aipu.sim.machine.isa import Opcode, Unit
from tests.rtl.configs import EVERY_CONFIG, SMALL
from tests.rtl.conv_parts.model import command_word, geometry_of
from tests.rtl.simulate import simulate
from tests.rtl.test_conv import FAULTS


def _setup(config, command) -> tuple[str | None, dict[str, int]]:
    """(the field refused or None, the registered geometry) after the two setup cycles."""
    dut = ConvSetup(config, error_fields(Unit.CONV))
    outcome = {}

    async def testbench(ctx):
        ctx.set(dut.command.as_value(), command_word(config, command))
        ctx.set(dut.steps.geometry, 1)
        await ctx.tick()
        ctx.set(dut.steps.geometry, 0)
        ctx.set(dut.steps.check, 1)
        fault = ctx.get(dut.fault)
        outcome["refused"] = dut.error_names[ctx.get(dut.fault_field)] if fault else None
        await ctx.tick()
        ctx.set(dut.steps.check, 0)
        assert not ctx.get(dut.fault), "a fault outside the checking cycle"
        names = geometry_of(config, command) if command.opcode == Opcode.CONV else ()
        outcome["geometry"] = {name: ctx.get(getattr(dut.geometry, name)) for name in names}

    simulate(dut, testbench)
    return outcome["refused"], outcome["geometry"]


@EVERY_CONFIG
def test_the_geometry_of_legal_commands(config):
    rng = np.random.default_rng(config.mac.cols)
    for _ in range(6):
        command = random_conv(config, rng)
        assert _setup(config, command) == (None, geometry_of(config, command)), command


@pytest.mark.parametrize("field", list(FAULTS))
def test_an_illegal_command_is_refused_naming_the_field(field):
    assert _setup(SMALL, FAULTS[field])[0] == field


def test_a_dwconv_is_refused_naming_the_opcode():
    """DWCONV's dataflow is not built: its word is refused before anything else is checked."""
    assert _setup(SMALL, random_dwconv(SMALL, np.random.default_rng(4)))[0] == "opcode"
