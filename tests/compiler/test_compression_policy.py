"""`aipu compile --compress [hidden|all]`: which layers' weights become WDEC streams. "all" compresses every
tile whose stream is smaller; "hidden" only layers whose estimated decode hides behind compute, the first
decode counted beyond the previous layer's CONVs on its last weight tile (compiler/lowering/conv_plan.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aipu.app.cli import main
from aipu.compiler.compression import compression_policy
from aipu.compiler.lowering.conv_layers import lower_conv_layers
from aipu.sim.cycle import simulate
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import hardware_config_from_dict
from aipu.sim.machine.isa import Unit
from tests.compiler.test_unrolled_conv import conv_layer

FOUR_BINS = hardware_config_from_dict({"wdec": {"bins_per_cycle": 4}})     # one part decoder of four bins


def _peaked(layer, seed: int):
    """The layer with trained-like weights (a narrow bell, about 5 bits of entropy): streams well under raw."""
    rng = np.random.default_rng(seed)
    weights = np.clip(np.round(rng.normal(0, 8, layer.w.shape)), -128, 127).astype(np.int8)
    return dataclasses.replace(layer, w=weights)


def _chain():
    """Two 3x3 16 -> 16 convs on 64x64: each one weight tile of 2,304 weights under some 40k CONV cycles."""
    first = _peaked(conv_layer(16, (64, 64), 16, 3, padding=(1,) * 4, seed=1), 1)
    second = _peaked(conv_layer(16, (64, 64), 16, 3, padding=(1,) * 4, seed=2), 2)
    return [first, dataclasses.replace(second, x=np.zeros((1, 16, 64, 64), np.int8))]


def _outcome(compress):
    lowered = lower_conv_layers(_chain(), FOUR_BINS, compress=compress)
    memory = run(lowered.program, lowered.memory()).memory
    cycles = simulate(lowered.program, lowered.memory()).total_cycles
    return lowered, lowered.read_output(memory), cycles


def test_hidden_compresses_the_layer_whose_decode_runs_under_the_previous_layer():
    """The first layer's decode would delay its first CONV (nothing runs before it); the second's runs under
    the first layer's CONVs. "all" compresses both and takes longer; "hidden" only the second and does not."""
    raw, raw_output, raw_cycles = _outcome(None)
    hidden, hidden_output, hidden_cycles = _outcome("hidden")
    every, every_output, every_cycles = _outcome("all")
    assert [plan.compressed for plan in hidden.plans] == [False, True]
    assert [plan.compressed for plan in every.plans] == [True, True]
    assert len(hidden.program.queues[Unit.WDEC]) == 1 and len(every.program.queues[Unit.WDEC]) == 2
    assert np.array_equal(hidden_output, raw_output) and np.array_equal(every_output, raw_output)
    assert hidden_cycles <= 1.01 * raw_cycles < every_cycles


def test_a_compression_policy_is_one_of_the_named():
    assert compression_policy(None) is None and compression_policy(False) is None
    assert compression_policy("hidden") == "hidden"
    for wrong in (True, "fast", 1):
        with pytest.raises(ValueError, match="expected None, False or one of hidden, all"):
            compression_policy(wrong)


def test_the_cli_names_a_policy_it_does_not_know(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_status:
        main(["compile", str(tmp_path / "model.onnx"), "--compress", "fast", "-o", str(tmp_path / "out")])
    assert exit_status.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last == ("aipu compile: error: argument --compress: 'fast' is no policy (hidden, all); a model or "
                    "other argument after a bare --compress is read as one: write it first, or --compress hidden")
