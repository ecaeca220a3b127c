"""Conv layers with codebook weights through the lowering: DRAM holds 1-, 2- or 4-bit indices and the codebook,
LOAD expands them into WEIGHT, and the interpreted program equals the golden layer."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aipu.app.sample_layers import random_layer
from aipu.compiler.lowering.conv_layer import check_layer, layer_constants
from aipu.sim.machine.arch import DEFAULT, Buffer, DType, unpack_indices
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode, Unit
from tests.compiler.test_conv_layers import TINY, lowered_layers_match
from tests.rtl.configs import CONFIGS

_OUT_TYPES = (DType.INT8, DType.UINT8)      # int16 tables outgrow the small configurations' LUT memory


def _codebook_layer(seed: int):
    """A random layer with weights drawn from a random codebook of 2..16 entries, None where a group's input
    channels do not fill whole bytes of indices."""
    rng = np.random.default_rng(seed)
    layer = random_layer(rng, with_lut=bool(seed % 2), out_types=_OUT_TYPES)
    entries = np.unique(rng.integers(-128, 128, int(rng.choice([2, 3, 4, 7, 16])))).astype(np.int8)
    bits = next(bits for bits in (1, 2, 4) if entries.size <= 1 << bits)
    if entries.size < 2 or layer.w.shape[1] % (8 // bits):
        return None
    return dataclasses.replace(layer, w=rng.choice(entries, layer.w.shape).astype(np.int8), codebook=entries)


def _weight_loads(lowered):
    return [command for command in lowered.program.queues[Unit.LOAD]
            if command.opcode == Opcode.LOAD and command.buffer == Buffer.WEIGHT]


@pytest.mark.parametrize("config", list(CONFIGS.values()) + [TINY], ids=[*CONFIGS, "tiny"])
def test_random_codebook_layers_match_golden(config):
    checked = lowered_layers_match(_codebook_layer, config, range(200))
    assert len(checked) >= 20
    for layer, lowered in checked:
        assert {command.index_bits for command in _weight_loads(lowered)} == {layer.index_bits}


def test_dram_holds_the_indices_and_the_codebook():
    rng = np.random.default_rng(1)
    entries = np.array([-90, -7, 0, 33], np.int8)
    layer = dataclasses.replace(random_layer(rng, out_types=_OUT_TYPES), x=np.zeros((1, 8, 6, 6), np.int8),
                                groups=1, w=rng.choice(entries, (4, 8, 3, 3)).astype(np.int8), codebook=entries,
                                bias=np.zeros(4, np.int32), multiplier=np.ones(4, np.int64),
                                shift=np.zeros(4, np.int64),
                                stride=(1, 1), dilation=(1, 1), padding=(0, 0, 0, 0), lut=None)
    constants = layer_constants(layer, DEFAULT)
    assert layer.index_bits == 2 and constants["weights"].nbytes == layer.w.size // 4
    np.testing.assert_array_equal(entries[unpack_indices(constants["weights"], 2)], layer.w.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(constants["codebook"], entries)
    with pytest.raises(InputError, match="a multiple of 4"):
        check_layer(dataclasses.replace(layer, x=np.zeros((1, 6, 6, 6), np.int8), w=layer.w[:, :6]))
    with pytest.raises(InputError, match="a codebook entry"):
        check_layer(dataclasses.replace(layer, w=np.full_like(layer.w, 5)))
    with pytest.raises(InputError, match="sorted distinct"):
        check_layer(dataclasses.replace(layer, codebook=entries[::-1].copy()))
