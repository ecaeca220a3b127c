"""Every RTL unit that exists, together in one System, against the interpreter: random conv layers lowered by
the compiler (LOAD, CONV, REQUANT, LUT, STORE and whatever else it emits) must leave every buffer and DRAM
byte as the interpreter leaves them, on Amaranth's simulator and on the Verilog simulators ($AIPU_SIM); and
every command must start and retire in the cycles the cycle model (sim/cycle.py) gives it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from aipu.app.sample_layers import random_layer, shaped_layer
from aipu.compiler.lowering.conv_layers import lower_conv_layer
from aipu.sim.cosim.cocotb_run import run_on, verilog_backends
from aipu.sim.cosim.verilog import available_units
from aipu.sim.cosim.waves import mismatch_report
from aipu.sim.cycle import simulate
from aipu.sim.interpreter import run as interpret
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.isa import Opcode, Unit
from tests.compiler.test_unrolled_conv import conv_layer
from tests.rtl.configs import CONFIGS, SMALL

MAX_CYCLES = 1_000_000
RTL_LOWERING = {}      # the compiler's own choices: depthwise layers on DWCONV where its timing says faster
BACKENDS = pytest.mark.parametrize("backend", ["amaranth", *verilog_backends()])
# A Verilog build of the System with every real unit takes minutes for SMALL and many more for DEFAULT: the
# default suite runs the real units on Verilog on SMALL only, every program on one build large enough for the
# demo model's queues (builds are shared by programs up to their size); the rest is slow.


def check_layers(config, backend: str, seeds, **limits) -> dict:
    """Lower one random layer per seed, run it on the RTL and the interpreter; return the RTL result per seed."""
    units = available_units()
    results = {}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        layer = random_layer(rng, with_lut=bool(seed % 2), **limits)
        lowered = lower_conv_layer(layer, config, **RTL_LOWERING)
        used = {unit for unit, queue in lowered.program.queues.items() if queue}
        missing = used - set(units)
        if missing:     # only while a unit has not landed yet
            pytest.skip(f"no RTL yet for {sorted(u.name for u in missing)}, which the compiler emits")
        results[seed] = check_lowered(lowered, backend, f"seed {seed}")
    return results


def check_lowered(lowered, backend: str, name: str, dram=None, memory=None):
    """Run a lowered layer on ``backend`` with every unit and on the interpreter: the RTL must finish cleanly,
    retire every command and leave every byte as the interpreter does. ``dram``: the DRAM image with the
    input (default: the lowering's own); ``memory``: a whole memory image instead. Returns the RTL result."""
    units = list(available_units().values())
    memory = lowered.memory(dram) if memory is None else memory
    expected = interpret(lowered.program, memory)
    got = run_on(backend, lowered.program, memory, units, max_cycles=MAX_CYCLES)
    context = f"{name} on {backend}: {got.errors or ''}"
    assert got.done and not got.errors and not got.token_error and not got.dram_faults, context
    report = mismatch_report(lowered.program, memory, units, expected, got, simulator=backend)
    assert report is None, f"{context}\n{report}"
    assert all(len(got.cycles[unit]) == len(lowered.program.queues[unit]) for unit in Unit), context
    model = simulate(lowered.program, memory, dram="ports")   # the cycle model, with the RTL's DRAM ports
    assert {unit: got.cycles[unit] for unit in Unit} == model.cycles and got.total_cycles == model.total_cycles, \
        context
    return got


SMALL_LAYERS = {"seeds": [0, 1], "max_channels": 6, "max_size": 5}


def test_a_small_layer_is_bit_exact_on_amaranth():
    assert check_layers(SMALL, "amaranth", **SMALL_LAYERS)


@pytest.mark.parametrize("backend", verilog_backends())
def test_a_small_layer_is_bit_exact_on_verilog_cycle_for_cycle(backend):
    """Every real unit as Verilog: the interpreter's bytes, and the cycle model's cycles for every command (which
    the Amaranth run of the same layers also meets)."""
    assert check_layers(SMALL, backend, **SMALL_LAYERS)


@pytest.mark.slow
@BACKENDS
@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
def test_random_layers_are_bit_exact(config, backend):
    assert check_layers(config, backend, seeds=range(2, 12), max_channels=24, max_size=10)


# Shapes of real networks' layers: stride 2, 7x7 and 1x1 kernels, depthwise, channel counts that are not
# multiples of the array (edge tiles). Scaled down to SMALL's 1 KiB buffers for the default suite; the slow test
# runs the real sizes on DEFAULT.
NETWORK_SHAPES = {   # name: (channels, size, out_channels, kernel, stride, groups) on SMALL / on DEFAULT
    "resnet18_conv1_7x7_s2": ((3, 12, 6, 7, 2, 1), (3, 56, 64, 7, 2, 1)),
    "resnet18_down_3x3_s2": ((6, 8, 10, 3, 2, 1), (64, 28, 128, 3, 2, 1)),
    "resnet18_shortcut_1x1_s2": ((6, 8, 10, 1, 2, 1), (64, 28, 128, 1, 2, 1)),
    "mobilenet_dw_3x3_s2": ((10, 8, 10, 3, 2, 10), (40, 28, 40, 3, 2, 40)),
    "mobilenet_pw_1x1": ((10, 6, 6, 1, 1, 1), (40, 14, 24, 1, 1, 1)),
}


def check_compressed(config, backend: str, seeds) -> None:
    """Random layers with 70 % of their weights zero, lowered with compressed weights: WDEC decodes every tile
    whose stream is smaller, the rest of the program runs as before, and the output is the layer's reference."""
    decoded = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        layer = random_layer(rng, max_channels=8, max_size=6)
        layer = replace(layer, w=np.where(rng.random(layer.w.shape) < 0.7, 0, layer.w).astype(layer.w.dtype))
        lowered = lower_conv_layer(layer, config, compress="all", **RTL_LOWERING)
        decoded += len(lowered.program.queues[Unit.WDEC])
        got = check_lowered(lowered, backend, f"compressed seed {seed}")
        assert np.array_equal(lowered.read_output(got.memory), layer.reference())
    assert decoded, "some tile was decoded by WDEC"


@BACKENDS
def test_layers_with_compressed_weights_are_bit_exact(backend):
    check_compressed(SMALL, backend, seeds=[3, 4])


def check_unrolled(config, backend: str) -> None:
    """Convs with few input channels unrolled onto the array's rows (compiler/lowering/im2col.py): LOAD gathers
    every output pixel's kernel window, padded with the input's zero point at every border, and CONV runs a 1x1
    conv over the windows."""
    layers = {"5x5s2_c1_uint8": conv_layer(1, (9, 11), 5, 5, stride=(2, 2), padding=(2,) * 4, dtype=np.uint8,
                                           zero_point=100),
              "3x3s1_c3": conv_layer(3, (6, 7), 6, 3, padding=(1,) * 4, zero_point=-20)}
    for name, layer in layers.items():
        lowered = lower_conv_layer(layer, config, unrolled=True)
        got = check_lowered(lowered, backend, name)
        assert np.array_equal(lowered.read_output(got.memory), layer.reference())


@BACKENDS
def test_unrolled_convs_are_bit_exact(backend):
    check_unrolled(SMALL, backend)


def check_shaped(config, backend: str, name: str, shape) -> None:
    channels, size, out_channels, kernel, stride, groups = shape
    layer = shaped_layer(np.random.default_rng(size), channels, size, out_channels, kernel, stride=stride,
                         groups=groups)
    lowered = lower_conv_layer(layer, config, **RTL_LOWERING)
    got = check_lowered(lowered, backend, name)
    assert np.array_equal(lowered.read_output(got.memory), layer.reference())


@pytest.mark.parametrize("name", list(NETWORK_SHAPES))
def test_network_layer_shapes_are_bit_exact_on_verilog(name):
    for backend in verilog_backends():
        check_shaped(SMALL, backend, name, NETWORK_SHAPES[name][0])


def test_a_depthwise_layer_runs_on_dwconv_bit_exact_on_amaranth():
    """The compiler lowers MobileNet's depthwise shape to DWCONV tiles, and the System runs them exactly."""
    name = "mobilenet_dw_3x3_s2"
    channels, size, out_channels, kernel, stride, groups = NETWORK_SHAPES[name][0]
    layer = shaped_layer(np.random.default_rng(size), channels, size, out_channels, kernel, stride=stride,
                         groups=groups)
    assert any(command.opcode == Opcode.DWCONV for command in lower_conv_layer(layer, SMALL).program.queues[Unit.CONV])
    check_shaped(SMALL, "amaranth", name, NETWORK_SHAPES[name][0])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NETWORK_SHAPES))
def test_network_layers_at_their_real_size_are_bit_exact_on_verilator(name):
    check_shaped(DEFAULT, "verilator", name, NETWORK_SHAPES[name][1])


def check_demo_model(config, backend: str, tmp_path) -> None:
    """The embedded demo CNN compiled for ``config`` as `aipu demo` compiles it, on a held-out digit: the RTL
    leaves every byte as the interpreter does, and its logits are the quantized model's golden reference."""
    from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH
    from aipu.compiler.driver import compile_model

    data = np.load(DATA_PATH)
    np.savez(tmp_path / "calibration.npz", images=data["calibration_images"])
    compiled = compile_model(MODEL_PATH, tmp_path / "calibration.npz", config=config)
    network, qmodel = compiled.network, compiled.qmodel
    x = qmodel.quantize_inputs({qmodel.inputs[0]: data["eval_images"][:1]})
    got = check_lowered(network, backend, "demo model", memory=network.memory(x))
    output = qmodel.outputs[0]
    assert np.array_equal(network.read(got.memory, output), qmodel.run(x)[output])


def test_the_demo_model_is_bit_exact_on_verilog(tmp_path):
    """On SMALL (4x4 array, 1 KiB buffers: width splits, edge tiles) the whole network, pooling and the fully
    connected head included, runs on every unit."""
    for backend in verilog_backends():
        check_demo_model(SMALL, backend, tmp_path)


@pytest.mark.slow
def test_the_demo_model_on_the_demos_configuration(tmp_path):
    for backend in verilog_backends():
        check_demo_model(DEFAULT, backend, tmp_path)


def check_softmax_network(config, backend: str, tmp_path) -> None:
    """A classifier whose softmax head (docs/arithmetic.md §6.4) the LUT unit computes, compiled for ``config``:
    every byte as the interpreter leaves it, and the probabilities are the quantized model's."""
    from aipu.compiler.lowering.network import lower_model
    from tests.compiler.test_quantize import _compile
    from tests.compiler.test_softmax import CASES

    b, _, y = CASES["classifier"]()
    samples = np.random.default_rng(8).normal(0, 1, (8, 3, 8, 8)).astype(np.float32)
    _, qmodel = _compile(tmp_path, b.model(y), samples)
    network = lower_model(qmodel, config)
    assert any(command.opcode == Opcode.SOFTMAX for command in network.program.queues[Unit.LUT])
    x = qmodel.quantize_inputs({qmodel.inputs[0]: samples[:1]})
    got = check_lowered(network, backend, "softmax classifier", memory=network.memory(x))
    assert np.array_equal(network.read(got.memory, y), qmodel.run(x)[y])


@BACKENDS
def test_a_softmax_head_is_bit_exact(backend, tmp_path):
    check_softmax_network(SMALL, backend, tmp_path)
