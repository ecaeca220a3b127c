"""Pre-quantized models (compiler/prequantized.py): the embedded digits CNN quantized by onnxruntime.quantization
in both formats, per tensor and per channel, compiled without calibration; every layer equals an exact integer
reference, and onnxruntime's own output where onnxruntime is exact (CPUs with VNNI; docs/arithmetic.md §4.5)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from aipu.app.models.train_digits import MODEL_PATH
from aipu.app.ort_compare import single_thread_session, static_quantization
from aipu.compiler.driver import compile_model
from aipu.compiler.qir import QConv
from aipu.sim.interpreter import run
from aipu.sim.machine.errors import InputError
from tests.sim.golden.test_conv import tapwise_int64_conv

# (format, per channel, weight type): uint8 weights are asymmetric, a zero point per channel (folded, D4)
VARIANTS = [("QOperator", False, "QInt8"), ("QOperator", True, "QInt8"), ("QDQ", False, "QInt8"),
            ("QDQ", True, "QInt8"), ("QOperator", True, "QUInt8"), ("QDQ", True, "QUInt8")]


def _cpu_has_vnni() -> bool:
    """onnxruntime's u8 x s8 kernels are exact only with VNNI (docs/arithmetic.md §4.5)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


@pytest.fixture(scope="module")
def quantized_models(tmp_path_factory, digits_data):
    root = tmp_path_factory.mktemp("prequantized")
    return {variant: static_quantization(
                MODEL_PATH, root / f"{_variant_id(variant)}.onnx", digits_data["calibration_images"][:32], "image",
                quant_format=variant[0], per_channel=variant[1], weight_type=variant[2],
                symmetric_weights=variant[2] == "QInt8")
            for variant in VARIANTS}


def _variant_id(variant) -> str:
    quant_format, per_channel, weight_type = variant
    return f"{quant_format}-{'channel' if per_channel else 'tensor'}-{weight_type}"


def _exact_layer(op: QConv, values: dict, tensors: dict) -> np.ndarray:
    """The layer from its definition: int64 sums, then fp32(acc + bias) * scale, round half to even, + zp."""
    x = tensors[op.x]
    image = values[op.x] if values[op.x].ndim == 4 else values[op.x][..., None, None]     # FC: a 1x1 conv
    acc = tapwise_int64_conv(image, op.w, x.zero_point, op.w_zero_point, op.stride, op.padding, op.dilation,
                             op.groups)
    total = acc + op.bias.astype(np.int64).reshape(1, -1, 1, 1)
    scaled = total.astype(np.float32) * op.requant.scale.reshape(1, -1, 1, 1)
    y = tensors[op.y]
    info = np.iinfo(y.dtype)
    result = np.clip(np.rint(scaled).astype(np.int64) + y.zero_point, info.min, info.max).astype(y.dtype)
    return result.reshape(y.shape)


@pytest.mark.parametrize("variant", VARIANTS, ids=map(_variant_id, VARIANTS))
def test_onnxruntime_quantized_models_compile_bit_exact_per_layer(quantized_models, digits_data, variant):
    path = quantized_models[variant]
    compiled = compile_model(path)                          # no calibration: the model's own scales
    if variant[:2] == ("QOperator", True) and variant[2] == "QUInt8":
        # asymmetric per channel (onnxruntime's QDQ writes 128 everywhere): the zero points differ between
        # channels, are folded into the weights, and the weights beyond int8 are split into parts
        zero_points = [numpy_helper.to_array(init) for init in onnx.load(path).graph.initializer
                       if init.name.endswith("weight_zero_point")]
        assert any(np.unique(zero).size > 1 for zero in zero_points), "per-channel weight zero points differ"
        assert any(op.name.endswith("/weight_parts") for op in compiled.qmodel.ops)
    qmodel, network = compiled.qmodel, compiled.network
    convs = [op for op in qmodel.ops if isinstance(op, QConv)]
    assert len(convs) == 5 and all(op.requant.scale is not None for op in convs)   # 3 convs, pooling, FC
    assert qmodel.outputs == ("logits",)                     # the graph's name, not the exporter's internal one
    model = onnx.load(path)
    listed = {output.name for output in model.graph.output}
    produced = {name for node in model.graph.node for name in node.output}     # not the compiler's own tensors
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(op.y) for op in qmodel.ops
                              if op.y not in listed and op.y in produced)
    session = single_thread_session(model)
    names = [output.name for output in model.graph.output]
    exact_ort, agree = _cpu_has_vnni(), 0
    images = digits_data["eval_images"][:40]
    for image in images:
        ort = dict(zip(names, session.run(None, {"image": image[None]})))
        x = qmodel.quantize_inputs({"image": image[None]})
        values = qmodel.run(x, keep=True)
        for op in convs:
            np.testing.assert_array_equal(values[op.y], _exact_layer(op, values, qmodel.tensors), err_msg=op.name)
        if exact_ort:
            for op in (op for op in qmodel.ops if op.y in ort):
                if op.y in qmodel.outputs:       # named as the graph's float output: compare it dequantized
                    np.testing.assert_allclose(qmodel.tensors[op.y].dequantize(values[op.y]), ort[op.y], rtol=1e-6,
                                               atol=1e-6, err_msg=f"{op.name} vs onnxruntime")
                else:
                    np.testing.assert_array_equal(values[op.y], ort[op.y], err_msg=f"{op.name} vs onnxruntime")
        result = run(network.program, network.memory(x))
        logits = network.read(result.memory, qmodel.outputs[0])
        np.testing.assert_array_equal(logits, values[qmodel.outputs[0]])
        agree += int(np.argmax(logits) == np.argmax(ort[names[0]]))
    assert agree >= 0.99 * len(images)


def test_the_input_is_quantized_as_onnx_quantizelinear_does(quantized_models):
    qmodel = compile_model(quantized_models[("QOperator", False, "QInt8")]).qmodel
    spec = qmodel.tensors[qmodel.inputs[0]]
    halfway = np.array([0.5, 1.5, 2.5], np.float32) * np.float32(spec.scale)     # ties go to even
    assert spec.onnx_rounding and spec.quantize(halfway).tolist() == [0 + spec.zero_point, 2 + spec.zero_point,
                                                                      2 + spec.zero_point]


def test_the_program_directory_keeps_the_input_rounding(quantized_models, tmp_path):
    from aipu.compiler.driver import write
    from aipu.compiler.program_dir import read_program_dir

    path = quantized_models[("QDQ", True, "QInt8")]
    write(compile_model(path), tmp_path / "out", path)
    directory = read_program_dir(tmp_path / "out")
    assert directory.manifest["inputs"][0]["rounding"] == "onnx_quantize_linear"
    assert directory.inputs[0].tensor.onnx_rounding


def test_float_models_still_need_calibration(tmp_path):
    with pytest.raises(InputError, match="--calib"):
        compile_model(MODEL_PATH)
