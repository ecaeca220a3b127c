"""Block-circulant conv layers lowered with LOAD's expansion: interpreted result == golden, DRAM holds 1/L of
the weights, and what LOAD cannot expand is refused by name."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aipu.app.sample_layers import shaped_layer
from aipu.compiler.lowering.conv_circulant import first_rows
from aipu.compiler.lowering.conv_layers import lower_conv_layer
from aipu.compress import circulant
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import DEFAULT, hardware_config_from_dict
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode, Unit

SMALL_DRAM = hardware_config_from_dict({"dram": {"bytes_per_cycle": 4, "latency_cycles": 7},
                                        "buffers": {"weight": {"bytes": 4096}}})


def circulant_layer(seed: int, circ_size: int, channels: int = 8, out_channels: int = 16, kernel: int = 3):
    """A layer of random data whose int8 weights are C·diag(s) (compress.circulant's expansion)."""
    rng = np.random.default_rng(seed)
    layer = shaped_layer(rng, channels, 6, out_channels, kernel)
    rows = rng.integers(-127, 128, (out_channels // circ_size, channels, kernel, kernel))
    signs = np.where(rng.random(channels) < 0.5, -1, 1)
    dense = circulant.signed_weight(circulant.decompress_w_circ_to_weight(rows, circ_size), signs)
    return dataclasses.replace(layer, w=dense.astype(np.int8), circulant=(circ_size, signs))


@pytest.mark.parametrize("config", [DEFAULT, SMALL_DRAM], ids=["default", "small-dram"])
@pytest.mark.parametrize("circ_size", [2, 4])
def test_circulant_layer_matches_golden(config, circ_size):
    layer = circulant_layer(circ_size, circ_size)
    lowered = lower_conv_layer(layer, config)
    result = run(lowered.program, lowered.memory(), seed=circ_size)
    np.testing.assert_array_equal(lowered.read_output(result.memory), layer.reference())
    assert lowered.regions["0.weights"][1] == layer.w.size // circ_size
    loads = [command for command in lowered.program.queues[Unit.LOAD] if command.opcode == Opcode.LOAD]
    assert any(command.circ_log2 == circ_size.bit_length() - 1 for command in loads)


def test_split_output_tiles_keep_whole_block_rows():
    layer = circulant_layer(3, 4, out_channels=32)
    lowered = lower_conv_layer(layer, DEFAULT, tile_k=8, tile_rows=2)
    result = run(lowered.program, lowered.memory())
    np.testing.assert_array_equal(lowered.read_output(result.memory), layer.reference())


def test_first_rows_undo_the_signs():
    layer = circulant_layer(5, 4)
    size, signs = layer.circulant
    rows = first_rows(layer.w, size, signs)
    assert rows.shape == (layer.w.shape[0] // size, 3, 3, layer.w.shape[1])
    np.testing.assert_array_equal(rows, (layer.w[::size] * signs[None, :, None, None]).transpose(0, 2, 3, 1))


@pytest.mark.parametrize("change, named", [
    (lambda layer: dataclasses.replace(layer, w=np.roll(layer.w, 1, axis=0)), "circ_size"),
    (lambda layer: dataclasses.replace(layer, circulant=(3, layer.circulant[1])), "circ_size"),
    (lambda layer: dataclasses.replace(layer, circulant=(4, layer.circulant[1][:4])), "sign vector"),
])
def test_refusals_name_the_field(change, named):
    with pytest.raises(InputError) as refusal:
        lower_conv_layer(change(circulant_layer(7, 4)), DEFAULT)
    assert named in str(refusal.value)
