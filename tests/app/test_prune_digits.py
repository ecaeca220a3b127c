"""Mask generation (T/AI 115.1-2021 §9.5) on the embedded digits CNN with the project's trainer, on a few
training images for an epoch (docs/pruning.md): the masks have the asked sizes, masked weights stay zero
through the fine-tune, and the filter-pruned ONNX model computes what the masked parameters do."""
import numpy as np
import onnxruntime
import pytest

from aipu.app.models.prune_digits import (CONVS, IncrementalSettings, Schedule, admm_filter_pruning, dead_channels,
                                          incremental_column_pruning, load_params, pruned_model)
from aipu.app.models.train_digits import DATA_PATH, forward
from aipu.compress import as_matrix

SHORT = Schedule(epochs=1, finetune_epochs=1, batch=32)


@pytest.fixture(scope="module")
def data():
    stored = np.load(DATA_PATH)
    return stored["train_images"][:96].astype(np.float64), stored["train_labels"][:96]


def test_admm_masks_the_asked_filters_and_the_pruned_model_equals_the_masked_one(data):
    images, labels = data
    run = admm_filter_pruning(load_params(), images, labels, {"conv1": 0.25, "conv2": 0.5, "conv3": 0.5},
                              schedule=SHORT)
    assert [int(run.masks[name].sum()) for name in CONVS] == [12, 16, 16]
    for name in CONVS:
        dropped = run.masks[name] == 0
        assert not run.params[name + ".weight"][dropped].any() and not run.params[name + ".bias"][dropped].any()
    model = pruned_model(run.params, run.masks)
    shapes = {t.name: tuple(t.dims) for t in model.graph.initializer}
    assert shapes["conv3.weight"] == (16, 16, 3, 3) and shapes["fc.weight"] == (10, 16)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = session.run(None, {"image": images[:16].astype(np.float32)})[0]
    assert np.allclose(logits, forward(run.params, images[:16]), rtol=1e-4, atol=1e-4)
    assert len(run.losses) == 2 and all(np.isfinite(run.losses))


def test_incremental_regularisation_reaches_its_column_targets_and_keeps_them_zero(data):
    images, labels = data
    run = incremental_column_pruning(load_params(), images, labels, {"conv2": 0.5, "conv3": 0.25},
                                     schedule=SHORT, settings=IncrementalSettings(amplitude=0.5, interval=1,
                                                                                   max_epochs=30))
    assert int((run.masks["conv2"] == 0).sum()) == 72 and int((run.masks["conv3"] == 0).sum()) == 72
    for name, mask in run.masks.items():
        assert not as_matrix(run.params[name + ".weight"])[:, mask == 0].any()
    assert set(dead_channels(run.params, run.masks)) <= {"conv1", "conv2"}
