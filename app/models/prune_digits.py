"""Mask generation of T/AI 115.1-2021 §9.5 on the embedded digits CNN, trained with the project's own numpy
trainer (aipu.app.models.train_digits; docs/pruning.md, "Mask generation on the demo model").

* :func:`admm_filter_pruning` (§9.5.1, P_Method 2): ADMM group lasso over the filters (rows) of the conv layers,
  then a fine-tune with the mask, W = W − lr·(∇ ⊙ F).
* :func:`incremental_column_pruning` (§9.5.2, P_Method 3): incremental regularisation over the columns (input
  channel x kernel position) of the conv layers, then a retrain with the mask.

Both start from the trained weights of digits_cnn.onnx and run on any labelled images; the full runs use the
training split of digits_data.npz and take about a minute, the tests run them on a few images for
an epoch. ``python -m aipu.app.models.prune_digits --filters 0.5 -o pruned.onnx`` writes a pruned model.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from aipu.app.models.train_digits import (CONV_LAYERS, MODEL_PATH, Adam, batches, forward, loss_and_grads,
                                          to_onnx)
from aipu.compress.mask_generation import (admm_converged, admm_penalty_gradient, admm_update, averaged_ranks,
                                           column_ranks, reg_func, regularisation_gradient, row_mask, sparsity,
                                           update_regularisation)
from aipu.compress.onnx_pruning import prune_filters
from aipu.compress.pruning import as_matrix, from_matrix

CONVS = tuple(layer[0] for layer in CONV_LAYERS)


def load_params(path=MODEL_PATH) -> dict:
    """The trained parameters of the digits CNN (the ONNX file's initializers, as float64)."""
    model = onnx.load(path)
    return {tensor.name: numpy_helper.to_array(tensor).astype(np.float64) for tensor in model.graph.initializer}


def accuracy(params: dict, images: np.ndarray, labels: np.ndarray) -> float:
    return float((forward(params, images).argmax(1) == labels).mean())


@dataclass
class Schedule:
    """How long and how fast: epochs of the mask search and of the fine-tune, Adam's rate, batch, seed."""

    epochs: int = 8
    finetune_epochs: int = 8
    lr: float = 3e-3
    batch: int = 64
    seed: int = 0


@dataclass
class PruningRun:
    """The fine-tuned parameters, each layer's mask (rows or columns), and the loss after each epoch."""

    params: dict
    masks: dict[str, np.ndarray]
    losses: list[float] = field(default_factory=list)


def _lambda_for(u: np.ndarray, ratio: float) -> float:
    """The group-lasso weight at which eq. (50) zeroes round(ratio · N) rows of ``u``: between the norms of
    the last row to go and the first to stay (decision PR-9: λ from the target instead of by hand)."""
    norms = np.sort(np.linalg.norm(u, axis=1))
    count = int(np.floor(ratio * norms.size + 0.5))
    if count == 0:
        return 0.0
    return float(norms[count - 1] if count == norms.size else (norms[count - 1] + norms[count]) / 2)


def _fine_tune(params: dict, images, labels, weight_masks: dict[str, np.ndarray], bias_masks: dict[str, np.ndarray],
               schedule: Schedule, rng) -> list[float]:
    """Train with the masked weights (and biases) held at zero: W ⊙ M first, then every gradient ⊙ M (Table
    303's W = W + W_g .* F, Table 307's Retrain); the masks are in the parameters' shapes."""
    masks = {**{name + ".weight": mask for name, mask in weight_masks.items()},
             **{name + ".bias": mask for name, mask in bias_masks.items()}}
    for key, mask in masks.items():
        params[key] *= mask
    optimizer, losses = Adam(params, schedule.lr), []
    for _ in range(schedule.finetune_epochs):
        total = 0.0
        for idx in batches(len(images), schedule.batch, rng):
            loss, grads = loss_and_grads(params, images[idx], labels[idx])
            for key, mask in masks.items():
                grads[key] *= mask
            optimizer.step(params, grads)
            total += loss * len(idx)
        losses.append(total / len(images))
    return losses


def admm_filter_pruning(params: dict, images: np.ndarray, labels: np.ndarray, ratios: dict[str, float], *,
                        schedule: Schedule = Schedule(), eps: float = 1e-3, rho: float = 0.01) -> PruningRun:
    """§9.5.1 on the layers of ``ratios`` (layer -> fraction of its filters): per batch a W-step on the loss
    plus ½‖W − T‖² (T = F − K/2), per epoch the F-step of eq. (50) and K += W − F, a layer stopping when step
    g) holds; then the mask F ≠ 0 and the fine-tune. ``rho`` weighs the penalty against the loss (eq. (49)
    has 1 against a summed loss; this trainer's loss is a batch mean: decision PR-9). The pruned filters' biases are zeroed with them, so the
    filter-pruned ONNX model computes exactly what the masked one does."""
    params = {key: value.copy() for key, value in params.items()}
    rng = np.random.default_rng(schedule.seed)
    state = {name: (as_matrix(params[name + ".weight"]).copy(), np.zeros_like(as_matrix(params[name + ".weight"])))
             for name in ratios}
    active, losses = set(ratios), []
    optimizer = Adam(params, schedule.lr)
    for _ in range(schedule.epochs):
        total = 0.0
        for idx in batches(len(images), schedule.batch, rng):
            loss, grads = loss_and_grads(params, images[idx], labels[idx])
            for name in active:
                weight = params[name + ".weight"]
                f, k = state[name]
                grads[name + ".weight"] += rho * from_matrix(admm_penalty_gradient(as_matrix(weight), f, k),
                                                             weight.shape)
            optimizer.step(params, grads)
            total += loss * len(idx)
        losses.append(total / len(images))
        for name in sorted(active):
            w, (f_old, k) = as_matrix(params[name + ".weight"]), state[name]
            f, k = admm_update(w, k, _lambda_for(w + 0.5 * k, ratios[name]))
            state[name] = (f, k)
            if admm_converged(w, f, f_old, eps):
                active.discard(name)
    masks = {name: row_mask(state[name][0]) for name in ratios}
    weight_masks = {name: np.broadcast_to(mask[:, None, None, None], params[name + ".weight"].shape)
                    for name, mask in masks.items()}
    losses += _fine_tune(params, images, labels, weight_masks, masks, schedule, rng)
    return PruningRun(params, masks, losses)


@dataclass
class IncrementalSettings:
    """§9.5.2's hyper-parameters: Target_reg, Reg_func's amplitude, the interval M (batches) between rank
    updates, and the epochs allowed to reach the target sparsities."""

    target_reg: float = 1.0
    amplitude: float = 0.1
    interval: int = 4
    max_epochs: int = 12


def incremental_column_pruning(params: dict, images: np.ndarray, labels: np.ndarray, targets: dict[str, float], *,
                               schedule: Schedule = Schedule(),
                               settings: IncrementalSettings = IncrementalSettings()) -> PruningRun:
    """§9.5.2 on the layers of ``targets`` (layer -> fraction of its columns): each batch adds the gradient of
    ½ Σ Reg_val_g ‖W[:, g]‖² and masks the gradients (step 6); every ``interval`` batches the columns' L1
    ranks averaged over the interval feed Reg_func, and a column whose factor reaches Target_reg is masked
    (steps 4.2-4.5). A layer at its target stops; when all are, the masked weights are retrained (step 7)."""
    params = {key: value.copy() for key, value in params.items()}
    rng = np.random.default_rng(schedule.seed)
    columns = {name: as_matrix(params[name + ".weight"]).shape[1] for name in targets}
    reg = {name: np.zeros(count) for name, count in columns.items()}
    masks = {name: np.ones(count, np.uint8) for name, count in columns.items()}
    history: dict[str, list[np.ndarray]] = {name: [] for name in targets}
    optimizer, losses, step = Adam(params, schedule.lr), [], 0
    for _ in range(settings.max_epochs):
        if all(sparsity(masks[name]) >= targets[name] for name in targets):
            break
        total = 0.0
        for idx in batches(len(images), schedule.batch, rng):
            loss, grads = loss_and_grads(params, images[idx], labels[idx])
            for name in targets:
                weight = params[name + ".weight"]
                w2d = as_matrix(weight)
                gradient = as_matrix(grads[name + ".weight"]) + regularisation_gradient(w2d, reg[name])
                grads[name + ".weight"] = from_matrix(gradient * masks[name], weight.shape)
            optimizer.step(params, grads)
            total += loss * len(idx)
            step += 1
            for name in targets:
                weight = params[name + ".weight"]
                params[name + ".weight"] = from_matrix(as_matrix(weight) * masks[name], weight.shape)
                history[name].append(column_ranks(as_matrix(params[name + ".weight"])))
                if step % settings.interval == 0 and sparsity(masks[name]) < targets[name]:
                    increment = reg_func(averaged_ranks(history[name]), targets[name], settings.amplitude)
                    reg[name], masks[name] = _capped(reg[name], increment, masks[name], targets[name],
                                                     settings.target_reg)
                    history[name] = []
        losses.append(total / len(images))
    weight_masks = {name: from_matrix(np.broadcast_to(mask, as_matrix(params[name + ".weight"]).shape),
                                      params[name + ".weight"].shape) for name, mask in masks.items()}
    losses += _fine_tune(params, images, labels, weight_masks, {}, schedule, rng)
    return PruningRun(params, masks, losses)


def _capped(reg: np.ndarray, increment: np.ndarray, mask: np.ndarray, target: float, target_reg: float):
    """update_regularisation, masking no more columns than the layer's target allows (the factors that reached
    Target_reg beyond it, the least regularised first, stay unmasked and keep their factor)."""
    new_reg, new_mask = update_regularisation(reg, increment, mask, target_reg)
    allowed = int(np.floor(target * mask.size + 0.5)) - int(np.count_nonzero(mask == 0))
    fresh = np.flatnonzero((new_mask == 0) & (mask == 1))
    if fresh.size > allowed:
        keep = fresh[np.argsort(-new_reg[fresh], kind="stable")][max(allowed, 0):]
        new_mask[keep] = 1
    return new_reg, new_mask


def pruned_model(params: dict, filter_masks: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """The digits CNN of ``params`` as ONNX, with the filters of ``filter_masks`` removed (a smaller dense model)."""
    model = to_onnx(params)
    return prune_filters(model, filter_masks).model if filter_masks else model


def dead_channels(params: dict, masks: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """For column masks: per layer whose input comes from a conv, the producer's filter mask that keeps only
    the input channels some column still reads (a channel whose every kernel position is masked is dead)."""
    producers = dict(zip(CONVS[1:], CONVS[:-1]))
    result = {}
    for name, mask in masks.items():
        if name in producers:
            weight = params[name + ".weight"]
            alive = mask.reshape(weight.shape[1], -1).any(axis=1).astype(np.uint8)
            if not alive.all():
                result[producers[name]] = alive
    return result


def main(argv: list[str] | None = None) -> None:
    from aipu.app.models.train_digits import stored_split

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filters", type=float, default=0.5, help="fraction of conv1..conv3's filters (ADMM)")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    train_images, train_labels, test_images, test_labels = stored_split()
    run = admm_filter_pruning(load_params(), train_images, train_labels, {name: args.filters for name in CONVS})
    onnx.save(pruned_model(run.params, run.masks), args.output)
    print(f"held-out top-1 {accuracy(run.params, test_images, test_labels):.4f}; kept filters "
          f"{ {name: int(mask.sum()) for name, mask in run.masks.items()} }; wrote {args.output}")


if __name__ == "__main__":
    main()
