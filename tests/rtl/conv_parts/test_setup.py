"""The setups register the geometry docs/rtl-conv.md defines for legal CONVs and DWCONVs, and refuse illegal
ones in their second cycle naming the field the interpreter names."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.commands import error_fields
from aipu.rtl.conv_parts.depthwise_setup import DepthwiseSetup
from aipu.rtl.conv_parts.setup import ConvSetup
from aipu.sim.cosim.stimulus.conv import random_conv, random_dwconv
from aipu.sim.machine.isa import Unit
from tests.rtl.configs import EVERY_CONFIG, SMALL
from tests.rtl.conv_parts.model import command_word, depthwise_geometry_of, geometry_of
from tests.rtl.simulate import simulate
from tests.rtl.test_conv import FAULTS


def _setup(config, command, part=ConvSetup, geometry=geometry_of) -> tuple[str | None, dict[str, int]]:
    """(the field refused or None, the registered geometry) after ``part``'s two setup cycles."""
    dut = part(config, error_fields(Unit.CONV))
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
        names = geometry(config, command)
        outcome["geometry"] = {name: ctx.get(getattr(dut.geometry, name)) for name in names}

    simulate(dut, testbench)
    return outcome["refused"], outcome["geometry"]


@EVERY_CONFIG
def test_the_geometry_of_legal_commands(config):
    rng = np.random.default_rng(config.mac.cols)
    for _ in range(6):
        command = random_conv(config, rng)
        assert _setup(config, command) == (None, geometry_of(config, command)), command


@EVERY_CONFIG
def test_the_depthwise_geometry_of_legal_dwconvs(config):
    rng = np.random.default_rng(config.mac.cols + 1)
    for _ in range(6):
        command = random_dwconv(config, rng)
        expected = depthwise_geometry_of(config, command)
        assert _setup(config, command, DepthwiseSetup, depthwise_geometry_of) == (None, expected), command


@pytest.mark.parametrize("opcode, field", list(FAULTS), ids=[f"{op}-{field}" for op, field in FAULTS])
def test_an_illegal_command_is_refused_naming_the_field(opcode, field):
    part = DepthwiseSetup if opcode == "DWCONV" else ConvSetup
    assert _setup(SMALL, FAULTS[opcode, field], part, lambda config, command: ())[0] == field


@pytest.mark.parametrize("opcode, field", [("CONV", "k_w"), ("DWCONV", "k_w")])
def test_each_setup_leaves_the_other_commands_faults_alone(opcode, field):
    other = ConvSetup if opcode == "DWCONV" else DepthwiseSetup
    assert _setup(SMALL, FAULTS[opcode, field], other, lambda config, command: ())[0] is None
