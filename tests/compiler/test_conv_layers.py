"""Lowering a conv layer to a command program: interpreted result == golden conv2d + requantize (+ LUT)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from aipu.app.sample_layers import random_layer
from aipu.compiler.lowering.conv_layer import ConvLayer
from aipu.compiler.lowering.conv_layers import lower_conv_layer, lower_conv_layers
from aipu.compiler.lowering.conv_plan import plan_tiles
from aipu.sim import golden
from aipu.sim.machine.arch import DEFAULT, DTYPE_NUMPY, DType, hardware_config_from_dict
from aipu.sim.machine.isa import Opcode, Rounding, Unit
from aipu.sim.interpreter import HazardError, run
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program

TINY = hardware_config_from_dict({"buffers": {"act": {"bytes": 2048}, "weight": {"bytes": 1024},
                                              "acc": {"bytes": 1024}, "out": {"bytes": 512},
                                              "param": {"bytes": 256}}})


def lowered_layers_match(build, config, seeds) -> list:
    """Lower each layer ``build(seed)`` makes (None: none for that seed) for ``config``, run it on the
    interpreter and compare with the golden layer; returns the lowered layers."""
    checked = []
    for seed in seeds:
        layer = build(seed)
        if layer is not None:
            lowered = lower_conv_layer(layer, config)
            result = run(lowered.program, lowered.memory(), seed=seed)
            np.testing.assert_array_equal(lowered.read_output(result.memory), layer.reference(), err_msg=str(seed))
            checked.append((layer, lowered))
    return checked


def _golden(layer: ConvLayer) -> np.ndarray:
    """The test's oracle: the layer on the golden units directly (conv2d, requantize, then the table)."""
    acc = golden.conv2d(layer.x, layer.w, x_zero_point=layer.x_zero_point, w_zero_point=layer.w_zero_point,
                        stride=layer.stride, padding=layer.padding, dilation=layer.dilation, groups=layer.groups)
    out_dtype = DTYPE_NUMPY[layer.out_type]
    y = golden.requantize(acc, bias=layer.bias, multiplier=layer.multiplier, shift=layer.shift,
                          out_zero_point=layer.out_zero_point, qmin=layer.qmin, qmax=layer.qmax,
                          rounding=layer.rounding.name.lower(), channel_axis=1, out_dtype=out_dtype,
                          negative_multiplier=layer.negative_multiplier, negative_shift=layer.negative_shift)
    if layer.lut is None:
        return y
    if layer.out_type == DType.INT16:
        return golden.lut16(y, layer.lut, index_shift=layer.lut_index_shift, input_min=layer.lut_input_min)
    return golden.lut8(y, layer.lut.astype(out_dtype))


def _random_tiles(rng: np.random.Generator, layer: ConvLayer) -> dict:
    out_h = _golden(layer).shape[2]
    tiles = {"tile_rows": int(rng.integers(1, out_h + 1))}
    if layer.groups == 1:
        tiles.update(tile_k=int(rng.integers(1, layer.w.shape[0] + 1)), tile_c=int(rng.integers(1, layer.x.shape[1] + 1)))
    return tiles


def _check(layer: ConvLayer, config=None, seed=None, **tiles):
    lowered = lower_conv_layer(layer, **({"config": config} if config else {}), **tiles)
    result = run(lowered.program, lowered.memory(), seed=seed)
    expected = _golden(layer)
    np.testing.assert_array_equal(lowered.read_output(result.memory), expected)
    return lowered, result, expected


@pytest.mark.parametrize("seed", range(24))
def test_random_layer_with_random_tiles_matches_golden(seed):
    rng = np.random.default_rng(seed)
    layer = random_layer(rng, with_lut=seed % 3 == 0)
    lowered, result, expected = _check(layer, **_random_tiles(rng, layer))
    k, cg, kh, kw = layer.w.shape
    _, _, oh, ow = expected.shape
    assert result.stats.macs == k * oh * ow * cg * kh * kw
    assert result.stats.bytes_moved["OUT->DRAM"] == lowered.regions["0.output"][1]
    assert result.stats.commands["CONV"] == len(lowered.program.queues[Unit.CONV])


@pytest.mark.parametrize("seed", range(3))
def test_layer_reference_is_the_golden_model(seed):
    """ConvLayer.reference() (the run-layer comparison and the front end's calibration) is the oracle's layer."""
    layer = random_layer(np.random.default_rng(200 + seed), with_lut=seed > 0,
                         out_types=(DType.INT16,) if seed == 2 else (DType.INT8, DType.UINT8))
    np.testing.assert_array_equal(layer.reference(), _golden(layer))


@pytest.mark.parametrize("seed", range(6))
def test_legal_reorderings_give_identical_memory(seed):
    rng = np.random.default_rng(100 + seed)
    layer = random_layer(rng)
    lowered = lower_conv_layer(layer, **_random_tiles(rng, layer))
    reference = run(lowered.program, lowered.memory())
    orders = set()
    for schedule in range(5):
        result = run(lowered.program, lowered.memory(), seed=schedule)
        assert result.memory == reference.memory
        assert result.stats.to_dict() == reference.stats.to_dict()
        orders.add(tuple(result.trace))
    assert len(lowered.program) < 8 or len(orders) > 1     # the schedules really differ


def test_automatic_tiling_splits_channels_rows_and_outputs_on_a_tiny_machine():
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 40, 9, 11)).astype(np.int8)
    w = rng.integers(-128, 128, (20, 40, 3, 3)).astype(np.int8)
    layer = ConvLayer(x=x, w=w, bias=rng.integers(-999, 999, 20).astype(np.int32),
                      multiplier=np.full(20, 40000), shift=np.full(20, 24), x_zero_point=3, w_zero_point=-2,
                      padding=(1, 1, 1, 1), rounding=Rounding.HALF_TO_EVEN)
    plan = plan_tiles(layer, TINY)
    assert plan.tile_c < 40 and plan.tile_k < 20 and plan.tile_rows < 9
    lowered, _, _ = _check(layer, TINY)
    accumulating = [c for c in lowered.program.queues[Unit.CONV] if c.opcode == Opcode.CONV and c.accumulate]
    assert accumulating, "channel chunks must accumulate"


def test_grouped_layer_too_large_for_whole_groups_chunks_one_group_per_tile():
    """A group's weights (8 x 8 x 5 x 5 = 1600 bytes) exceed half the tiny weight buffer: each tile then holds
    one group and accumulates chunks of its input channels as a dense conv."""
    rng = np.random.default_rng(6)
    x = rng.integers(-128, 128, (1, 16, 7, 7)).astype(np.int8)
    w = rng.integers(-127, 128, (16, 8, 5, 5)).astype(np.int8)
    layer = ConvLayer(x=x, w=w, bias=rng.integers(-999, 999, 16).astype(np.int32), multiplier=np.full(16, 30000),
                      shift=np.full(16, 22), x_zero_point=-3, padding=(2, 2, 2, 2), groups=2)
    plan = plan_tiles(layer, TINY)
    assert plan.tile_k == 8 and plan.tile_c < 8
    lowered, _, _ = _check(layer, TINY, seed=1)
    convs = [c for c in lowered.program.queues[Unit.CONV] if c.opcode == Opcode.CONV]
    assert all(c.groups == 1 for c in convs) and any(c.accumulate for c in convs)


def test_depthwise_stride2_dilated_uint8_into_int16():
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (1, 12, 13, 10)).astype(np.uint8)
    w = rng.integers(-128, 128, (24, 1, 3, 3)).astype(np.int8)
    layer = ConvLayer(x=x, w=w, bias=rng.integers(-999, 999, 24).astype(np.int32),
                      multiplier=rng.integers(1, 65536, 24), shift=rng.integers(8, 14, 24), x_zero_point=128,
                      out_zero_point=-7, out_type=DType.INT16, stride=(2, 2), dilation=(2, 1),
                      padding=(2, 1, 1, 0), groups=12, qmin=-3000, qmax=30000, rounding=Rounding.FLOOR)
    for tiles in ({}, {"tile_k": 4, "tile_rows": 2}):
        _check(layer, **tiles)


@pytest.mark.parametrize("out_type", [DType.UINT8, DType.INT16])
def test_conv_requant_lut_layer(out_type):
    rng = np.random.default_rng(11)
    layer = random_layer(rng, with_lut=True)
    layer.out_type = out_type
    if out_type == DType.INT16:
        layer.lut = np.sort(rng.integers(-2 ** 15, 2 ** 15, 2 ** 6 + 1)).astype(np.int16)
        layer.lut_index_shift, layer.lut_input_min = 9, -2 ** 14      # inputs below -2**14 clip to entry 0
    else:
        layer.lut = rng.integers(0, 256, 256).astype(np.int16)
    lowered, result, _ = _check(layer, tile_rows=1, seed=4)
    luts = lowered.program.queues[Unit.LUT]
    assert len(luts) == len(lowered.program.queues[Unit.REQUANT]) and result.stats.commands["LUT"] == len(luts)
    with pytest.raises(ValueError, match="lut: an UINT8 output needs 256 entries"):
        bad = random_layer(np.random.default_rng(11), with_lut=True)
        bad.out_type, bad.lut = DType.UINT8, np.full(256, -1, np.int16)
        lower_conv_layer(bad)


def test_lowered_program_survives_the_file_format(tmp_path):
    layer = random_layer(np.random.default_rng(9))
    lowered = lower_conv_layer(layer)
    lowered.program.write(tmp_path / "layer.bin")
    again = Program.read(tmp_path / "layer.bin")
    result = run(again, Memory.create(again.config, lowered.dram))
    np.testing.assert_array_equal(lowered.read_output(result.memory), _golden(layer))


def test_bad_layers_and_tiles_are_rejected():
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 4, 6, 6)).astype(np.int8)
    w = rng.integers(-128, 128, (4, 4, 3, 3)).astype(np.int8)
    base = dict(x=x, w=w, bias=np.zeros(4, np.int32), multiplier=np.ones(4, np.int64), shift=np.zeros(4, np.int64))
    with pytest.raises(ValueError, match=r"padding top = 3: at most min\(dilation\*\(kernel-1\) = 2"):
        lower_conv_layer(ConvLayer(**base, padding=(3, 0, 0, 0)))
    with pytest.raises(ValueError, match="tile_k = 5"):
        lower_conv_layer(ConvLayer(**base), tile_k=5)
    with pytest.raises(ValueError, match=r"shift = 48: outside 0..47"):
        lower_conv_layer(ConvLayer(**{**base, "shift": np.full(4, 48)}))
    huge = ConvLayer(**{**base, "w": rng.integers(-128, 128, (4, 4, 15, 15)).astype(np.int8),
                        "x": rng.integers(-128, 128, (1, 4, 20, 20)).astype(np.int8)})
    with pytest.raises(ValueError, match="does not fit the buffers.*weight"):
        lower_conv_layer(huge, hardware_config_from_dict({"buffers": {"weight": {"bytes": 256}}}))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(200))
def test_many_random_layers_and_schedules(seed):
    rng = np.random.default_rng(10_000 + seed)
    layer = random_layer(rng, max_channels=48, max_size=20, with_lut=seed % 4 == 1)
    config = TINY if seed % 2 else None
    try:
        _check(layer, config, seed=seed)
    except ValueError as exc:     # a layer too large for the tiny machine must say so
        assert "does not fit the buffers" in str(exc)


@pytest.mark.parametrize("producer, consumer, space", [
    (Unit.CONV, Unit.LOAD, "ACT"),          # write-after-read: the next input tile overwrites a half in use
    (Unit.REQUANT, Unit.CONV, "ACC"),       # write-after-read on the accumulator halves
    (Unit.STORE, Unit.REQUANT, "OUT"),      # write-after-read on the output halves
    (Unit.REQUANT, Unit.STORE, "OUT"),      # read-after-write: STORE would read before REQUANT wrote
])
def test_dropping_a_token_queue_is_caught_as_a_hazard(producer, consumer, space):
    rng = np.random.default_rng(21)
    x = rng.integers(-128, 128, (1, 8, 12, 6)).astype(np.int8)
    w = rng.integers(-128, 128, (8, 8, 3, 3)).astype(np.int8)
    layer = ConvLayer(x=x, w=w, bias=np.zeros(8, np.int32), multiplier=np.ones(8, np.int64), shift=np.full(8, 12),
                      padding=(1, 1, 1, 1))
    lowered = lower_conv_layer(layer, tile_rows=2)
    queues = lowered.program.queues
    for unit, drop_from in ((producer, "push"), (consumer, "pop")):
        other = consumer if drop_from == "push" else producer
        queues[unit] = [Command(c.opcode, c.args, c.pop - {other} if drop_from == "pop" else c.pop,
                                c.push - {other} if drop_from == "push" else c.push) for c in queues[unit]]
    with pytest.raises(HazardError, match=f"both access {space}"):
        for schedule in (None, 0, 1, 2):
            run(lowered.program, lowered.memory(), seed=schedule)


def _random_chain(rng: np.random.Generator, depth: int) -> list[ConvLayer]:
    eight_bit = (DType.INT8, DType.UINT8)
    layers = [random_layer(rng, out_types=eight_bit, with_lut=bool(rng.integers(2)))]
    for _ in range(depth - 1):
        layers.append(random_layer(rng, x=_golden(layers[-1]), out_types=eight_bit))
    return layers


@pytest.mark.parametrize("seed", range(4))
def test_chained_layers_match_golden_in_any_schedule(seed):
    rng = np.random.default_rng(300 + seed)
    layers = _random_chain(rng, 3)
    lowered = lower_conv_layers(layers, TINY if seed % 2 else DEFAULT)
    reference = run(lowered.program, lowered.memory())
    np.testing.assert_array_equal(lowered.read_output(reference.memory), _golden(layers[-1]))
    for schedule in range(3):
        assert run(lowered.program, lowered.memory(), seed=schedule).memory == reference.memory


def test_chain_without_a_store_to_load_token_is_a_hazard():
    """The next layer's LOAD of rows the previous layer stored waits for their STORE: dropping that token
    (its first, from both ends) leaves a race."""
    layers = _random_chain(np.random.default_rng(8), 2)
    lowered = lower_conv_layers(layers)
    stores, loads = lowered.program.queues[Unit.STORE], lowered.program.queues[Unit.LOAD]
    waiting = next(i for i, c in enumerate(loads) if Unit.STORE in c.pop)
    loads[waiting] = Command(loads[waiting].opcode, loads[waiting].args, loads[waiting].pop - {Unit.STORE},
                             loads[waiting].push)
    first = next(i for i, c in enumerate(stores) if Unit.LOAD in c.push)
    stores[first] = Command(stores[first].opcode, stores[first].args, stores[first].pop,
                            stores[first].push - {Unit.LOAD})
    with pytest.raises(HazardError, match="are not ordered by tokens"):
        run(lowered.program, lowered.memory())


def test_chain_rejects_mismatched_layers():
    layers = _random_chain(np.random.default_rng(9), 2)
    layers[1].x = layers[1].x[:, :, :-1]
    with pytest.raises(ValueError, match="layer 1 input .* does not match layer 0 output"):
        lower_conv_layers(layers)


def test_a_prepared_program_runs_many_inputs_as_fresh_runs_do():
    """One PreparedProgram (checked once) on several inputs and schedules: every result equal to run() on the
    bare program, writes and statistics included; a memory image of another DRAM size is refused."""
    from aipu.sim.interpreter import prepare

    rng = np.random.default_rng(11)
    layer = random_layer(rng, with_lut=True)
    lowered = lower_conv_layer(layer, **_random_tiles(rng, layer))
    prepared = prepare(lowered.program, lowered.memory().dram.size)
    for trial in range(3):
        info = np.iinfo(layer.x.dtype)
        x = rng.integers(info.min, info.max + 1, layer.x.shape).astype(layer.x.dtype)
        memory = lowered.memory(lowered.dram_with_input(x))
        seed = None if trial == 0 else trial
        fresh, again = run(lowered.program, memory, seed=seed), prepared.run(memory, seed=seed)
        assert again.memory == fresh.memory and again.trace == fresh.trace and again.writes == fresh.writes
        assert again.stats.to_dict() == fresh.stats.to_dict()
        assert np.array_equal(lowered.read_output(again.memory), dataclasses.replace(layer, x=x).reference())
    with pytest.raises(ValueError, match="prepared for"):
        prepared.run(Memory.create(lowered.program.config, lowered.memory().dram.size + 16))


@pytest.mark.parametrize("seed", range(6))
def test_leaky_layers_take_the_second_multiplier_per_channel(seed):
    """Leaky ReLU / PReLU fused into REQUANT (docs/arithmetic.md D11): records carry the negative pair."""
    rng = np.random.default_rng(100 + seed)
    layer = random_layer(rng, out_types=(DType.INT8, DType.INT16))
    k = layer.w.shape[0]
    layer.negative_multiplier = rng.integers(1, 2 ** 14, k)
    layer.negative_shift = layer.shift + rng.integers(0, 4, k)
    lowered, _, expected = _check(layer, **_random_tiles(rng, layer))
    assert (expected < layer.out_zero_point).any()          # some outputs took the negative side
    requant = lowered.program.queues[Unit.REQUANT][0]
    assert requant.args["leaky"] == 1


@pytest.mark.parametrize("channels, size, groups, kernel, stride", [(32, 40, 32, 3, 1), (96, 14, 96, 5, 2),
                                                                    (64, 14, 1, 3, 1), (48, 20, 12, 3, 1)])
def test_automatic_tiles_are_within_a_tenth_of_the_fastest_alternative_on_the_cycle_model(channels, size, groups,
                                                                                          kernel, stride):
    """The planner's estimate (DMA words and MAC blocks) ranks plans as the cycle model does: one-group,
    one-row and half-K tiles, which DRAM bytes alone would favour for depthwise layers, are not faster."""
    from aipu.sim.cycle import simulate

    rng = np.random.default_rng(channels)
    layer = ConvLayer(x=rng.integers(-128, 128, (1, channels, size, size)).astype(np.int8),
                      w=rng.integers(-128, 128, (channels, channels // groups, kernel, kernel)).astype(np.int8),
                      bias=np.zeros(channels, np.int32), multiplier=np.full(channels, 30000),
                      shift=np.full(channels, 30), stride=(stride, stride), padding=(kernel // 2,) * 4, groups=groups)

    def cycles(**tiles) -> int:
        lowered = lower_conv_layer(layer, **tiles)
        return simulate(lowered.program, lowered.memory()).total_cycles

    chosen = cycles()
    alternatives = [cycles(tile_k=channels // groups), cycles(tile_rows=1), cycles(tile_k=channels // 2)]
    assert chosen <= 1.1 * min(alternatives), (chosen, alternatives)
