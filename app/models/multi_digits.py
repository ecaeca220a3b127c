"""Multi-model data generation of T/AI 115.1-2021 §9.3 on the embedded digits CNN (docs/multimodel.md,
"Task variants"), trained with the project's numpy trainer (aipu.app.models.train_digits).

Three tasks of one topology (10 outputs), all started from the demo model's weights:
* ``digits``: the labels as they are;
* ``shifted``: digits 0-4 relabelled one up, cyclically (0->1, ..., 4->0), 5-9 as they are;
* ``mirrored``: every digit d labelled 9 - d.

:func:`shared_training` is Method 1 (§9.3.1.2, Table 278): per batch every task's gradient is split along the
output channels at each layer's slice_indicator; the shared filters take the sum of all tasks' shared parts
(loss_factor 1 each), a task's own filters its own part. The models stay exactly equal on the shared filters.
:func:`residual_training` is §9.3.2: each task fine-tuned alone, its difference to the demo model k-means
coded at n bits per layer (§7.1.4), then the centres trained with cluster-mean gradients, the base frozen.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aipu.app.models.prune_digits import accuracy, load_params
from aipu.app.models.train_digits import Adam, batches, loss_and_grads
from aipu.compress.multi_model import DFQuantization, cluster_mean_gradient, df_quantize, residual_decompress

TASKS = ("digits", "shifted", "mirrored")
LAYERS = ("conv1", "conv2", "conv3", "fc")


def task_labels(task: str, labels: np.ndarray) -> np.ndarray:
    """The labels of ``task`` for the digit ``labels``."""
    if task == "digits":
        return labels
    if task == "shifted":
        return np.where(labels < 5, (labels + 1) % 5, labels)
    if task == "mirrored":
        return 9 - labels
    raise ValueError(f"task {task!r}: one of {', '.join(TASKS)}")


@dataclass
class Schedule:
    epochs: int = 4
    lr: float = 5e-3
    batch: int = 64
    seed: int = 0


def shared_training(images: np.ndarray, labels: np.ndarray, slices: dict[str, int], tasks=TASKS,
                    schedule: Schedule = Schedule(), params: dict | None = None) -> list[dict]:
    """Each task's parameters after Method 1 training from the demo model (or ``params``): filters
    [0, slices[layer]) of every layer shared by all tasks, the rest and every bias past it the task's own."""
    start = params or load_params()
    models = [{key: value.copy() for key, value in start.items()} for _ in tasks]
    optimizers = [Adam(model, schedule.lr) for model in models]
    rng = np.random.default_rng(schedule.seed)
    targets = [task_labels(task, labels) for task in tasks]
    for _ in range(schedule.epochs):
        for idx in batches(len(images), schedule.batch, rng):
            grads = [loss_and_grads(model, images[idx], target[idx])[1] for model, target in zip(models, targets)]
            for layer, cut in slices.items():
                for suffix in (".weight", ".bias"):
                    shared = sum(g[layer + suffix][:cut] for g in grads)
                    for g in grads:
                        g[layer + suffix][:cut] = shared
            for model, optimizer, g in zip(models, optimizers, grads):
                optimizer.step(model, g)
    return models


def fine_tuned(images: np.ndarray, labels: np.ndarray, tasks=TASKS, schedule: Schedule = Schedule()) -> list[dict]:
    """Each task fine-tuned alone from the demo model: the targets of residual quantization."""
    return shared_training(images, labels, {}, tasks, schedule)


def residual_training(base: dict, target: dict, images: np.ndarray, labels: np.ndarray, n: int,
                      schedule: Schedule = Schedule(epochs=2, lr=1e-3)) -> tuple[DFQuantization, dict]:
    """``target``'s layers as ``base`` + n-bit k-means differences (DFQuantization), the centres then trained
    with the mean gradient of their members (§9.3.2; Adam on the centres, the base frozen, the biases the
    target's). Returns the trained record and the parameters it stands for."""
    weights = [layer + ".weight" for layer in LAYERS]
    record = df_quantize([base[w] for w in weights], [target[w] for w in weights], n)
    centres = {w: c.astype(np.float64) for w, c in zip(weights, record.w_share)}
    optimizer = Adam(centres, schedule.lr)
    rng = np.random.default_rng(schedule.seed)
    params = dict(target)
    for _ in range(schedule.epochs):
        for idx in batches(len(images), schedule.batch, rng):
            params.update({w: base[w] + centres[w][i] for w, i in zip(weights, record.w_specific)})
            grads = loss_and_grads(params, images[idx], labels[idx])[1]
            optimizer.step(centres, {w: cluster_mean_gradient(grads[w], i, centres[w].size)
                                     for w, i in zip(weights, record.w_specific)})
    record = DFQuantization(n, tuple(centres[w].astype(np.float32) for w in weights), record.w_specific)
    restored, _ = residual_decompress(record.w_share, record.w_specific, [base[w] for w in weights])
    return record, {**target, **dict(zip(weights, (r.astype(np.float64) for r in restored)))}


def top1(params: dict, images: np.ndarray, labels: np.ndarray, task: str) -> float:
    return accuracy(params, images, task_labels(task, labels))
