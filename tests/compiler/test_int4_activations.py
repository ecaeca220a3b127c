"""`aipu compile --activations int4` (W4A4, T/AI 115.1-2021 §7.2.4.3): which tensors become INT4 and why the
others stay 8-bit, and that the program computes the quantized model bit for bit with INT4 REQUANT outputs,
packed STOREs and LOADs and CONV in_type INT4."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from aipu.app.cli import main
from aipu.app.models.synthetic import GraphBuilder
from aipu.compiler.activation_formats import check_activations
from aipu.compiler.lowering.network import lower_model
from aipu.compiler.quant_options import QuantOptions
from aipu.sim.machine.arch import DEFAULT, Buffer, DType
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode
from tests.compiler.onnx_models import assert_program_is_the_model, compile_on_noise, w4a4_chain
from tests.rtl.configs import SMALL

W4A4 = QuantOptions(weights="int4", activations="int4")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_on_noise(tmp_path_factory.mktemp("w4a4"), w4a4_chain(), W4A4)


def _int4_tensors(qmodel) -> list[str]:
    return [name for name, tensor in qmodel.tensors.items() if tensor.int4]


def _commands(network, opcode: Opcode) -> list:
    return [command for queue in network.program.queues.values() for command in queue if command.opcode == opcode]


def test_conv_outputs_that_int4_convs_read_are_int4(compiled):
    qmodel = compiled.qmodel
    int4 = _int4_tensors(qmodel)
    assert len(int4) == 5
    values = qmodel.run(qmodel.quantize_inputs({"image": np.ones((1, 3, 16, 16), np.float32)}), keep=True)
    for name in int4:
        tensor = qmodel.tensors[name]
        assert -8 <= tensor.zero_point <= 7 and values[name].min() >= -8 and values[name].max() <= 7
    writers = [op for op in qmodel.ops if op.y in int4]
    assert all(-8 <= op.requant.qmin <= op.requant.qmax <= 7 for op in writers)
    assert [row["dtype"] for row in compiled.layers if row["output"] in int4] == ["int4"] * 5


def test_the_notes_name_the_tensors_that_stay_8_bit(compiled):
    notes = [note for note in compiled.qmodel.notes if note.startswith("--activations int4")]
    assert len(notes) == 3
    reasons = {"read by a layer that keeps int8 weights (INT4 weights pack two input channels a byte: depthwise",
               "read by a GlobalAveragePool", "a model output"}
    assert all(sum(reason in note for note in notes) == 1 for reason in reasons), notes


@pytest.mark.parametrize("config", [DEFAULT, SMALL], ids=["default", "small"])
def test_the_program_is_the_w4a4_model(compiled, config):
    network = lower_model(compiled.qmodel, config)
    assert_program_is_the_model(dataclasses.replace(compiled, network=network),
                                np.random.default_rng(5).standard_normal((2, 3, 16, 16)).astype(np.float32))
    assert DType.INT4 in {command.out_type for command in _commands(network, Opcode.REQUANT)}
    assert DType.INT4 in {command.in_type for command in _commands(network, Opcode.CONV)}
    int4_outputs = [command for command in _commands(network, Opcode.REQUANT) if command.out_type == DType.INT4]
    assert all(command.channels % 2 == 0 for command in int4_outputs)
    chunked = [command for command in _commands(network, Opcode.CONV) if command.in_type == DType.INT4
               and command.accumulate]
    assert bool(chunked) == (config is SMALL)        # INT4 chunks start mid-tensor: packed DRAM offsets


def test_dual_int4_layers_read_and_write_int4_tensors(tmp_path):
    compiled = compile_on_noise(tmp_path, w4a4_chain(), QuantOptions(weights="int4-dual", activations="int4"))
    assert len(_int4_tensors(compiled.qmodel)) == 5
    assert_program_is_the_model(compiled, np.random.default_rng(6).standard_normal((1, 3, 16, 16)).astype(np.float32))
    dual = [command for command in _commands(compiled.network, Opcode.REQUANT) if command.dual]
    assert DType.INT4 in {command.out_type for command in dual} and len({command.out_type for command in dual}) > 1


def test_int4_tensors_take_half_the_dram_bytes_and_load_packed(compiled):
    network = lower_model(compiled.qmodel, DEFAULT, keep_all=True)
    regions = [network.plan.regions[name] for name in _int4_tensors(compiled.qmodel)]
    for name, (_, nbytes) in zip(_int4_tensors(compiled.qmodel), regions):
        assert nbytes == np.prod(compiled.qmodel.tensors[name].shape) // 2
    loads = [command for command in _commands(network, Opcode.LOAD) if command.buffer == Buffer.ACT
             and any(start <= command.dram_addr < start + nbytes for start, nbytes in regions)]
    assert {command.elem_type for command in loads} == {DType.UINT8}
    assert {command.pad_value for command in loads if command.pad_left} == {0x88}    # zero point -8, twice


def test_an_odd_channel_count_stays_8_bit_and_int8_weights_make_nothing_int4(tmp_path):
    b = GraphBuilder(1, 3, 16)
    odd = b.node("Relu", [b.conv(b.node("Relu", [b.conv("image", 3, 4)]), 4, 5)])
    qmodel = compile_on_noise(tmp_path, b.model(b.conv(odd, 5, 4, kernel=1, bn=False)), W4A4).qmodel
    assert any("an odd channel count" in note and repr(odd) in note for note in qmodel.notes), qmodel.notes
    qmodel = compile_on_noise(tmp_path, w4a4_chain(), QuantOptions(activations="int4")).qmodel
    assert not _int4_tensors(qmodel)
    assert any("no tensor is INT4" in note for note in qmodel.notes) and any(
        "read by a layer with int8 weights" in note for note in qmodel.notes)


def test_bad_activation_formats_are_refused_by_name():
    assert check_activations("--activations", "int4") == "int4"
    with pytest.raises(InputError, match="--activations = 'int2': int8, int16, int4, pow2"):
        QuantOptions(activations="int2")


def test_the_cli_takes_activations_int4_and_refuses_another(tmp_path, capsys):
    import onnx

    onnx.save(w4a4_chain(), tmp_path / "model.onnx")
    np.savez(tmp_path / "calib.npz", image=np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))
    common = ["compile", str(tmp_path / "model.onnx"), "--calib", str(tmp_path / "calib.npz"), "--quiet",
              "--weights", "int4"]
    assert main([*common, "-o", str(tmp_path / "out"), "--activations", "int4"]) == 0
    captured = capsys.readouterr()
    assert "int4" in captured.out and "note: --activations int4: 1 tensor stays 8-bit" in captured.err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["quantization"]["activations"] == "int4"
    assert sum(layer["dtype"] == "int4" for layer in manifest["layers"]) == 5
    assert main([*common, "-o", str(tmp_path / "bad"), "--activations", "uint4"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--activations = 'uint4': int8, int16, int4, pow2" in error[0], error
