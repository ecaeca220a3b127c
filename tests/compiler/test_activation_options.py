"""`aipu compile --activations` (docs/compiler.md §3.3): int16 for every tensor the units let be int16, and
T/AI 115.1-2021's fixed-point activations at power-of-two scales; programs bit-exact with the quantized model,
every bad request refused by name."""
from __future__ import annotations

import math

import numpy as np
import pytest

from aipu.app.cli import main
from aipu.compiler.quant_options import QuantOptions
from aipu.sim.machine.errors import InputError
from tests.compiler.onnx_models import assert_program_is_the_model, compile_on_noise, mobilenet_like, resnet_like

IMAGES = np.random.default_rng(5).standard_normal((2, 3, 16, 16)).astype(np.float32)


def test_int16_activations_widen_what_tables_pooling_and_outputs_read(tmp_path):
    compiled = compile_on_noise(tmp_path, mobilenet_like(), QuantOptions(activations="int16"))
    qmodel = compiled.qmodel
    wide = {name for name, tensor in qmodel.tensors.items() if tensor.dtype == np.int16}
    readers = {name: [op for op in qmodel.ops if name in op.inputs] for name in wide}
    assert len(wide) >= 3 and qmodel.outputs[0] in wide
    assert all(type(op).__name__ in ("QLut", "QPool", "QLayout") for ops in readers.values() for op in ops)
    note = next(note for note in qmodel.notes if note.startswith("--activations int16"))
    assert f"{len(wide)} tensors int16" in note
    assert_program_is_the_model(compiled, IMAGES)


def test_pow2_activations_are_int8_at_power_of_two_scales(tmp_path):
    compiled = compile_on_noise(tmp_path, resnet_like(), QuantOptions(activations="pow2", weights="int4"))
    computed = [tensor for name, tensor in compiled.qmodel.tensors.items() if name not in compiled.qmodel.constants]
    assert computed and all(tensor.dtype == np.int8 and tensor.zero_point == 0 for tensor in computed)
    assert all(math.log2(tensor.scale).is_integer() for tensor in computed)
    assert_program_is_the_model(compiled, IMAGES)


@pytest.mark.parametrize("fields, message", [
    (dict(activations="int5"), "--activations = 'int5': int8, int16"),
    (dict(activations=None), "--activations = None"),
    (dict(activations="pow2", scheme="pow2"), "--activations = 'pow2': int8 under --scheme pow2"),
])
def test_what_activations_cannot_be_is_refused_by_name(fields, message):
    with pytest.raises(InputError, match=message):
        QuantOptions(**fields)


def test_the_cli_takes_activations(tmp_path, capsys):
    import onnx

    onnx.save(mobilenet_like(), tmp_path / "model.onnx")
    np.save(tmp_path / "calib.npy", np.random.default_rng(2).normal(0, 1, (8, 3, 16, 16)).astype(np.float32))
    command = ["compile", str(tmp_path / "model.onnx"), "--calib", str(tmp_path / "calib.npy"), "-o",
               str(tmp_path / "out")]
    assert main([*command, "--activations", "pow2", "--quiet"]) == 0
    assert main([*command, "--activations", "int3"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == ("aipu compile: error: --activations = 'int3': "
                                                                "int8, int16, int4, pow2")


def test_brelu_calibration_compiles_bit_exact_and_takes_the_standard_s_n(tmp_path):
    compiled = compile_on_noise(tmp_path, mobilenet_like(), QuantOptions(method="brelu", n_std=3.5))
    extrema = compile_on_noise(tmp_path, mobilenet_like(), QuantOptions())
    narrower = [name for name, tensor in compiled.qmodel.tensors.items()
                if tensor.scale < extrema.qmodel.tensors[name].scale * 0.99]
    assert narrower, "N-sigma bounds clip the tails the extrema keep"
    assert_program_is_the_model(compiled, IMAGES)
    with pytest.raises(InputError, match="--n-std = 2.0: 3, 3.2 or 3.5 under --method brelu"):
        QuantOptions(method="brelu", n_std=2.0)
