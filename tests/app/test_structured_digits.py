"""Fine-tuning structured layers of the digits CNN (T/AI 115.1-2021 §9.6.2, §9.6.3.3 e): the layers stay
structured while they learn, the accuracy they lost comes back, and the model the NPU gets computes it."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime

from aipu.app.models.structured_digits import dense_params, fine_tune, float_params, structured_model
from aipu.app.models.train_digits import MODEL_PATH, forward, stored_split
from aipu.compress import circulant
from aipu.compress.structured_onnx import circulant_layers, low_rank_layers


def accuracy(params: dict) -> float:
    _, _, images, labels = stored_split()
    return float((forward(params, images).argmax(1) == labels).mean())


def test_block_circulant_layers_learn_and_stay_block_circulant():
    model, params = onnx.load(MODEL_PATH), float_params()
    _, chosen = circulant_layers(model, 4, np.random.default_rng(0), layers=["conv2", "conv3"])
    before = accuracy(dense_params(params, chosen))
    tuned = fine_tune(params, chosen, epochs=1, seed=1)
    assert accuracy(tuned) > before + 0.2
    for entry in chosen:
        unsigned = circulant.signed_weight(tuned[entry.layer.node.input[1]], entry.sign_vector)
        assert np.allclose(circulant.decompress_w_circ_to_weight(circulant.compress_weight_to_w_circ(unsigned, 4), 4),
                           unsigned)


def test_the_low_rank_model_computes_the_fine_tuned_parameters():
    model, params = onnx.load(MODEL_PATH), float_params()
    chosen = low_rank_layers(model, 0.5, layers=["conv3"])
    tuned = fine_tune(params, chosen, epochs=1, seed=2)
    images = stored_split()[2][:64]
    session = onnxruntime.InferenceSession(structured_model(tuned, chosen).SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    logits = session.run(None, {"image": images.astype(np.float32)})[0]
    assert np.allclose(logits, forward(tuned, images), rtol=1e-3, atol=1e-3)
