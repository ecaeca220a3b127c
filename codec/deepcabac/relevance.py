"""The relevance of each weight for RDOQ (``rdoq``): a mean μ (the value to quantize) and a standard deviation σ.

DeepCABAC patent (seed 004) §4.1: σ is "the measure of the interval size within which quantization is allowed"
and the patent obtains μ and σ by variational dropout. Two sources here:

* :func:`user_relevance`: μ and σ the user trained (variational dropout or anything else), checked: the
  weights' shape, finite values, σ > 0; a refusal is one line naming the tensor and the field.
* :func:`fisher_relevance`: an estimate without training, μ = the trained weights and
  σ² = 1 / (F + ε), F the diagonal Fisher information on calibration data (:func:`diagonal_fisher`).

Why the Fisher: near a trained optimum the loss grows by about ½ Σ F_i (w_i − q_i)² when the weights move to q
(the second-order expansion with the Fisher standing in for the Hessian), so (w − q)²/σ² with σ² = 1/F is,
up to a factor, each weight's share of the loss increase: the distortion the patent's cost weighs. It is also the
Laplace approximation of a posterior variance, the quantity variational dropout's σ approximates.
Its limits: it is diagonal (no interaction between weights), local (second order, so a large step or many
weights moved together break it), measured on a small calibration set, and blind to weights whose gradients are
zero there (a dead ReLU): those get the largest σ the damping ε allows, 1/sqrt(ε).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

DEFAULT_DAMPING = 1e-3


@dataclass(frozen=True)
class Relevance:
    """One tensor's means (quantized in place of the weights) and standard deviations, both float64."""

    mean: np.ndarray
    sigma: np.ndarray


def _checked(name: str, field: str, values, shape: tuple[int, ...] | None) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name}: {field} must be real numbers, got {array.dtype}")
    array = array.astype(np.float64)
    if shape is not None and array.shape != tuple(shape):
        raise ValueError(f"{name}: {field} has shape {array.shape}, the weights {tuple(shape)}")
    bad = np.argwhere(~np.isfinite(array))
    if bad.size:
        raise ValueError(f"{name}: {field}{_index(bad[0])} = {array[tuple(bad[0])]} is not finite")
    return array


def _index(position) -> str:
    return "[" + ", ".join(str(int(axis)) for axis in position) + "]"


def user_relevance(name: str, mean, sigma, shape: tuple[int, ...] | None = None) -> Relevance:
    """The user's μ and σ of tensor ``name``, checked against each other and against ``shape`` if given."""
    mean_array = _checked(name, "mean", mean, shape)
    sigma_array = _checked(name, "sigma", sigma, mean_array.shape)
    bad = np.argwhere(sigma_array <= 0)
    if bad.size:
        raise ValueError(f"{name}: sigma{_index(bad[0])} = {sigma_array[tuple(bad[0])]} is not > 0")
    return Relevance(mean_array, sigma_array)


def diagonal_fisher(samples: Iterable[tuple[float, Mapping[str, np.ndarray]]]) -> dict[str, np.ndarray]:
    """The diagonal Fisher information Σ p·g² / Σ p of each tensor, from ``samples`` of (p, gradients by name).

    For the model's own ("true") Fisher a caller gives, per calibration input x and per class y, the
    probability p(y | x) the model assigns and the gradient of −log p(y | x): no labels are needed."""
    total, squares = 0.0, {}
    for probability, gradients in samples:
        if not probability >= 0:
            raise ValueError(f"a sample's probability must be >= 0, got {probability}")
        total += probability
        for name, gradient in gradients.items():
            square = probability * np.square(np.asarray(gradient, np.float64))
            squares[name] = squares[name] + square if name in squares else square
    if not total > 0:
        raise ValueError("no sample with a positive probability: the Fisher information is undefined")
    return {name: square / total for name, square in squares.items()}


def fisher_relevance(weights: Mapping[str, np.ndarray], fisher: Mapping[str, np.ndarray],
                     damping: float = DEFAULT_DAMPING) -> dict[str, Relevance]:
    """μ = the weights, σ = 1/sqrt(F + ε) per weight, ε = ``damping`` × the mean Fisher over all the tensors
    (so that ε scales with the model and a weight of zero Fisher keeps a finite σ)."""
    if not damping > 0:
        raise ValueError(f"damping must be > 0, got {damping}")
    missing = sorted(set(weights) - set(fisher))
    if missing:
        raise ValueError(f"{missing[0]}: no Fisher information for this tensor")
    checked = {name: _checked(name, "fisher", fisher[name], np.shape(weights[name])) for name in weights}
    negative = next((name for name, values in checked.items() if (values < 0).any()), None)
    if negative is not None:
        raise ValueError(f"{negative}: fisher has a negative entry")
    mean_fisher = np.mean(np.concatenate([values.ravel() for values in checked.values()]))
    epsilon = damping * mean_fisher if mean_fisher > 0 else damping
    return {name: user_relevance(name, weights[name], 1.0 / np.sqrt(values + epsilon))
            for name, values in checked.items()}
