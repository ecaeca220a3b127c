"""Convs with few input channels unrolled onto the MAC array's rows (compiler/lowering/im2col.py): LOAD gathers
each output pixel's kernel window, CONV runs a 1x1 conv over k_h * k_w * C channels. The interpreter's result
equals the golden model's on stems and their edge cases (padding at every border, zero points that make the
padding matter, strides, vertical dilation, images narrower than the kernel), the tiler chooses the mapping
where the cycle model finds it faster, and a conv + ReLU + max pool stem of a network stays bit-exact."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.app.models.synthetic import GraphBuilder
from aipu.compiler.lowering.conv_layer import ConvLayer
from aipu.compiler.lowering.conv_layers import lower_conv_layer
from aipu.compiler.lowering.conv_plan import plan_tiles
from aipu.compiler.lowering.im2col import UnrolledWindow
from aipu.sim.cycle import simulate
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import DEFAULT, Buffer
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.timing.conv import useful_macs
from aipu.sim.timing.dma import dram_phases
from tests.compiler.test_conv_layers import TINY
from tests.compiler.test_lowering import _check_every_tensor
from tests.compiler.test_quantize import _compile


def conv_layer(channels: int, size: tuple[int, int], out_channels: int, kernel: int, *, stride=(1, 1),
               padding=(0, 0, 0, 0), dilation=(1, 1), dtype=np.int8, zero_point: int = 0, groups: int = 1,
               seed: int = 0) -> ConvLayer:
    """A random layer whose sums reach the output range's middle (the multiplier scaled to its fan-in)."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (1, channels, *size)).astype(dtype)
    w = rng.integers(-128, 128, (out_channels, channels // groups, kernel, kernel)).astype(np.int8)
    return ConvLayer(x=x, w=w, bias=rng.integers(-999, 999, out_channels).astype(np.int32),
                     multiplier=np.full(out_channels, 1 << 14), shift=np.full(out_channels, 20),
                     x_zero_point=zero_point, w_zero_point=-3, stride=stride, padding=padding, dilation=dilation,
                     groups=groups)


STEMS = {   # name: conv_layer arguments
    "7x7s2_pad3_c3_int8": (3, (19, 23), 10, 7, dict(stride=(2, 2), padding=(3,) * 4, zero_point=-7)),
    "7x7s2_pad3_c3_uint8": (3, (21, 17), 20, 7, dict(stride=(2, 2), padding=(3,) * 4, dtype=np.uint8,
                                                      zero_point=131)),
    "7x7s2_pad3_c1": (1, (17, 15), 6, 7, dict(stride=(2, 2), padding=(3,) * 4, zero_point=9)),
    "7x7s2_pad3_c4_uint8": (4, (15, 19), 18, 7, dict(stride=(2, 2), padding=(3,) * 4, dtype=np.uint8,
                                                      zero_point=77)),
    "3x3s1_pad1_c3": (3, (9, 13), 8, 3, dict(padding=(1,) * 4, dtype=np.uint8, zero_point=200)),
    "5x5s2_asymmetric_pad": (2, (11, 12), 5, 5, dict(stride=(2, 2), padding=(2, 1, 0, 4), zero_point=-100)),
    "3x3s3_no_pad": (3, (13, 14), 4, 3, dict(stride=(3, 3))),
    "3x3_dilated_rows": (2, (9, 10), 7, 3, dict(padding=(4, 1, 3, 1), dilation=(2, 1), zero_point=5)),
    "7x7_narrower_than_kernel": (3, (9, 5), 6, 7, dict(stride=(1, 2), padding=(3,) * 4, zero_point=-60)),
}


def _check(layer: ConvLayer, config=DEFAULT, seed=None, **tiles):
    lowered = lower_conv_layer(layer, config, unrolled=True, **tiles)
    result = run(lowered.program, lowered.memory(), seed=seed)
    np.testing.assert_array_equal(lowered.read_output(result.memory), layer.reference())
    return lowered


@pytest.mark.parametrize("name", list(STEMS))
def test_unrolled_stems_match_the_golden_model(name):
    channels, size, out_channels, kernel, options = STEMS[name]
    layer = conv_layer(channels, size, out_channels, kernel, **options)
    lowered = _check(layer, seed=3)
    window = UnrolledWindow.of(layer)
    convs = lowered.program.queues[Unit.CONV]
    assert all((c.k_h, c.k_w, c.in_c, c.stride_h, c.stride_w) == (1, 1, window.depth, 1, 1) for c in convs)
    loads = [c for c in lowered.program.queues[Unit.LOAD] if c.buffer == Buffer.ACT]
    assert len(loads) == window.out_h * window.loads_per_row() * -(-out_channels // lowered.plan.tile_k)


@pytest.mark.parametrize("name", [*STEMS, "patchify_4x4s4", "patchify_narrow"])
def test_the_estimate_walks_the_dram_words_of_the_window_loads(name):
    """UnrolledCost's input words (taken once per layer) are those the DMA walks for each k-tile's LOADs."""
    channels, size, out_channels, kernel, options = {
        **STEMS, "patchify_4x4s4": (3, (32, 32), 16, 4, dict(stride=(4, 4))),
        "patchify_narrow": (3, (8, 4), 16, 4, dict(stride=(4, 4), padding=(0, 0, 0, 3)))}[name]
    layer = conv_layer(channels, size, out_channels, kernel, **options)
    lowered = lower_conv_layer(layer, unrolled=True)
    walked = sum(dram_phases(DEFAULT, command).words for command in lowered.program.queues[Unit.LOAD]
                 if command.buffer == Buffer.ACT)
    k_tiles = -(-out_channels // lowered.plan.tile_k)
    assert UnrolledWindow.of(layer).input_words(DEFAULT.dram.bytes_per_cycle) * k_tiles == walked


@pytest.mark.parametrize("tiles", [dict(tile_k=3, tile_rows=2), dict(tile_k=20, tile_rows=3), dict(tile_rows=11)])
def test_unrolled_tiles_of_several_rows_and_k_tiles_stack_their_windows(tiles):
    channels, size, out_channels, kernel, options = STEMS["7x7s2_pad3_c3_uint8"]
    _check(conv_layer(channels, size, out_channels, kernel, **options), seed=1, **tiles)


def test_unrolled_layers_fit_a_tiny_machine():
    layer = conv_layer(3, (10, 9), 12, 3, stride=(2, 1), padding=(1,) * 4, dtype=np.uint8, zero_point=90)
    lowered = _check(layer, TINY, seed=2)
    assert len(lowered.program.queues[Unit.CONV]) > 1


@pytest.mark.parametrize("options", [dict(groups=3), dict(dilation=(1, 2), padding=(0, 2, 0, 2))])
def test_what_cannot_run_unrolled_is_refused_when_forced(options):
    layer = conv_layer(3, (9, 9), 6, 3, **options)
    assert not plan_tiles(layer).unrolled
    with pytest.raises(ValueError, match="unrolled"):
        plan_tiles(layer, unrolled=True)


def test_a_pointwise_conv_or_chunked_channels_stay_plain():
    assert UnrolledWindow.of(conv_layer(3, (9, 9), 6, 1)) is None
    with pytest.raises(ValueError, match="unrolled"):
        plan_tiles(conv_layer(3, (9, 9), 6, 3), tile_c=2, unrolled=True)


def test_an_output_row_of_padding_only_stays_plain():
    """Vertical dilation 3 over a 1-row image: output row 0 reads rows -2 and 1, neither in the image."""
    layer = conv_layer(2, (1, 6), 4, 2, padding=(2, 0, 2, 0), dilation=(3, 1))
    assert UnrolledWindow.of(layer) is None


CHOICES = {   # conv_layer arguments; the cycle model decides which mapping is faster
    "resnet_stem_56": (3, (56, 56), 64, 7, dict(stride=(2, 2), padding=(3,) * 4)),
    "one_channel_5x5": (1, (28, 28), 32, 5, dict(padding=(2,) * 4)),
    "one_channel_3x3_small": (1, (28, 28), 16, 3, dict(padding=(1,) * 4)),
    "eight_channels_3x3": (8, (56, 56), 32, 3, dict(padding=(1,) * 4)),
    "sixteen_channels_3x3": (16, (56, 56), 32, 3, dict(padding=(1,) * 4)),
}


@pytest.mark.parametrize("name", list(CHOICES))
def test_the_tiler_unrolls_where_the_cycle_model_finds_it_faster(name):
    channels, size, out_channels, kernel, options = CHOICES[name]
    layer = conv_layer(channels, size, out_channels, kernel, **options)
    cycles = {}
    for unrolled in (False, True):
        lowered = lower_conv_layer(layer, unrolled=unrolled)
        cycles[unrolled] = simulate(lowered.program, lowered.memory()).total_cycles
    assert plan_tiles(layer).unrolled == (cycles[True] < cycles[False]), cycles


def test_the_resnet_stem_unrolled_keeps_the_array_busy():
    """ResNet's 7x7/2 stem on 224x224x3, DEFAULT: plain, 3 of the 16 rows (18.7 %); unrolled, 147 channels in
    10 row chunks, at least 80 % of the array over the layer, the LOADs under the CONVs' cycles."""
    layer = conv_layer(3, (224, 224), 64, 7, stride=(2, 2), padding=(3,) * 4, dtype=np.uint8, zero_point=128)
    lowered = lower_conv_layer(layer)
    assert lowered.plan.unrolled
    program = lowered.program
    timing = simulate(program, lowered.memory())
    macs = sum(useful_macs(command) for command in program.queues[Unit.CONV])
    assert macs / (DEFAULT.mac.rows * DEFAULT.mac.cols * timing.total_cycles) >= 0.8
    assert timing.busy[Unit.LOAD] < timing.busy[Unit.CONV]
    assert sum(c.opcode == Opcode.LOAD for c in program.queues[Unit.LOAD]) == 112 * 4 + 2   # + weights, records


def test_a_conv_relu_maxpool_stem_in_a_network_runs_bit_exact(tmp_path):
    b = GraphBuilder(4, 3, 48)
    x = b.node("Relu", [b.conv("image", 3, 32, kernel=7, stride=2)])
    y = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    rng = np.random.default_rng(4)
    _, qmodel = _compile(tmp_path, b.model(y), rng.normal(0, 1, (4, 3, 48, 48)).astype(np.float32))
    assert qmodel.tensors[qmodel.inputs[0]].zero_point != 0      # the padding value matters
    network, compared = _check_every_tensor(qmodel, DEFAULT, rng.normal(0, 1, (1, 3, 48, 48)).astype(np.float32),
                                            seed=5)
    assert len(compared) >= 3
    assert any(c.opcode == Opcode.CONV and c.in_c == 147 and c.k_h == 1 for c in network.program.queues[Unit.CONV])


def test_compressed_weights_decode_into_the_unrolled_layout():
    """WDEC writes [K][k_h][k_w][C], which is the unrolled 1x1 conv's [K][k_h * k_w * C]: the same stream."""
    layer = conv_layer(3, (15, 13), 12, 7, stride=(2, 2), padding=(3,) * 4, dtype=np.uint8, zero_point=140)
    rng = np.random.default_rng(1)
    layer.w[rng.random(layer.w.shape) < 0.8] = 0          # sparse enough for the stream to be smaller
    lowered = lower_conv_layer(layer, unrolled=True, compress="all")
    assert lowered.program.queues[Unit.WDEC]
    result = run(lowered.program, lowered.memory(), seed=4)
    np.testing.assert_array_equal(lowered.read_output(result.memory), layer.reference())


def test_transposed_conv_phases_unroll_over_their_input_window(tmp_path):
    """A transposed conv's phases are stride-1 convs on a window of the input (rows input_row apart) with
    sub-kernels, some taps zero: unrolled, their LOADs read the window inside the whole tensor."""
    b = GraphBuilder(1, 2, 24)
    y = b.conv_transpose("image", 2, 24, kernel=3, stride=2, pads=(1, 1, 1, 1))
    rng = np.random.default_rng(0)
    _, qmodel = _compile(tmp_path, b.model(y), rng.normal(0, 1, (2, 2, 24, 24)).astype(np.float32))
    network, _ = _check_every_tensor(qmodel, DEFAULT, rng.normal(0, 1, (1, 2, 24, 24)).astype(np.float32), seed=2)
    assert any(c.k_h == c.k_w == 1 and c.in_c > 2 for c in network.program.queues[Unit.CONV])     # unrolled
