"""`aipu compile --compress`: conv weight tiles as npu-profile streams that WDEC decodes on chip. The program
must compute what the quantized IR computes, bit for bit, in any legal schedule, with WDEC on its own queue."""
from __future__ import annotations

import numpy as np
import pytest

from aipu import codec
from aipu.app.cli import main
from aipu.compiler.lowering.network import lower_model
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.errors import HazardError
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command
from tests.compiler.onnx_models import (GraphBuilder, assert_program_is_the_model, compile_on_noise, mobilenet_like,
                                        pruned, random_network, resnet_like, unet_like)
from tests.compiler.test_lowering import TINY, _check_every_tensor
from tests.compiler.test_quantize import _compile


def _decoded_weights(network) -> int:
    """Checks that every WDEC command's stream decodes in the profile (part by part) to int8 levels; returns how
    many there are."""
    commands = [command for command in network.program.queues[Unit.WDEC] if command.opcode == Opcode.WDEC]
    for command in commands:
        stream = network.dram[command.dram_addr:command.dram_addr + command.length].tobytes()
        levels = codec.decode_parts_compiled(stream, (command.out_c, command.in_c, command.k_h, command.k_w),
                                             command.parts)
        assert -128 <= levels.levels.min() and levels.levels.max() <= 127
    return len(commands)


@pytest.mark.parametrize("config", [DEFAULT, TINY], ids=["default", "tiny"])
@pytest.mark.parametrize("build", [mobilenet_like, resnet_like, unet_like])
def test_pruned_networks_run_bit_exact_with_weights_decoded_on_chip(tmp_path, build, config):
    rng = np.random.default_rng(6)
    _, qmodel = _compile(tmp_path, pruned(build()), rng.normal(0, 1, (12, 3, 16, 16)).astype(np.float32))
    image = rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)
    plain, _ = _check_every_tensor(qmodel, config, image, seed=4)
    network, compared = _check_every_tensor(qmodel, config, image, seed=4, compress="all")
    assert len(compared) >= 10 and _decoded_weights(network) >= 3
    packed = network.manifest()["weight_compression"]
    assert packed["stream_bytes"] < packed["weight_bytes"] and packed["bits_per_weight"] < 6
    assert network.dram.size < plain.dram.size, "raw weights that streams replace take no DRAM"


@pytest.mark.parametrize("seed", range(4))
def test_random_pruned_networks_with_compressed_weights(tmp_path, seed):
    rng = np.random.default_rng(seed)
    _, qmodel = _compile(tmp_path, pruned(random_network(seed)), rng.normal(0, 1, (8, 3, 12, 12)).astype(np.float32))
    for config in (DEFAULT, TINY):
        network, _ = _check_every_tensor(qmodel, config, rng.normal(0, 1, (1, 3, 12, 12)).astype(np.float32),
                                         seed=seed, compress="all")
        assert _decoded_weights(network)


def test_incompressible_tiles_are_loaded_raw(tmp_path):
    rng = np.random.default_rng(1)
    _, qmodel = _compile(tmp_path, mobilenet_like(), rng.normal(0, 1, (8, 3, 16, 16)).astype(np.float32))
    network = lower_model(qmodel, compress="all")
    packed = network.manifest()["weight_compression"]
    raw = [stream for stream in packed["streams"] if not stream["decoded"]]
    assert raw and all(stream["stream_bytes"] >= stream["weight_bytes"] for stream in raw)
    x = qmodel.quantize_inputs({qmodel.inputs[0]: rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)})
    result = run(network.program, network.memory(x))
    want = qmodel.run(x)
    for name in qmodel.outputs:
        np.testing.assert_array_equal(network.read(result.memory, name), want[name])


def test_cli_compiles_and_runs_compressed(tmp_path, capsys):
    import onnx

    rng = np.random.default_rng(2)
    onnx.save(pruned(resnet_like()), tmp_path / "model.onnx")
    np.save(tmp_path / "calib.npy", rng.normal(0, 1, (8, 3, 16, 16)).astype(np.float32))
    assert main(["compile", str(tmp_path / "model.onnx"), "--calib", str(tmp_path / "calib.npy"), "--compress",
                 "-o", str(tmp_path / "out"), "--quiet"]) == 0
    assert "tiles decoded by WDEC" in capsys.readouterr().out
    assert main(["run", str(tmp_path / "out"), "--input", str(tmp_path / "calib.npy"), "--compare-onnx"]) == 0
    assert "same argmax" in capsys.readouterr().out


def _without_token(network, unit: Unit, source: Unit, match) -> None:
    """Drops the ``match``-th token ``source`` -> ``unit`` from both ends (the n-th push pairs with the n-th pop)."""
    queues = network.program.queues
    for queue, side, other in ((queues[unit], "pop", source), (queues[source], "push", unit)):
        index = [i for i, command in enumerate(queue) if other in getattr(command, side)][match]
        command = queue[index]
        pop, push = (command.pop - {other}, command.push) if side == "pop" else (command.pop, command.push - {other})
        queue[index] = Command(command.opcode, command.args, pop, push)


@pytest.mark.parametrize("unit, source, match", [(Unit.CONV, Unit.WDEC, 0), (Unit.WDEC, Unit.CONV, 0),
                                                 (Unit.WDEC, Unit.CONV, -1)])
def test_every_wdec_token_is_needed(tmp_path, unit, source, match):
    rng = np.random.default_rng(5)
    _, qmodel = _compile(tmp_path, pruned(resnet_like()), rng.normal(0, 1, (8, 3, 16, 16)).astype(np.float32))
    network = lower_model(qmodel, TINY, compress="all")
    _without_token(network, unit, source, match)
    x = qmodel.quantize_inputs({qmodel.inputs[0]: rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)})
    with pytest.raises(HazardError, match="WDEC.*not ordered by tokens"):
        run(network.program, network.memory(x))


def _wide_conv(seed: int = 0):
    """A network whose middle conv (32 -> 128, 3x3: 36 864 weights) makes tiles long enough to split."""
    b = GraphBuilder(seed, 3, 16)
    x = b.node("Relu", [b.conv("image", 3, 32, stride=2)])
    x = b.node("Relu", [b.conv(x, 32, 128)])
    return b.model(b.fc(b.node("Flatten", [b.node("GlobalAveragePool", [x])]), 128, 10))


def _wdecs(network) -> list[Command]:
    return [command for command in network.program.queues[Unit.WDEC] if command.opcode == Opcode.WDEC]


def test_tiles_split_into_parts_for_four_engines_and_the_program_is_still_the_model(tmp_path):
    """With wdec.engines 4 the compiler splits a long tile into the most parts (4, 2) that cost at most 1 %
    more than one part, or 2 % where the plan finds WDEC the pole; the program equals the quantized model, and
    its WDECs take fewer cycles on four engines than the tile's one-part stream on one. On DEFAULT (one engine)
    every stream has one part (the plans may differ: they weigh WDEC's cycles)."""
    from aipu.codec.npu_profile import encode_profile_stream
    from aipu.compiler.lowering.weight_streams import POLE_PARTS_OVERHEAD
    from aipu.compiler.quant_options import QuantOptions
    from aipu.sim.machine.arch import hardware_config_from_dict
    from aipu.sim.timing import command_cycles

    four = hardware_config_from_dict({"wdec": {"engines": 4}})
    compiled = compile_on_noise(tmp_path, pruned(_wide_conv()), QuantOptions(), config=four, compress="all")
    network = compiled.network
    split = [command for command in _wdecs(network) if command.parts > 1]
    assert split and {command.parts for command in split} <= {2, 4}
    memory = Memory.create(four, network.dram)
    for command in split:
        shape = (command.out_c, command.in_c, command.k_h, command.k_w)
        stream = network.dram[command.dram_addr:command.dram_addr + command.length].tobytes()
        levels = codec.decode_parts_compiled(stream, shape, command.parts).levels
        whole = encode_profile_stream(levels)
        assert command.length <= (1 + POLE_PARTS_OVERHEAD) * len(whole)
        unsplit = Command.make(Opcode.WDEC, **{**command.args, "dram_addr": 0, "length": len(whole), "parts": 1})
        one = Memory.create(DEFAULT, np.frombuffer(whole, np.uint8))
        assert command_cycles(four, command, memory) < command_cycles(DEFAULT, unsplit, one)
    assert _decoded_weights(network) == len(_wdecs(network))
    assert_program_is_the_model(compiled, np.random.default_rng(1).standard_normal((2, 3, 16, 16), np.float32))
    default = compile_on_noise(tmp_path, pruned(_wide_conv()), QuantOptions(), compress="all").network
    assert _wdecs(default) and all(command.parts == 1 for command in _wdecs(default))
