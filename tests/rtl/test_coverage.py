"""The default suite's CONV stimulus reaches every bin of the coverage model (aipu.sim.cosim.stimulus.coverage)."""
from __future__ import annotations

import pytest

from aipu.sim.cosim.stimulus.coverage import coverage, missing, report
from aipu.sim.machine.isa import Opcode, Unit
from tests.rtl.configs import CONFIGS
from tests.rtl.test_conv import depthwise_stimulus, mixed_stimulus


def default_conv_programs():
    """The CONV unit's programs the default suite compares on the RTL (DWCONVs alone: not on DEFAULT)."""
    return [mixed_stimulus(config).program for config in CONFIGS.values()] + \
        [depthwise_stimulus(config).program for name, config in CONFIGS.items() if name != "default"]


@pytest.mark.parametrize("opcode", [Opcode.CONV, Opcode.DWCONV], ids=lambda opcode: opcode.name)
def test_the_default_conv_stimulus_covers_every_bin(opcode):
    hits = coverage(default_conv_programs(), opcode)
    print(f"\n{opcode.name} coverage of the default suite's stimulus:\n{report(hits)}")
    assert not missing(hits), missing(hits)


def test_an_unreached_bin_is_reported():
    program = mixed_stimulus(CONFIGS["small"]).program
    hits = coverage([program], Opcode.CONV)
    assert sum(hits["k_h"].values()) == sum(command.opcode == Opcode.CONV for command in program.queues[Unit.CONV])
    assert missing(coverage([], Opcode.CONV))["k_h"] == [1, 2, 3]
