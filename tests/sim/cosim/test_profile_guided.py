"""Profile-guided Verilator builds (docs/rtl-cosim.md, "Profile-guided builds"): the flags of each pass reach
make, and a build whose training ran nothing is refused. A whole profile-guided NPU build runs bit-exact in
tests/app/test_cli_rtl_run.py (`aipu rtl run` builds one by default)."""
from __future__ import annotations

import os
import shlex

import pytest

from aipu.sim.cosim.verilog import BuildError, compile_verilog, verilator_environment

TOY = """module toy(input clk, output reg q);
  always @(posedge clk) q <= ~q;
endmodule
"""


def _make_variables() -> dict[str, str]:
    """MAKEFLAGS' variables as make reads them (a backslash keeps a space inside a word)."""
    return dict(word.split("=", 1) for word in shlex.split(os.environ["MAKEFLAGS"]) if "=" in word)


@pytest.mark.parametrize("profile, compile_flags, link_flags", [
    (None, "-O2", None),
    ("generate", "-O2 -fprofile-generate -fprofile-update=single", "-fprofile-generate"),
    ("use", "-O2 -fprofile-use -fprofile-partial-training -fprofile-correction -Wno-missing-profile", "-fprofile-use")])
def test_each_pass_hands_make_its_flags_as_one_word(profile, compile_flags, link_flags):
    with verilator_environment(profile):
        variables = _make_variables()
    assert variables["OPT_FAST"] == variables["OPT_GLOBAL"] == compile_flags
    assert variables.get("LDFLAGS") == link_flags


def test_a_training_that_ran_nothing_is_refused(tmp_path):
    with pytest.raises(BuildError, match="training left no counts"):
        compile_verilog(tmp_path, "toy", TOY, "verilator", profile=lambda directory: None)


def test_only_verilator_builds_are_profile_guided(tmp_path):
    with pytest.raises(ValueError, match="Verilator's only"):
        compile_verilog(tmp_path, "toy", TOY, "icarus", profile=lambda directory: None)
