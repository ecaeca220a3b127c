"""Conv layers with INT4 weights through the lowering: the interpreted program equals the golden layer, the
weights travel two a byte, and what CONV cannot take is refused by name."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aipu.app.sample_layers import dual_int4_weights, int4_weights, random_layer
from aipu.compiler.lowering.conv_layer import ConvLayer, check_layer, layer_constants
from aipu.compiler.lowering.conv_layers import lower_conv_layer
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import DEFAULT, Buffer, DType, unpack_int4
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode
from tests.compiler.test_conv_layers import TINY, lowered_layers_match
from tests.rtl.configs import CONFIGS

_OUT_TYPES = (DType.INT8, DType.UINT8)      # int16 tables outgrow the small configurations' LUT memory


def _int4_layer(seed: int):
    """A random layer whose groups have an even channel count, with INT4 weights (None if odd)."""
    rng = np.random.default_rng(seed)
    layer = random_layer(rng, with_lut=bool(seed % 2), out_types=_OUT_TYPES)
    return int4_weights(layer, rng) if layer.w.shape[1] % 2 == 0 else None


def _commands(lowered, opcode: Opcode):
    return [command for queue in lowered.program.queues.values() for command in queue if command.opcode == opcode]


@pytest.mark.parametrize("config", list(CONFIGS.values()) + [TINY], ids=[*CONFIGS, "tiny"])
def test_random_int4_layers_match_golden(config):
    checked = lowered_layers_match(_int4_layer, config, range(60))
    assert len(checked) >= 10
    for _, lowered in checked:
        assert {command.w_type for command in _commands(lowered, Opcode.CONV)} == {DType.INT4}


def _dense_int4(rng: np.random.Generator, c: int, k: int, size: int = 9) -> ConvLayer:
    """A dense 3x3 layer (padding 1) on an int8 input with random INT4 weights."""
    return ConvLayer(x=rng.integers(-128, 128, (1, c, size, size)).astype(np.int8),
                     w=rng.integers(-8, 8, (k, c, 3, 3)).astype(np.int8),
                     bias=rng.integers(-500, 500, k).astype(np.int32), multiplier=np.full(k, 1 << 14),
                     shift=np.full(k, 24), x_zero_point=3, w_zero_point=-2, padding=(1, 1, 1, 1), w_type=DType.INT4)


@pytest.mark.parametrize("tiles", [dict(tile_c=2), dict(tile_c=4, tile_k=3, tile_rows=1), dict(unrolled=True)])
def test_int4_chunks_and_unrolled_windows(tiles):
    layer = _dense_int4(np.random.default_rng(7), 6, 5)
    lowered = lower_conv_layer(layer, TINY, **tiles)
    result = run(lowered.program, lowered.memory())
    np.testing.assert_array_equal(lowered.read_output(result.memory), layer.reference())


def test_an_odd_chunk_of_int4_weights_is_refused():
    with pytest.raises(ValueError, match="multiple of 2 input channels"):
        lower_conv_layer(_dense_int4(np.random.default_rng(7), 6, 5), TINY, tile_c=3)


def test_int4_weights_take_half_the_bytes():
    layer = _dense_int4(np.random.default_rng(3), 8, 4)
    packed = layer_constants(layer, DEFAULT)["weights"]
    assert packed.nbytes == layer.w.size // 2
    np.testing.assert_array_equal(unpack_int4(packed), layer.w.transpose(0, 2, 3, 1))
    loaded = {form: sum(command.y_size * command.x_size * command.run
                        for command in _commands(lower_conv_layer(form_layer, DEFAULT), Opcode.LOAD)
                        if command.buffer == Buffer.WEIGHT)
              for form, form_layer in (("int4", layer), ("int8", dataclasses.replace(layer, w_type=DType.INT8)))}
    assert loaded == {"int4": layer.w.size // 2, "int8": layer.w.size}


def test_int4_layers_are_loaded_raw_under_compression():
    layer = _int4_layer(next(seed for seed in range(60) if _int4_layer(seed) is not None))
    lowered = lower_conv_layer(layer, DEFAULT, compress="all")
    assert not _commands(lowered, Opcode.WDEC)
    result = run(lowered.program, lowered.memory())
    np.testing.assert_array_equal(lowered.read_output(result.memory), layer.reference())


@pytest.mark.parametrize("change, message", [
    (dict(w_type=DType.INT16), "w_type"),
    (dict(w=np.full((4, 8, 3, 3), 8, np.int8)), "INT4 weights within -8..7"),
    (dict(w=np.zeros((4, 7, 3, 3), np.int8), x=np.zeros((1, 7, 9, 9), np.int8)), "an even number of input channels"),
    (dict(w_zero_point=8), "w_zero_point"),
])
def test_what_int4_cannot_take_is_refused_by_name(change, message):
    layer = _dense_int4(np.random.default_rng(0), 8, 4)
    check_layer(layer)
    with pytest.raises(InputError, match=message):
        check_layer(dataclasses.replace(layer, **change))


def _dual_layer(seed: int):
    """A random layer with dual INT4 weights (None if a group's channel count is odd)."""
    rng = np.random.default_rng(seed)
    layer = random_layer(rng, with_lut=bool(seed % 2), out_types=_OUT_TYPES)
    return dual_int4_weights(layer, rng) if layer.w.shape[1] % 2 == 0 else None


@pytest.mark.parametrize("config", list(CONFIGS.values()) + [TINY], ids=[*CONFIGS, "tiny"])
def test_random_dual_int4_layers_match_golden(config):
    """Dual planes run as one CONV of 2·K interleaved channels and a dual REQUANT of K (docs/arithmetic.md §4.7)."""
    checked = lowered_layers_match(_dual_layer, config, range(60))
    assert len(checked) >= 10
    for layer, lowered in checked:
        requants = _commands(lowered, Opcode.REQUANT)
        assert {command.dual for command in requants} == {1}
        assert sum(command.channels * command.pixels for command in requants) == layer.reference().size
        assert sum(command.out_c for command in _commands(lowered, Opcode.CONV) if not command.accumulate) \
            == 2 * sum(command.channels for command in requants)


def test_dual_weights_are_both_planes_of_each_channel_in_turn():
    layer = dataclasses.replace(_dense_int4(np.random.default_rng(5), 8, 3), w_second=np.full((3, 8, 3, 3), -3, np.int8),
                                second_multiplier=np.full(3, 1 << 12))
    packed = unpack_int4(layer_constants(layer, DEFAULT)["weights"])
    np.testing.assert_array_equal(packed[0::2], layer.w.transpose(0, 2, 3, 1))
    assert np.all(packed[1::2] == -3)
    for tiles in (dict(tile_k=1, tile_c=2), dict(tile_k=2, tile_rows=3), dict(unrolled=True)):
        lowered = lower_conv_layer(layer, TINY, **tiles)
        result = run(lowered.program, lowered.memory())
        np.testing.assert_array_equal(lowered.read_output(result.memory), layer.reference(), err_msg=str(tiles))


@pytest.mark.parametrize("change, message", [
    (dict(w_second=np.zeros((3, 8, 3, 3), np.int16)), "w_second"),
    (dict(w_second=np.zeros((2, 8, 3, 3), np.int8)), "w_second"),
    (dict(w_second=np.full((3, 8, 3, 3), -9, np.int8)), "INT4 weights within -8..7"),
    (dict(w_type=DType.INT8), "INT4 without a codebook"),
    (dict(negative_multiplier=np.ones(3, np.int64), negative_shift=np.zeros(3, np.int64)), "without leaky"),
    (dict(second_multiplier=None), "second_multiplier"),
    (dict(second_multiplier=np.full(3, 1 << 16)), "second_multiplier"),
])
def test_what_dual_planes_cannot_take_is_refused_by_name(change, message):
    layer = dataclasses.replace(_dense_int4(np.random.default_rng(0), 8, 3), w_second=np.zeros((3, 8, 3, 3), np.int8),
                                second_multiplier=np.full(3, 1 << 12))
    check_layer(layer)
    with pytest.raises(InputError, match=message):
        check_layer(dataclasses.replace(layer, **change))
