"""Several models on one DRAM image (compiler/multi_model.py): every model's program on the merged image gives
bit for bit what its own program gives on its own image, the shared filters' bytes are stored once, and a
model of another topology is refused by name."""
import numpy as np
import onnx
import pytest

from aipu.app.models.train_digits import MODEL_PATH
from aipu.compiler.lowering.conv_layer import ConvLayer
from aipu.compiler.lowering.conv_plan import plan_tiles
from aipu.compiler.lowering.memory import load_tensor, store_tensor
from aipu.compiler.multi_model import compile_models, dram_range, merge
from aipu.compress.multi_model_onnx import share, weight_layers, with_weights
from aipu.sim.interpreter import run
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.memory import Memory

SLICES = {"conv1": 8, "conv2": 16, "conv3": 24}


@pytest.fixture(scope="module")
def variants(tmp_path_factory, digits_data):
    """The demo model and a variant whose filters past SLICES (and whole fc) differ, as files, and the data."""
    base = onnx.load(MODEL_PATH)
    rng = np.random.default_rng(1)
    arrays = {}
    for layer in weight_layers(base):
        cut = SLICES.get(layer.name, 0)
        weight = onnx.numpy_helper.to_array(next(t for t in base.graph.initializer if t.name == layer.weight)).copy()
        weight[cut:] += rng.normal(0, 0.05, weight[cut:].shape).astype(np.float32)
        arrays[layer.weight] = weight
    folder = tmp_path_factory.mktemp("multi")
    paths = [folder / "a.onnx", folder / "b.onnx"]
    onnx.save(base, paths[0])
    onnx.save(with_weights(base, arrays), paths[1])
    calibration = folder / "calibration.npz"
    np.savez(calibration, image=digits_data["calibration_images"][:16])
    return paths, calibration, digits_data


def _output(network, qmodel, dram, address_of):
    name = qmodel.outputs[0]
    tensor = qmodel.tensors[name]
    return load_tensor(dram, address_of(network.plan.regions[name][0]), tensor.shape, tensor.dtype)


def test_merged_programs_are_bit_exact_and_share_the_filters(variants):
    paths, calibration, data = variants
    members = compile_models(paths, calibration, k_boundaries=SLICES)
    merged = merge([member.network for member in members])
    figures = merged.figures
    assert figures["merged_dram_bytes"] < figures["separate_dram_bytes"]
    for model, member in enumerate(members):
        network, qmodel = member.network, member.qmodel
        for image in data["eval_images"][:2]:
            inputs = qmodel.quantize_inputs({"image": image[None]})
            alone = run(network.program, network.memory(inputs))
            dram = merged.dram.copy()
            store_tensor(dram, merged.address(model, network.plan.regions["image"][0]), inputs["image"])
            together = run(merged.programs[model], Memory.create(network.program.config, dram))
            expected = _output(network, qmodel, alone.memory.dram, lambda a: a)
            assert np.array_equal(_output(network, qmodel, together.memory.dram,
                                          lambda a, m=model: merged.address(m, a)), expected)
    # the shared filters' weights (OHWI rows of 9, 144 and 288 bytes) are stored once
    shared = figures["shared_bytes"]
    assert shared >= SLICES["conv1"] * 9 + SLICES["conv2"] * 144 + SLICES["conv3"] * 288
    for model in figures["models"]:
        assert model["shared_bytes"] + model["switch_bytes"] == model["constant_bytes"]
        assert model["switch_bytes"] > 0
    separate_constants = sum(model["constant_bytes"] for model in figures["models"])
    assert figures["merged_dram_bytes"] - figures["work_bytes"] < separate_constants - shared + 64 * 64


def test_every_dram_access_of_a_merged_program_lies_in_the_image(variants):
    paths, calibration, _ = variants
    members = compile_models(paths[:1] * 2, calibration, k_boundaries=SLICES)
    merged = merge([member.network for member in members])
    assert merged.figures["models"][0]["switch_bytes"] == 0           # two equal models share every constant
    for program in merged.programs:
        for queue in program.queues.values():
            for command in queue:
                span = dram_range(command)
                assert span is None or span[1] <= merged.dram.size


def test_tiles_break_at_the_shared_filters():
    layer = ConvLayer(x=np.zeros((1, 16, 8, 8), np.int8), w=np.ones((32, 16, 3, 3), np.int8),
                      bias=np.zeros(32, np.int32), multiplier=np.ones(32, np.int64), shift=np.ones(32, np.int64),
                      padding=(1, 1, 1, 1))
    assert plan_tiles(layer).tile_k == 32
    assert 24 % plan_tiles(layer, k_boundary=24).tile_k == 0
    with pytest.raises(ValueError, match="k_boundary"):
        plan_tiles(layer, k_boundary=24, tile_k=16)


def test_another_topology_is_refused_by_name(variants, tmp_path):
    paths, calibration, _ = variants
    other = onnx.load(MODEL_PATH)
    other.graph.node[1].op_type = "Sigmoid"
    path = tmp_path / "other.onnx"
    onnx.save(other, path)
    with pytest.raises(InputError, match=r"other\.onnx.*operators"):
        compile_models([paths[0], path], calibration)
    with pytest.raises(InputError, match="shared filters of layer"):
        compile_models(paths, calibration, k_boundaries={"pool": 1})


def test_share_refuses_an_unknown_layer():
    with pytest.raises(InputError, match="--slice layer"):
        share([onnx.load(MODEL_PATH)] * 2, {"nothing": 1})
