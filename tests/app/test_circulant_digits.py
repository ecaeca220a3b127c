"""The block-circulant digits CNN (docs/structured.md): conv2 and conv3 fitted at circ_size 4, fine-tuned one
epoch, compiled with their weights expanded on chip by LOAD: the program equals the golden model bit for bit,
and DRAM holds a quarter of those layers' int8 weight bytes."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from aipu.app.models import structured_digits, train_digits
from aipu.compiler.driver import compile_model
from aipu.compress import structured_onnx
from aipu.sim.interpreter import run
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode, Unit


@pytest.fixture(scope="module")
def circulant_digits(tmp_path_factory):
    """(model path, calibration path, {layer: (circ_size, signs)}) of the fine-tuned circulant digits CNN."""
    folder = tmp_path_factory.mktemp("circulant")
    signs, chosen = structured_onnx.circulant_layers(onnx.load(train_digits.MODEL_PATH), 4, np.random.default_rng(0))
    params = structured_digits.fine_tune(structured_digits.float_params(), chosen, epochs=1, seed=0)
    onnx.save(structured_digits.structured_model(params, chosen), folder / "model.onnx")
    data = np.load(train_digits.DATA_PATH)
    np.save(folder / "calib.npy", data["calibration_images"][:64])
    return (folder / "model.onnx", folder / "calib.npy",
            {entry.layer.name: (entry.circ_size, entry.sign_vector) for entry in chosen})


def test_compiled_circulant_digits_match_golden(circulant_digits):
    model, calib, circulant = circulant_digits
    assert sorted(circulant) == ["conv2", "conv3"]
    compiled = compile_model(model, calib, circulant=circulant)
    network, qmodel = compiled.network, compiled.qmodel
    images = np.load(calib)[:2]
    for image in images:
        x = qmodel.quantize_inputs({qmodel.inputs[0]: image[None]})
        result = run(network.program, network.memory(x))
        want = qmodel.run(x)
        for name in qmodel.outputs:
            np.testing.assert_array_equal(network.read(result.memory, name), want[name])
    loads = [command for command in network.program.queues[Unit.LOAD] if command.opcode == Opcode.LOAD]
    assert {command.circ_log2 for command in loads} == {0, 2}
    weights = {op.name: op.w.size for op in qmodel.ops if op.name in circulant}
    regions = network.plan.regions
    for name, size in weights.items():
        assert regions[f"{name}/weights"][1] == size // 4


def test_unknown_layer_is_refused(circulant_digits):
    model, calib, circulant = circulant_digits
    with pytest.raises(InputError, match="conv9"):
        compile_model(model, calib, circulant={"conv9": circulant["conv2"]})
