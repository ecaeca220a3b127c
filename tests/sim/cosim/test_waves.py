"""WAVES=1: a waveform of the cycles around the first mismatch, cut out of the run's VCD."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aipu.app.sample_layers import random_layer
from aipu.compiler.lowering.conv_layers import lower_conv_layer
from aipu.sim.cosim.cocotb_run import run_verilog
from aipu.sim.cosim.result import first_mismatch
from aipu.sim.cosim.verilog import available_units
from aipu.sim.cosim.waves import WINDOW_FILE, mismatch_report, trim_vcd, window_cycles
from aipu.sim.interpreter import run as interpret
from tests.rtl.configs import SMALL

VCD = """$timescale 1ps $end
$scope module top $end
$var wire 1 ! clk $end
$var wire 4 " count [3:0] $end
$upscope $end
$enddefinitions $end
#0
$dumpvars
0!
b0000 "
$end
#10
1!
b0001 "
#20
0!
#30
1!
b0010 "
#40
0!
#50
1!
b0011 "
"""


def test_trim_keeps_the_window_with_every_value_at_its_start(tmp_path):
    source, target = tmp_path / "all.vcd", tmp_path / "window.vcd"
    source.write_text(VCD)
    trim_vcd(source, target, 25, 40)
    header, body = target.read_text().split("$enddefinitions $end\n")
    assert header + "$enddefinitions $end\n" == VCD.split("#0\n")[0]
    assert body == '#30\n$dumpvars\n0!\nb0001 "\n$end\n1!\nb0010 "\n#40\n0!\n'


@pytest.mark.slow
def test_a_mismatch_gets_the_waveform_of_its_command(tmp_path, monkeypatch):
    """A golden byte flipped on purpose: the report names the command and the VCD holds its cycles only."""
    units = list(available_units().values())
    lowered = lower_conv_layer(random_layer(np.random.default_rng(0), max_channels=6, max_size=5), SMALL)
    expected = interpret(lowered.program, lowered.memory())
    got = run_verilog(lowered.program, lowered.memory(), units, max_cycles=100_000)
    stored = next(write for write in expected.writes if write.space == "DRAM")
    expected.memory.dram[stored.bytes()[0]] ^= 1
    mismatch = first_mismatch(lowered.program, expected, got)
    monkeypatch.setenv("WAVES", "1")
    report = mismatch_report(lowered.program, lowered.memory(), units, expected, got, simulator="verilator")
    assert report.startswith(str(mismatch))
    window = report.rsplit(": ", 1)[1]
    assert window.endswith(WINDOW_FILE)
    first, last = window_cycles(mismatch.cycles, got.total_cycles)
    clock = json.loads((Path(window).parent / "outcome.json").read_text())["clock_steps"]
    times = [int(line[1:]) for line in open(window) if line.startswith("#")]
    assert times and (times[-1] - times[0]) <= (last - first + 1) * clock
    assert "$dumpvars" in open(window).read()
