"""`aipu rtl synth`'s Yosys flow (sim/cosim/synth.py) on a toy unit: gates, flip-flops and the longest path."""
from __future__ import annotations

from aipu.sim.cosim.synth import longest_path, unit_report
from tests.rtl.configs import SMALL
from tests.sim.cosim.toy_units import CopyWordLoad

LTP_OUTPUT = """7. Executing LTP pass (find longest path).

Longest topological path in aipu_pool (length=3):
    0: \\padded_w [1]
    1: $abc$1$new_n187 (via $abc$1$blif$39)
    2: $abc$1$new_n189 (via $abc$1$blif$41)
    3: $procmux$500_Y[2] (via $abc$1$blif$42)
   ff: \\error_field [2] (via $auto$ff.cc:337:slice$11170)
"""


def test_longest_path_reads_the_length_and_both_ends():
    assert longest_path(LTP_OUTPUT) == {"gates": 3, "from": "padded_w[1]", "to": "error_field[2]"}


def test_a_toy_unit_synthesizes_to_gates_flip_flops_and_a_path():
    report = unit_report(CopyWordLoad, SMALL)
    assert report["flip_flop_bits"] > 0 and report["gates"] > 0
    assert report["cells"] == report["gates"] + report["flip_flop_bits"] == sum(report["cells_by_type"].values())
    assert report["longest_path"]["gates"] > 0 and report["longest_path"]["to"]
