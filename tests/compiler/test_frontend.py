"""The hand-written front end (compiler/frontend.py) on the embedded digits CNN."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from aipu.app.models.train_digits import MODEL_PATH
from aipu.app.ort_compare import single_thread_session
from aipu.compiler.frontend import load_float_model, quantize_model
from aipu.compiler.tiling import lower_conv_layers


def test_float_model_reader_matches_onnxruntime(digits_data, digits_float_model):
    images = digits_data["eval_images"][:32]
    expected = single_thread_session(onnx.load(MODEL_PATH)).run(None, {"image": images})[0]
    np.testing.assert_allclose(digits_float_model.logits(images), expected, rtol=1e-4, atol=1e-4)


def test_program_input_can_be_swapped_but_not_with_a_wrong_dtype(digits_data, digits_float_model):
    quantized = quantize_model(digits_float_model, digits_data["calibration_images"])
    lowered = lower_conv_layers(quantized.layers)
    x = quantized.quantize_input(digits_data["eval_images"][:1])
    assert not np.array_equal(lowered.dram_with_input(x), lowered.dram_with_input(x ^ np.uint8(1)))
    with pytest.raises(ValueError, match="dtype"):
        lowered.dram_with_input(x.view(np.int8))


def test_reader_refuses_graphs_it_does_not_understand(tmp_path):
    model = onnx.load(MODEL_PATH)
    del model.graph.node[1]                                  # drop the first Relu
    path = tmp_path / "broken.onnx"
    onnx.save(model, path)
    with pytest.raises(ValueError, match="Conv, Relu"):
        load_float_model(path)
