"""Depthwise layers on DWCONV (compiler/lowering/conv_depthwise.py): chosen where the timing says it is faster,
bit-exact against the golden layer and, in a network, against the quantized model on every tensor."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.app.sample_layers import random_layer, shaped_layer
from aipu.compiler.lowering.conv_depthwise import (DepthwisePlan, PhaseSlots, phase_slots, plan_conv,
                                                   tap_major_kernel, takes_dwconv)
from aipu.compiler.lowering.conv_layers import lower_conv_layer
from aipu.sim.cycle import simulate
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.isa import Opcode, Unit
from tests.compiler.onnx_models import mobilenet_like
from tests.compiler.test_conv_layers import TINY
from tests.compiler.test_lowering import TINY as TINY_NETWORK, _check_every_tensor
from tests.compiler.test_quantize import _compile


def test_phase_slots_hold_every_padded_element_once():
    """7 columns padded by 1 and 2 (10 in all) at stride 3: phases of ceil(10 / 3) = 4 slots, input columns
    -1 2 5 8 | 0 3 6 9 | 1 4 7 10, of which -1 and 7 up are padding (9 and 10 slots past the padded width)."""
    assert phase_slots(7, 1, 2, 3) == [PhaseSlots(2, 2, 1, 1), PhaseSlots(0, 3, 0, 1), PhaseSlots(1, 2, 0, 2)]
    assert phase_slots(5, 2, 2, 1) == [PhaseSlots(0, 5, 2, 2)]
    assert phase_slots(1, 1, 1, 2) is None        # phase 0 would hold padding only


def test_the_kernel_is_tap_major_by_channel_tile():
    w = np.arange(5 * 2 * 2, dtype=np.int8).reshape(5, 1, 2, 2)    # channel c, tap t: 4c + t
    assert list(tap_major_kernel(w, 3)) == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11, 12, 16, 13, 17, 14, 18, 15, 19]


@pytest.mark.parametrize("config", [DEFAULT, TINY], ids=["default", "tiny"])
def test_random_depthwise_layers_match_golden(config):
    """Random channel-multiplier-1 layers (strides, dilations, padding, tables), automatic and random tiles:
    wherever DWCONV runs them the output is the golden layer's."""
    rng = np.random.default_rng(3)
    on_dwconv = 0
    for seed in range(80):
        layer = random_layer(np.random.default_rng(seed), max_channels=40, max_size=14, with_lut=seed % 3 == 0)
        if not takes_dwconv(layer):
            continue
        tiles = {} if seed % 2 else {"tile_rows": int(rng.integers(1, plan_conv(layer, config).tile_rows + 1))}
        lowered = lower_conv_layer(layer, config, **tiles)
        if isinstance(lowered.plan, DepthwisePlan):
            on_dwconv += 1
            assert all(command.opcode == Opcode.DWCONV for command in lowered.program.queues[Unit.CONV][:-1])
        result = run(lowered.program, lowered.memory(), seed=seed)
        np.testing.assert_array_equal(lowered.read_output(result.memory), layer.reference(), err_msg=str(seed))
    assert on_dwconv >= 4, on_dwconv


@pytest.mark.parametrize("channels, size, kernel, stride", [(32, 28, 3, 1), (72, 28, 5, 2), (120, 14, 5, 1),
                                                            (64, 56, 3, 2)])
def test_mobilenet_depthwise_layers_take_dwconv_and_are_faster_on_the_cycle_model(channels, size, kernel, stride):
    layer = shaped_layer(np.random.default_rng(size), channels, size, channels, kernel, stride=stride,
                         groups=channels)
    plans = {dwconv: lower_conv_layer(layer, DEFAULT, dwconv=dwconv) for dwconv in (False, True)}
    assert isinstance(plans[True].plan, DepthwisePlan) and not isinstance(plans[False].plan, DepthwisePlan)
    cycles = {dwconv: simulate(lowered.program, lowered.memory()).total_cycles for dwconv, lowered in plans.items()}
    assert cycles[True] < cycles[False], cycles
    result = run(plans[True].program, plans[True].memory())
    assert np.array_equal(plans[True].read_output(result.memory), layer.reference())


@pytest.mark.parametrize("config", [DEFAULT, TINY_NETWORK], ids=["default", "tiny"])
def test_a_mobilenet_like_network_runs_its_depthwise_layers_on_dwconv_bit_exact(tmp_path, config):
    rng = np.random.default_rng(5)
    _, qmodel = _compile(tmp_path, mobilenet_like(), rng.normal(0, 1, (12, 3, 16, 16)).astype(np.float32))
    network, compared = _check_every_tensor(qmodel, config, rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32),
                                            seed=7)
    assert len(compared) >= 10
    assert any(command.opcode == Opcode.DWCONV for command in network.program.queues[Unit.CONV])
