"""Pre-quantized networks beyond convolutions (compiler/prequantized.py): MobileNet-, ResNet- and U-Net-like
graphs and one with the remaining quantized operators, pre-processed and quantized by onnxruntime.quantization
in both formats. Every layer is compared with onnxruntime on onnxruntime's own inputs (so one layer's
difference does not move the next): MAC layers bit for bit (against the exact integer reference where
onnxruntime is not exact, docs/arithmetic.md §4.5), the others (and ConvTranspose, which onnxruntime runs in
float) within the bound docs/compiler.md §6 states; the lowered program equals the quantized IR; the whole
network's top-1 agrees with onnxruntime's."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aipu.app.models.synthetic import GraphBuilder
from aipu.app.ort_compare import single_thread_session, static_quantization
from aipu.compiler.driver import compile_model
from aipu.compiler.normalize import UnsupportedNodes
from aipu.compiler.qir import QConv
from aipu.sim.interpreter import run
from aipu.sim.machine.errors import InputError
from tests.compiler.onnx_models import mobilenet_like, resnet_like, unet_like
from tests.compiler.test_prequantized import _cpu_has_vnni, _exact_layer

SAMPLES = 24


def _bound(op, tensors) -> int:
    """docs/compiler.md §6: one rounding of an integer rule against onnxruntime's float arithmetic is 1 step
    apart; a rescale after a rule that keeps its input's quantization adds the first rounding's half step of
    the input, x_scale / (2 y_scale) output steps."""
    if op.name.endswith("/rescale"):
        return int(1 + tensors[op.xs[0]].scale / (2 * tensors[op.y].scale))
    return 1


def operators_like(seed: int = 0, size: int = 16, classes: int = 10) -> onnx.ModelProto:
    """The quantized operators the other graphs lack: LeakyRelu, average pools (padding not counted, counted,
    none), concat of two branches, nearest Resize, a softmax head."""
    b = GraphBuilder(seed, 3, size)
    x = b.node("LeakyRelu", [b.conv("image", 3, 8)], alpha=0.1)
    x = b.node("AveragePool", [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1])           # windows at the edge differ
    left = b.node("AveragePool", [b.conv(x, 8, 8)], kernel_shape=[2, 2], strides=[2, 2])
    right = b.node("AveragePool", [b.conv(x, 8, 8, kernel=1)], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                   count_include_pad=1)                                          # every window counts 9
    right = b.node("MaxPool", [right], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Concat", [left, right], axis=1)
    x = b.node("Resize", [b.conv(x, 16, 8, kernel=1), "", b.const(np.array([1, 1, 2, 2], np.float32))],
               mode="nearest")
    x = b.node("Flatten", [b.node("GlobalAveragePool", [b.conv(x, 8, 8, stride=2)])])
    return b.model(b.node("Softmax", [b.fc(x, 8, classes)], axis=1))


def wide_pool(seed: int = 0, size: int = 16, classes: int = 10) -> onnx.ModelProto:
    """A global average over a 16x16 plane, wider than a CONV kernel (15): summed by a 1x1 conv instead."""
    b = GraphBuilder(seed, 3, size)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [b.node("Relu", [b.conv("image", 3, 8)])])])
    return b.model(b.fc(x, 8, classes))


BUILDERS = {"mobilenet": mobilenet_like, "resnet": resnet_like, "unet": unet_like, "operators": operators_like,
            "wide_pool": wide_pool}
CASES = [(name, quant_format) for name in BUILDERS for quant_format in ("QOperator", "QDQ")
         if (name, quant_format) != ("unet", "QOperator")]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    from onnxruntime.quantization.shape_inference import quant_pre_process

    root = tmp_path_factory.mktemp("prequantized_networks")
    rng = np.random.default_rng(7)
    paths, images = {}, {}
    for name, build in BUILDERS.items():
        float_path, processed = root / f"{name}.onnx", root / f"{name}_pre.onnx"
        onnx.save(build(), float_path)
        quant_pre_process(str(float_path), str(processed), skip_symbolic_shape=True)
        images[name] = rng.standard_normal((SAMPLES, 3, 16, 16)).astype(np.float32)
        for quant_format in ("QOperator", "QDQ"):
            paths[name, quant_format] = static_quantization(processed, root / f"{name}_{quant_format}.onnx",
                                                            images[name][:8], "image", quant_format=quant_format)
    return paths, images


def _onnxruntime_tensors(path, names: list[str]):
    """A session that also outputs every tensor of ``names`` the quantized model has."""
    model = onnx.load(path)
    present = {value for node in model.graph.node for value in node.output}
    listed = {output.name for output in model.graph.output}
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in names
                              if name in present and name not in listed)
    session = single_thread_session(model)
    return session, [output.name for output in model.graph.output]


@pytest.mark.parametrize("case", CASES, ids=[f"{name}-{fmt}" for name, fmt in CASES])
def test_every_layer_matches_onnxruntime_on_its_inputs_and_the_program_equals_the_ir(quantized, case):
    paths, images = quantized
    name, _ = case
    compiled = compile_model(paths[case])
    qmodel, network = compiled.qmodel, compiled.network
    assert any(op.name.endswith("/planes") for op in qmodel.ops) == (name == "wide_pool")
    session, names = _onnxruntime_tensors(paths[case], [op.y for op in qmodel.ops])
    counted_padding = {node.name for node in onnx.load(paths[case]).graph.node if "AveragePool" in node.op_type
                       and any(a.name == "count_include_pad" and a.i for a in node.attribute)}
    exact_macs = _cpu_has_vnni()
    worst, compared, agree = 0, set(), 0
    for image in images[name]:
        ort = dict(zip(names, session.run(None, {"image": image[None]})))
        x = qmodel.quantize_inputs({"image": image[None]})
        ours = qmodel.run(x, keep=True)
        fed = {**qmodel.constants, **x}        # each layer on onnxruntime's values of its inputs, where it has them
        for op in qmodel.ops:
            inputs_known = all(i in fed for i in op.inputs)
            assert inputs_known, op.name
            value = op.run(fed, qmodel.tensors)
            if op.y in ort and op.y not in qmodel.outputs:
                reference = ort[op.y]
                if isinstance(op, QConv) and op.requant.scale is not None and op.upsample == (1, 1):
                    np.testing.assert_array_equal(value, _exact_layer(op, fed, qmodel.tensors), err_msg=op.name)
                    if exact_macs:      # onnxruntime pads a counted average pool with code 0: the interior only
                        top, left, bottom, right = op.padding if op.name in counted_padding else (0, 0, 0, 0)
                        inner = (..., slice(top, value.shape[-2] - bottom), slice(left, value.shape[-1] - right))
                        np.testing.assert_array_equal(value[inner], reference[inner], err_msg=f"{op.name} vs ort")
                else:
                    steps = int(np.abs(value.astype(np.int64) - reference.astype(np.int64)).max())
                    assert steps <= _bound(op, qmodel.tensors), op.name
                    worst = max(worst, steps)
                fed[op.y] = reference
                compared.add(op.y)
            else:
                fed[op.y] = value
        result = run(network.program, network.memory(x))
        output = qmodel.outputs[0]
        np.testing.assert_array_equal(network.read(result.memory, output), ours[output])
        agree += int(np.argmax(ours[output]) == np.argmax(ort[names[0]]))
    assert len(compared) >= len(qmodel.ops) // 2           # most layers were checked against onnxruntime
    if exact_macs:      # elsewhere onnxruntime's own MAC layers saturate (docs/arithmetic.md §4.5): its top-1 is off
        assert agree >= 0.95 * len(images[name])


def test_a_float_operator_left_by_the_qoperator_format_is_named_with_the_way_out(quantized):
    paths, _ = quantized
    with pytest.raises(InputError, match=r"ConvTranspose.*QOperator format leaves float.*use QDQ"):
        compile_model(paths["unet", "QOperator"])


def test_the_quantized_operators_take_the_models_own_scales(quantized):
    paths, _ = quantized
    model = onnx.load(paths["operators", "QOperator"])
    ops = {node.op_type for node in model.graph.node}
    assert {"QLinearAveragePool", "QLinearConcat", "QLinearLeakyRelu", "QLinearSoftmax"} <= ops
    qmodel = compile_model(paths["operators", "QOperator"]).qmodel
    constants = {name: onnx.numpy_helper.to_array(init) for name, init in
                 ((init.name, init) for init in model.graph.initializer)}
    checked = 0
    for node in model.graph.node:
        if node.op_type in ("QLinearLeakyRelu", "QLinearSoftmax", "QLinearAveragePool") and \
                node.output[0] in qmodel.tensors:       # (a graph output takes the graph's name)
            checked += 1
            spec = qmodel.tensors[node.output[0]]
            assert spec.scale == float(constants[node.input[3]]) and spec.zero_point == int(constants[node.input[4]])
    assert checked >= 3


SCALES = [0.0, -1.0, float("nan"), float("inf"), 1e30, 1e-30, 0.5]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_quantized_operators_compile_or_fail_in_one_line(quantized, tmp_path, data):
    """Well-formed quantized models with one quantized operator damaged: inputs cut, a scale or zero point
    replaced, an attribute changed. Either it compiles or one InputError names what is wrong."""
    paths, _ = quantized
    model = onnx.load(paths[data.draw(st.sampled_from([("mobilenet", "QOperator"), ("operators", "QOperator")]))])
    nodes = [node for node in model.graph.node if node.domain == "com.microsoft" or node.op_type.startswith("QLinear")]
    node = data.draw(st.sampled_from(nodes))
    damage = data.draw(st.sampled_from(["cut", "scale", "zero_point", "attribute"]))
    initializers = {init.name: init for init in model.graph.initializer}
    if damage == "cut":
        keep = data.draw(st.integers(1, len(node.input) - 1))
        del node.input[keep:]
    elif damage in ("scale", "zero_point"):
        names = [name for name in node.input if name in initializers]
        name = data.draw(st.sampled_from(names))
        if damage == "scale":
            value = np.array(data.draw(st.sampled_from(SCALES)), np.float32)
        else:
            dtype = data.draw(st.sampled_from([np.int8, np.uint8, np.int32]))
            low, high = (-300, 300) if dtype == np.int32 else (np.iinfo(dtype).min, np.iinfo(dtype).max)
            value = np.array(data.draw(st.integers(low, high)), dtype)
        initializers[name].CopyFrom(onnx.numpy_helper.from_array(value.reshape(-1)[:1].reshape(()), name))
    else:
        name = data.draw(st.sampled_from(["axis", "kernel_shape", "alpha", "opset", "channels_last"]))
        value = data.draw(st.sampled_from([-5, 0, 3, 99])) if name != "kernel_shape" else [0, 3]
        node.attribute.extend([onnx.helper.make_attribute(name, value)])
    path = tmp_path / "damaged.onnx"
    onnx.save(model, path)
    try:
        compile_model(path)
    except UnsupportedNodes as error:          # a header line, then a line per operator type
        assert str(error).startswith(f"{path}: ") and "\n  " in str(error)
    except InputError as error:
        assert "\n" not in str(error) and str(error)
