"""`aipu demo` on the embedded digits CNN: every promise it prints holds."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from sim.demo import load_float_model, quantize_model, run_demo
from sim.models.train_digits import DATA_PATH, MODEL_PATH
from sim.ort_compare import single_thread_session
from sim.program import Program


def test_demo_is_bit_exact_accurate_and_lossless(tmp_path):
    report = run_demo(tmp_path, eval_limit=60)
    assert report["interpreter"]["bit_exact"] and report["interpreter"]["images"] == 60
    assert report["codec"]["lossless"]
    accuracy = report["accuracy"]
    assert accuracy["float"] >= 0.9, accuracy          # the embedded model is trained (95.8% on all 360)
    assert accuracy["npu"] >= accuracy["float"] - 0.05 and accuracy["agreement"] >= 0.95, accuracy
    program = Program.read(tmp_path / "model.aipu")
    assert program.disassemble() == (tmp_path / "model.lst").read_text()


def test_float_model_reader_matches_onnxruntime():
    images = np.load(DATA_PATH)["eval_images"][:32]
    expected = single_thread_session(onnx.load(MODEL_PATH)).run(None, {"image": images})[0]
    np.testing.assert_allclose(load_float_model().logits(images), expected, rtol=1e-4, atol=1e-4)


def test_program_input_can_be_swapped_but_not_with_a_wrong_dtype():
    from compiler.tiling import lower_conv_layers

    data = np.load(DATA_PATH)
    quantized = quantize_model(load_float_model(), data["calibration_images"])
    lowered = lower_conv_layers(quantized.layers)
    x = quantized.quantize_input(data["eval_images"][:1])
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
