"""Layers overlap (compiler/lowering/pipeline.py): a layer's first row tiles load as soon as the rows they read
are stored, while the previous layer still computes and stores the rest; the program stays bit-exact with the
quantized IR and race-free in every schedule, also when a later output reuses a freed region of DRAM."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from aipu.app.models.synthetic import GraphBuilder
from aipu.compiler.lowering.network import lower_model
from aipu.sim.cycle import simulate
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import DEFAULT, Buffer, hardware_config_from_dict
from aipu.sim.machine.errors import HazardError
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command
from tests.compiler.onnx_models import resnet_like
from tests.compiler.test_quantize import _compile

SMALL = hardware_config_from_dict({"buffers": {"act": {"bytes": 4096}, "out": {"bytes": 1024}}})


def _three_layers():
    """conv 3x3 -> conv 1x1 -> max pool on a 24x24 image: each layer several row tiles on SMALL."""
    b = GraphBuilder(4, 3, 24)
    x = b.node("Relu", [b.conv("image", 3, 16)])
    x = b.node("Relu", [b.conv(x, 16, 16, kernel=1)])
    return b.model(b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2]))


def _bit_exact_in_any_schedule(qmodel, network, image: np.ndarray) -> None:
    x = qmodel.quantize_inputs({qmodel.inputs[0]: image})
    want = qmodel.run(x)
    for seed in (None, 0, 1, 2):
        result = run(network.program, network.memory(x), seed=seed)      # raises HazardError on any race
        for name in qmodel.outputs:
            np.testing.assert_array_equal(network.read(result.memory, name), want[name])


def test_next_layer_loads_before_the_previous_layer_stores_its_last_tile(tmp_path):
    rng = np.random.default_rng(4)
    _, qmodel = _compile(tmp_path, _three_layers(), rng.normal(0, 1, (6, 3, 24, 24)).astype(np.float32))
    network = lower_model(qmodel, SMALL)
    _bit_exact_in_any_schedule(qmodel, network, rng.normal(0, 1, (1, 3, 24, 24)).astype(np.float32))
    timing = simulate(network.program, Memory.create(SMALL, network.dram))
    loads = network.program.queues[Unit.LOAD]
    steps = network.steps
    assert len(steps) == 3
    for before, after in zip(steps, steps[1:]):
        stores = range(*before["commands"]["STORE"])
        assert len(stores) > 2, "the previous layer stores several row tiles"
        last_store = timing.timings[Unit.STORE][stores[-1]].retire
        tiles = [index for index in range(*after["commands"]["LOAD"])
                 if loads[index].opcode == Opcode.LOAD and loads[index].buffer == Buffer.ACT]
        assert timing.timings[Unit.LOAD][tiles[0]].start < last_store


@pytest.mark.parametrize("keep_all", [False, True], ids=["reused-dram", "kept"])
def test_overlapping_layers_stay_race_free_when_outputs_reuse_dram(tmp_path, keep_all):
    """Freed regions are reused by later outputs: a STORE never overtakes an earlier layer's LOAD of its bytes."""
    rng = np.random.default_rng(6)
    _, qmodel = _compile(tmp_path, resnet_like(), rng.normal(0, 1, (8, 3, 16, 16)).astype(np.float32))
    for config in (SMALL, DEFAULT):
        network = lower_model(qmodel, config, keep_all=keep_all)
        _bit_exact_in_any_schedule(qmodel, network, rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32))


def _token_pairs(program) -> list[tuple[Unit, int, Unit, int]]:
    """Every token as (pushing unit, its command, popping unit, its command): a queue's i-th push pairs with
    its i-th pop."""
    pairs = []
    for source in Unit:
        for target in Unit:
            pushes = [i for i, command in enumerate(program.queues[source]) if target in command.push]
            pops = [i for i, command in enumerate(program.queues[target]) if source in command.pop]
            assert len(pushes) == len(pops)
            pairs += [(source, push, target, pop) for push, pop in zip(pushes, pops)]
    return pairs


def test_every_token_between_layers_is_needed(tmp_path):
    """Each token from one layer's command to a later layer's (a buffer half handed over; a stored DRAM row
    where no such token already orders it) orders accesses nothing else orders: without it the interpreter
    finds the race."""
    rng = np.random.default_rng(4)
    _, qmodel = _compile(tmp_path, _three_layers(), rng.normal(0, 1, (6, 3, 24, 24)).astype(np.float32))
    network = lower_model(qmodel, SMALL)

    def step(unit: Unit, index: int) -> int:
        return next(number for number, entry in enumerate(network.steps)
                    if index in range(*entry["commands"].get(unit.name, (0, 0))))

    crossing = [pair for pair in _token_pairs(network.program) if step(*pair[:2]) < step(*pair[2:])]
    assert (Unit.CONV, Unit.LOAD) in {(source, target) for source, _, target, _ in crossing}
    x = qmodel.quantize_inputs({qmodel.inputs[0]: rng.normal(0, 1, (1, 3, 24, 24)).astype(np.float32)})
    for source, push, target, pop in crossing:
        program = copy.deepcopy(network.program)
        pushing, popping = program.queues[source][push], program.queues[target][pop]
        program.queues[source][push] = Command(pushing.opcode, pushing.args, pushing.pop, pushing.push - {target})
        program.queues[target][pop] = Command(popping.opcode, popping.args, popping.pop - {source}, popping.push)
        with pytest.raises(HazardError, match="are not ordered by tokens"):
            run(program, network.memory(x))
