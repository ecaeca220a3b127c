"""The shift-quantization patent's power-of-two scheme end to end (`aipu compile --scheme pow2`,
docs/compiler.md §3.1): every scale a power of two, 7-bit weights with one exponent per output channel, convolutions
requantized by the patent's forward step (docs/arithmetic.md §5.2), the lowered program bit-exact, accuracy
close to float."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from aipu.app.cli import main
from aipu.app.models.train_digits import MODEL_PATH
from aipu.compiler.driver import compile_model
from aipu.compiler.qir import QConv
from aipu.compiler.quant_options import QuantOptions
from aipu.sim import golden
from aipu.sim.machine.errors import InputError
from tests.compiler.onnx_models import assert_program_is_the_model, compile_on_noise, mobilenet_like, resnet_like
from tests.sim.golden.test_conv import tapwise_int64_conv

POW2 = QuantOptions(scheme="pow2")


@pytest.fixture(scope="module")
def digits_pow2(tmp_path_factory, digits_data):
    root = tmp_path_factory.mktemp("pow2")
    np.savez(root / "calib.npz", image=digits_data["calibration_images"][:64])
    np.savez(root / "eval.npz", image=digits_data["eval_images"], labels=digits_data["eval_labels"])
    return compile_model(MODEL_PATH, root / "calib.npz", options=POW2, evaluation_path=root / "eval.npz"), root


def _is_power_of_two(value: float) -> bool:
    return value > 0 and math.log2(value) == round(math.log2(value))


def test_every_scale_is_a_power_of_two_and_every_conv_shifts(digits_pow2):
    compiled, _ = digits_pow2
    qmodel = compiled.qmodel
    for tensor in qmodel.tensors.values():
        assert tensor.dtype == np.int8 and tensor.zero_point == 0 and _is_power_of_two(tensor.scale), tensor
    convs = [op for op in qmodel.ops if isinstance(op, QConv)]
    assert convs
    for op in convs:
        assert np.abs(op.w.astype(int)).max() <= golden.KERNEL_QUAN
        requant = op.requant
        assert requant.rounding == "floor" and requant.scale is None
        assert all(m == 1 or (n == 0 and _is_power_of_two(m)) for m, n in zip(requant.multiplier, requant.shift))
        assert -golden.FEATURE_QUAN <= requant.qmin and requant.qmax <= golden.FEATURE_QUAN


def test_each_conv_is_the_patents_forward_step(digits_pow2, digits_data):
    """S620-S640 literally: ReLU, clamp to +-QUAN * 2^s, arithmetic shift by s, low 8 bits."""
    compiled, _ = digits_pow2
    qmodel = compiled.qmodel
    values = qmodel.run(qmodel.quantize_inputs({"image": digits_data["eval_images"][:1]}), keep=True)
    checked = 0
    for op in qmodel.ops:
        if not (isinstance(op, QConv) and op.upsample == (1, 1) and np.all(op.requant.multiplier == 1)):
            continue
        x = values[op.x] if values[op.x].ndim == 4 else values[op.x][..., None, None]
        acc = tapwise_int64_conv(x, op.w, 0, op.w_zero_point, op.stride, op.padding, op.dilation, op.groups)
        acc = acc + op.bias.astype(np.int64).reshape(1, -1, 1, 1)
        s = op.requant.shift.reshape(1, -1, 1, 1)
        quan = golden.FEATURE_QUAN
        if op.requant.qmin == 0:
            acc = np.maximum(acc, 0)
        literal = np.clip(acc, -quan * 2 ** s, quan * 2 ** s) >> s
        literal = ((literal + 128) % 256 - 128).astype(np.int8)
        literal = np.minimum(literal, op.requant.qmax)          # a fused ReLU6 narrows the top further
        np.testing.assert_array_equal(values[op.y].reshape(literal.shape), literal, err_msg=op.name)
        checked += 1
    assert checked >= 3


def test_pow2_accuracy_and_the_program_is_bit_exact(digits_pow2, digits_data):
    compiled, _ = digits_pow2
    evaluation = compiled.evaluation
    # measured: float 95.83 %, pow2 94.17 % (7-bit weights, floor shifts), agreement 98.1 %
    assert evaluation["npu_top1"] >= evaluation["float_top1"] - 0.03
    assert_program_is_the_model(compiled, digits_data["eval_images"][:4])


@pytest.mark.parametrize("build", [mobilenet_like, resnet_like])
def test_pow2_networks_with_eltwise_tables_and_pooling_lower_bit_exact(tmp_path, build):
    compiled = compile_on_noise(tmp_path, build(), POW2)
    qmodel = compiled.qmodel
    assert all(_is_power_of_two(t.scale) for t in qmodel.tensors.values() if t.name not in qmodel.constants)
    assert_program_is_the_model(compiled, np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32))


def test_the_cli_takes_the_scheme_and_refuses_others(digits_pow2, capsys):
    _, root = digits_pow2
    assert main(["compile", str(MODEL_PATH), "--calib", str(root / "calib.npz"), "-o", str(root / "out"),
                 "--scheme", "pow2", "--quiet"]) == 0
    assert json.loads((root / "out" / "manifest.json").read_text())["quantization"]["scheme"] == "pow2"
    capsys.readouterr()
    assert main(["compile", str(MODEL_PATH), "--calib", str(root / "calib.npz"), "-o", str(root / "bad"),
                 "--scheme", "log2"]) == 2
    error = capsys.readouterr().err.strip()
    assert "--scheme" in error and "'log2'" in error and "pow2" in error and "\n" not in error
    with pytest.raises(InputError, match="--scheme"):
        QuantOptions(scheme="float")
