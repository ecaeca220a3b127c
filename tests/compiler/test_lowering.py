"""Lowering a quantized model to one command program (compiler/lowering/): the interpreter's result equals
the quantized IR's reference (sim.golden) on every tensor, for the demo model, MobileNet- and ResNet-like
graphs and random networks, on the default and a tiny hardware configuration, in random legal schedules."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from aipu.app.models.train_digits import MODEL_PATH
from aipu.compiler.lowering.layout import LayoutLowering
from aipu.compiler.lowering.network import lower_model
from aipu.compiler.qir import QLayout
from aipu.sim.interpreter import run
from aipu.sim.machine.arch import DEFAULT, hardware_config_from_dict
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode, Unit
from aipu.app.models.synthetic import GraphBuilder
from tests.compiler.onnx_models import mobilenet_like, random_network, resnet_like, unet_like
from tests.compiler.test_quantize import _compile, float_node_alone

TINY = hardware_config_from_dict({"buffers": {"act": {"bytes": 2048}, "weight": {"bytes": 2048},
                                              "acc": {"bytes": 1024}, "out": {"bytes": 512},
                                              "param": {"bytes": 256}}})


def _check_every_tensor(qmodel, config, image: np.ndarray, seed=None, keep_all=True, compress=False):
    network = lower_model(qmodel, config, keep_all=keep_all, compress=compress)
    x = qmodel.quantize_inputs({qmodel.inputs[0]: image})
    want = qmodel.run(x, keep=True)
    result = run(network.program, network.memory(x), seed=seed)
    compared = [name for name in want if name in network.plan.regions and name in qmodel.tensors
                and (keep_all or name in qmodel.outputs)]
    for name in compared:
        np.testing.assert_array_equal(network.read(result.memory, name), want[name], err_msg=name)
    return network, compared


@pytest.mark.parametrize("config", [DEFAULT, TINY], ids=["default", "tiny"])
@pytest.mark.parametrize("build", [mobilenet_like, resnet_like, unet_like])
def test_mobilenet_and_resnet_like_networks_run_bit_exact(tmp_path, build, config):
    rng = np.random.default_rng(5)
    _, qmodel = _compile(tmp_path, build(), rng.normal(0, 1, (12, 3, 16, 16)).astype(np.float32))
    network, compared = _check_every_tensor(qmodel, config, rng.normal(0, 1, (1, 3, 16, 16)).astype(np.float32),
                                            seed=7)
    assert len(compared) >= 10
    assert network.program.queues[Unit.POOL], "pooling and eltwise ran on the NPU"


def test_demo_model_runs_whole_on_the_npu_and_reuses_dram(tmp_path, digits_data):
    _, qmodel = _compile(tmp_path, onnx.load(MODEL_PATH), digits_data["calibration_images"])
    kept, _ = _check_every_tensor(qmodel, DEFAULT, digits_data["eval_images"][:1])
    reused, compared = _check_every_tensor(qmodel, DEFAULT, digits_data["eval_images"][:1], keep_all=False)
    assert compared == list(qmodel.outputs) and reused.dram.size < kept.dram.size
    manifest = reused.manifest()
    assert [entry["name"] for entry in manifest["inputs"]] == list(qmodel.inputs)
    assert manifest["outputs"][0]["shape"] == [1, 10] and manifest["outputs"][0]["layout"] == "channels_last"


@pytest.mark.parametrize("seed", range(10))
def test_random_networks_run_bit_exact_in_random_schedules(tmp_path, seed):
    rng = np.random.default_rng(seed)
    _, qmodel = _compile(tmp_path, random_network(seed), rng.normal(0, 1, (8, 3, 12, 12)).astype(np.float32))
    for config in (DEFAULT, TINY):
        _check_every_tensor(qmodel, config, rng.normal(0, 1, (1, 3, 12, 12)).astype(np.float32), seed=seed)


def test_transposing_layouts_gather_through_dma_patterns(tmp_path):
    b = GraphBuilder(1, 3, 6)
    x = b.node("Relu", [b.conv("image", 3, 5)])
    x = b.node("Transpose", [x], perm=[0, 1, 3, 2])              # swap H and W
    x = b.node("Relu", [b.conv(x, 5, 6, kernel=1)])
    y = b.fc(b.node("Flatten", [x]), 6 * 6 * 6, 4)                # CHW order from channels-last data
    rng = np.random.default_rng(2)
    _, qmodel = _compile(tmp_path, b.model(y), rng.normal(0, 1, (6, 3, 6, 6)).astype(np.float32))
    layouts = [op for op in qmodel.ops if isinstance(op, QLayout)]
    assert len(layouts) == 2
    for config in (DEFAULT, TINY):
        network, _ = _check_every_tensor(qmodel, config, rng.normal(0, 1, (1, 3, 6, 6)).astype(np.float32), seed=3)
        copies = [c for c in network.program.queues[Unit.POOL] if c.opcode == Opcode.POOL]
        assert copies and all(c.args["k_h"] == 1 for c in copies)


def test_flatten_of_a_vector_moves_nothing(tmp_path, digits_data):
    _, qmodel = _compile(tmp_path, onnx.load(MODEL_PATH), digits_data["calibration_images"])
    network = lower_model(qmodel)
    layout = next(op for op in qmodel.ops if isinstance(op, QLayout))
    assert LayoutLowering().plan(layout, _context(network)).alias
    assert network.plan.regions[layout.y] == network.plan.regions[layout.x]


def _context(network):
    from aipu.compiler.lowering.base import Context
    return Context(network.program, network.plan, network.model.tensors, network.model.constants)


@pytest.mark.parametrize("kernel, pads, field", [([16, 16], [8, 8, 8, 8], "k_h"), ([3, 16], [1, 8, 1, 8], "k_w")])
def test_what_does_not_fit_is_named_before_anything_is_emitted(tmp_path, kernel, pads, field):
    b = GraphBuilder(0, 3, 8)
    y = b.node("MaxPool", [b.conv("image", 3, 4, bn=False)], kernel_shape=kernel, pads=pads)
    _, qmodel = _compile(tmp_path, b.model(y), np.ones((2, 3, 8, 8), np.float32))
    with pytest.raises(InputError, match=rf"layer 'maxpool\d+' kernel = \{kernel}: at most 15 \(POOL {field}\)"):
        lower_model(qmodel)


def test_network_input_must_match_the_model(tmp_path, digits_data):
    _, qmodel = _compile(tmp_path, onnx.load(MODEL_PATH), digits_data["calibration_images"])
    network = lower_model(qmodel)
    name = qmodel.inputs[0]
    with pytest.raises(ValueError, match="expected uint8"):
        network.memory({name: np.zeros(qmodel.tensors[name].shape, np.int8)})


def test_eltwise_broadcasts_of_every_kind(tmp_path):
    """A per-pixel map times a feature map, a per-channel constant added, a scalar constant multiplied."""
    b = GraphBuilder(3, 4, 6)
    x = b.node("Relu", [b.conv("image", 4, 8)])
    attention = b.node("Sigmoid", [b.conv(x, 8, 1, kernel=1, bn=False)])      # [1, 1, H, W]
    x = b.node("Mul", [x, attention])
    x = b.node("Add", [x, b.const(np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8, 1, 1))])
    x = b.node("Mul", [x, b.const(np.float32(0.5))])
    rng = np.random.default_rng(4)
    _, qmodel = _compile(tmp_path, b.model(x), rng.normal(0, 1, (6, 4, 6, 6)).astype(np.float32))
    for config in (DEFAULT, TINY):
        _check_every_tensor(qmodel, config, rng.normal(0, 1, (1, 4, 6, 6)).astype(np.float32), seed=1)


def test_concat_along_height_and_of_vectors(tmp_path):
    b = GraphBuilder(4, 3, 6)
    x = b.node("Relu", [b.conv("image", 3, 4)])
    tall = b.node("Concat", [x, b.node("Relu", [b.conv(x, 4, 4)])], axis=2)     # [1, 4, 12, 6]
    pooled = b.node("Flatten", [b.node("GlobalAveragePool", [tall])])
    y = b.node("Concat", [pooled, b.node("Flatten", [b.node("GlobalAveragePool", [x])])], axis=1)
    rng = np.random.default_rng(6)
    _, qmodel = _compile(tmp_path, b.model(y), rng.normal(0, 1, (6, 3, 6, 6)).astype(np.float32))
    for config in (DEFAULT, TINY):
        _check_every_tensor(qmodel, config, rng.normal(0, 1, (1, 3, 6, 6)).astype(np.float32), seed=2)


def test_a_detection_head_of_rank_3_tensors_runs_bit_exact(tmp_path):
    """YOLO-style heads: each scale's [1, C, H, W] map reshaped to [1, C, H*W] (the layout of [1, C, 1, H*W]),
    the scales concatenated along the anchors, split into boxes and scores, an anchor grid added, scores
    through a sigmoid and a softmax over the classes, joined again (nudenet and ddddocr's detectors were
    refused at the first reshape)."""
    b = GraphBuilder(7, 3, 8)
    features = b.node("Relu", [b.conv("image", 3, 8)])
    scales = [b.conv(features, 8, 6, kernel=1, bn=False), b.conv(features, 8, 6, stride=2, bn=False)]
    flat = [b.node("Reshape", [x, b.const(np.array([1, 6, -1], np.int64))]) for x in scales]
    anchors = b.node("Concat", flat, axis=2)                                  # [1, 6, 80]
    split = helper.make_node("Split", [anchors, b.const(np.array([2, 4], np.int64))], ["boxes", "scores"], axis=1)
    b.nodes.append(split)
    grid = b.const(np.random.default_rng(0).uniform(0, 8, (1, 2, 80)).astype(np.float32))
    boxes = b.node("Mul", [b.node("Add", ["boxes", grid]), b.const(np.float32(4.0))])
    scores = b.node("Softmax", [b.node("Sigmoid", ["scores"])], axis=1)
    y = b.node("Concat", [boxes, scores], axis=1)                            # [1, 6, 80]
    rng = np.random.default_rng(8)
    _, qmodel = _compile(tmp_path, b.model(y), rng.normal(0, 1, (6, 3, 8, 8)).astype(np.float32))
    assert qmodel.tensors[qmodel.outputs[0]].shape == (1, 6, 80)
    for config in (DEFAULT, TINY):
        _check_every_tensor(qmodel, config, rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32), seed=4)


def test_a_squeeze_excite_over_a_plane_wider_than_a_window_runs_bit_exact(tmp_path):
    """Global average pooling of a 20x20 plane (POOL and CONV windows end at 15): the planes summed by a 1x1
    conv of ones, within one step of the float average, bit-exact on the NPU."""
    b = GraphBuilder(7, 3, 20)
    x = b.node("Relu", [b.conv("image", 3, 8)])
    gate = b.node("Sigmoid", [b.conv(b.node("GlobalAveragePool", [x]), 8, 8, kernel=1, bn=False)])
    y = b.node("Flatten", [b.node("GlobalAveragePool", [b.node("Mul", [x, gate])])])
    rng = np.random.default_rng(8)
    graph, qmodel = _compile(tmp_path, b.model(y), rng.normal(0, 1, (6, 3, 20, 20)).astype(np.float32))
    assert not any(op.mode == "global_avg" for op in qmodel.ops if hasattr(op, "mode"))
    image = rng.normal(0, 1, (1, 3, 20, 20)).astype(np.float32)
    values = qmodel.run(qmodel.quantize_inputs({qmodel.inputs[0]: image}), keep=True)
    pooled = qmodel.tensors[next(op.y for op in qmodel.ops if op.name.endswith("/channels"))]
    averaged = float_node_alone(graph, qmodel, values, "GlobalAveragePool")
    assert np.abs(pooled.dequantize(values[pooled.name]) - averaged).max() <= pooled.scale
    for config in (DEFAULT, TINY):
        _check_every_tensor(qmodel, config, image, seed=3)


@pytest.mark.parametrize("resize", [
    dict(scales=[1, 1, 2, 2], attrs={}),
    dict(sizes=[1, 4, 9, 7], attrs=dict(coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_ceil")),
    dict(scales=[1, 1, 0.5, 1.5], attrs=dict(coordinate_transformation_mode="asymmetric", nearest_mode="floor")),
])
def test_nearest_resize_is_onnx_exact_and_lowers_to_a_gather(tmp_path, resize):
    b = GraphBuilder(5, 3, 6)
    x = b.node("Relu", [b.conv("image", 3, 4)])
    inputs = [x, "", b.const(np.array(resize["scales"], np.float32))] if "scales" in resize else \
        [x, "", "", b.const(np.array(resize["sizes"], np.int64))]
    y = b.node("Resize", inputs, mode="nearest", **resize["attrs"])
    rng = np.random.default_rng(9)
    graph, qmodel = _compile(tmp_path, b.model(y), rng.normal(0, 1, (6, 3, 6, 6)).astype(np.float32))
    layout = next(op for op in qmodel.ops if isinstance(op, QLayout))
    assert layout.gather is not None
    image = rng.normal(0, 1, (1, 3, 6, 6)).astype(np.float32)
    values = qmodel.run(qmodel.quantize_inputs({"image": image}), keep=True)
    want = float_node_alone(graph, qmodel, values, "Resize")
    np.testing.assert_array_equal(qmodel.tensors[layout.y].dequantize(values[layout.y]).astype(np.float32), want)
    for config in (DEFAULT, TINY):
        _check_every_tensor(qmodel, config, image, seed=4)
