"""Fine-tuning the digits model's structured layers with the project's numpy trainer (T/AI 115.1-2021 §9.6.2 for
block-circulant layers, §9.6.3.3 e for low-rank ones).

A structured layer (aipu.compress.structured_onnx: LowRankLayer or CirculantLayer) stands for a dense weight; each
step runs the model with those dense weights, takes the loss gradient of each dense weight from
``train_digits.loss_and_grads`` and turns it into the gradients of the layer's own arrays (the factors, or the
first rows with §9.6.2's averaging over shared positions), so the layer stays structured while it learns.
The data is the training split of ``digits_data.npz``.
"""
from __future__ import annotations

import numpy as np
import onnx

from aipu.app.models import train_digits
from aipu.compress import structured_onnx


def float_params() -> dict:
    """The embedded model's parameters by name, float64."""
    from onnx import numpy_helper

    return {tensor.name: numpy_helper.to_array(tensor).astype(np.float64)
            for tensor in onnx.load(train_digits.MODEL_PATH).graph.initializer}


def dense_params(params: dict, chosen: list) -> dict:
    """``params`` with each structured layer's weight replaced by the dense weight it stands for."""
    return dict(params, **{entry.layer.node.input[1]: entry.dense().reshape(params[entry.layer.node.input[1]].shape)
                           for entry in chosen})


def fine_tune(params: dict, chosen: list, *, epochs: int, seed: int = 0, lr: float = 1e-3,
              batch: int = 64) -> dict:
    """Adam on the cross-entropy of the training split over the structured layers' arrays (updated in place)
    and every other parameter; returns the parameters, the structured weights dense."""
    images, labels, _, _ = train_digits.stored_split()
    structured = {entry.layer.node.input[1]: entry for entry in chosen}
    trainable = {name: value.copy() for name, value in params.items() if name not in structured}
    for name, entry in structured.items():
        trainable.update({f"{name}#{index}": array for index, array in enumerate(entry.arrays())})
    optimizer = train_digits.Adam(trainable, lr)
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        for idx in train_digits.batches(len(images), batch, rng):
            _, grads = train_digits.loss_and_grads(dense_params(_with(trainable, params, structured), chosen),
                                                   images[idx], labels[idx])
            for name, entry in structured.items():
                grads.update({f"{name}#{index}": grad
                              for index, grad in enumerate(entry.gradients(grads.pop(name)))})
            optimizer.step(trainable, grads)
    return dense_params(_with(trainable, params, structured), chosen)


def _with(trainable: dict, params: dict, structured: dict) -> dict:
    """The model's parameters by name: the trained ones, and the structured layers' names (their weights are
    rebuilt from their arrays by ``dense_params``)."""
    return {**{name: value for name, value in trainable.items() if "#" not in name},
            **{name: params[name] for name in structured}}


def structured_model(params: dict, chosen: list) -> onnx.ModelProto:
    """The ONNX model of the fine-tuned parameters with the structured layers as the NPU runs them."""
    model = train_digits.to_onnx({name: value for name, value in params.items()})
    low_rank = [entry for entry in chosen if isinstance(entry, structured_onnx.LowRankLayer)]
    circulant = [entry for entry in chosen if isinstance(entry, structured_onnx.CirculantLayer)]
    return structured_onnx.with_low_rank(structured_onnx.with_circulant(model, circulant), low_rank)
