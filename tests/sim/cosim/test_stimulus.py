"""The stimulus generators draw legal programs for every unit family, and `compare` names each way an RTL run
can depart: cycles off the formula, a differing byte, a run that does not finish."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.sim.cosim.cocotb_run import verilog_backends
from aipu.sim.cosim.stimulus import RANDOM, base, compare
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import DEFAULT, Buffer
from tests.rtl.checks import assert_matches
from tests.rtl.configs import SMALL


@pytest.mark.parametrize("family", list(RANDOM))
def test_every_family_draws_legal_commands_the_interpreter_runs(family):
    drawn = RANDOM[family](SMALL, np.random.default_rng(5), 12)
    assert 1 <= drawn.commands <= 12
    drawn.program.validate()
    assert run(drawn.program, drawn.memory).stats.commands


def _small_dma():
    return RANDOM["load_store"](SMALL, np.random.default_rng(1), 4)


def test_compare_is_quiet_when_the_rtl_agrees():
    assert compare(_small_dma()).problems == []


def test_compare_names_a_command_off_its_formula(monkeypatch):
    documented = base.expected_cycles
    monkeypatch.setattr(base, "expected_cycles", lambda config, command, memory:
                        documented(config, command, memory) + (command.opcode.name == "STORE"))
    problems = compare(_small_dma()).problems
    assert any("STORE[0] took" in problem and "its formula says" in problem for problem in problems), problems


def test_compare_names_a_differing_byte(monkeypatch):
    interpret = base.run

    def golden_with_a_flip(program, memory):
        result = interpret(program, memory)
        result.memory.buffers[Buffer.OUT][-1] ^= 1
        return result

    monkeypatch.setattr(base, "run", golden_with_a_flip)
    problems = compare(_small_dma()).problems
    assert len(problems) == 1 and "OUT" in problems[0], problems


def test_compare_names_a_run_that_does_not_finish(monkeypatch):
    monkeypatch.setattr(base, "SLACK_CYCLES", -1000)       # a cycle budget below the formulas
    problems = compare(_small_dma()).problems
    assert problems[0].startswith("not done after 0 cycles (its commands' formulas total "), problems


PROGRAM_COMMANDS = 250     # per program (plus FINISH): the builds of `aipu bench rtl`'s unit runs


@pytest.mark.slow
@pytest.mark.parametrize("family", list(RANDOM))
def test_a_thousand_random_commands_per_unit_on_verilog(family):
    """Each unit alone on the default configuration, 1000 random commands in programs of 250, on the Verilog
    simulators ($AIPU_SIM): bit-exact with the interpreter, every command in its formula's cycles."""
    rng = np.random.default_rng(list(RANDOM).index(family))
    for backend in verilog_backends():
        compared = 0
        while compared < 1000:
            drawn = RANDOM[family](DEFAULT, rng, min(PROGRAM_COMMANDS, 1000 - compared))
            assert_matches(drawn, backend, build_at_least=(PROGRAM_COMMANDS + 1, 0))
            compared += drawn.commands
