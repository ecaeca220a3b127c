"""The RD quantizer's per-layer steps: each layer's Δ chosen by relevance-weighted rate-distortion.

DeepCABAC patent (seed 004) §4.3 leaves the step Δ of a layer to the encoder; §4.4 minimises D + λ·R. Here the
minimisation is over Δ: for one λ shared by the whole model, every layer takes the candidate step of least

    J(Δ) = Σ_i (w_i − q_i)² / σ_i² + λ · R(Δ),      q_i = round(w_i / Δ) · Δ

with R the bits of the layer's payload as the coder writes it plus ``STEP_BITS`` for Δ itself. Layers are coded
independently and D is a sum over weights, so the model's D + λR is least when each layer's J is: Lagrangian
bit allocation. With σ² = 1/F (``relevance.fisher_relevance``) D estimates the loss increase (twice it), so λ
prices a bit in loss, and layers to which the loss is sensitive get the finer steps.

Levels are rounded, not RDOQ'd (``rdoq``): on the demo model, per-weight decisions with Fisher weights move
many weights of small F towards zero together, a correlated error the diagonal Fisher does not see
(docs/deepcabac-quantizer.md §4). For the same reason the candidates stop at ``COARSEST_LEVEL``: a step that
rounds most of a layer to zero lies outside the second-order region in which D means anything.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .reference.layer_coder import DeepCabacOptions, encode_layer
from .rdoq import uniform_levels

STEP_BITS = 32           # Δ sent as a float32 per layer
COARSEST_LEVEL = 2       # the coarsest candidate puts the largest |w| on level 2
FINEST_LEVEL = 64
STEPS_PER_OCTAVE = 8


@dataclass(frozen=True)
class StepChoice:
    """One candidate step of a layer: its levels (int32, the layer's shape), their bits (payload + Δ) and the
    weighted distortion Σ (w − lΔ)² / σ² they leave."""

    step: float
    levels: np.ndarray
    bits: int
    distortion: float


def candidate_steps(weights) -> list[float]:
    """Steps max|w| / M for M from ``COARSEST_LEVEL`` to ``FINEST_LEVEL``, ``STEPS_PER_OCTAVE`` to an octave."""
    largest = float(np.max(np.abs(weights))) if np.size(weights) else 0.0
    if not largest > 0:
        return [1.0]
    octaves = math.log2(FINEST_LEVEL / COARSEST_LEVEL)
    return [largest / (COARSEST_LEVEL * 2.0 ** (k / STEPS_PER_OCTAVE))
            for k in range(round(octaves * STEPS_PER_OCTAVE) + 1)]


def step_choices(weights, sigma=None, options: DeepCabacOptions = DeepCabacOptions()) -> list[StepChoice]:
    """Every candidate step of one layer, coded with ``options``. ``sigma``: the weights' standard deviations
    (the layer's shape, all > 0); None weighs every error alike (plain MSE)."""
    values = np.asarray(weights, np.float64)
    deviations = np.ones_like(values) if sigma is None else np.asarray(sigma, np.float64)
    if deviations.shape != values.shape:
        raise ValueError(f"sigma has shape {deviations.shape}, the weights {values.shape}")
    if not np.all(np.isfinite(deviations) & (deviations > 0)):
        raise ValueError("sigma must be finite and > 0 everywhere")
    precision = 1.0 / np.square(deviations)
    choices = []
    for step in candidate_steps(values):
        levels = uniform_levels(values, step)
        bits = 8 * len(encode_layer(levels, options)) + STEP_BITS
        distortion = float(np.sum(precision * np.square(values - levels * step)))
        choices.append(StepChoice(step, levels, bits, distortion))
    return choices


def allocate(choices: Mapping[str, Sequence[StepChoice]], lam: float) -> dict[str, StepChoice]:
    """Each layer's choice of least distortion + ``lam`` · bits (ties: fewer bits)."""
    if not (lam >= 0 and math.isfinite(lam)):
        raise ValueError(f"lambda must be finite and >= 0, got {lam}")
    return {name: min(options, key=lambda c: (c.distortion + lam * c.bits, c.bits)) for name, options in
            choices.items()}


def breakpoints(choices: Mapping[str, Sequence[StepChoice]]) -> list[float]:
    """The λ, ascending, at which some layer's allocation changes: the slopes of each layer's lower convex
    hull of (bits, distortion). Between two neighbours the allocation is constant, so the midpoints of this
    list (and one λ past each end) visit every allocation ``allocate`` can give."""
    slopes = set()
    for options in choices.values():
        hull: list[StepChoice] = []
        for choice in sorted(options, key=lambda c: (c.bits, c.distortion)):
            if hull and choice.distortion >= hull[-1].distortion:
                continue
            while len(hull) >= 2 and _turns_up(hull[-2], hull[-1], choice):
                hull.pop()
            hull.append(choice)
        slopes.update((left.distortion - right.distortion) / (right.bits - left.bits)
                      for left, right in zip(hull, hull[1:]))
    return sorted(slopes)


def _turns_up(first: StepChoice, middle: StepChoice, last: StepChoice) -> bool:
    """Whether ``middle`` lies on or above the chord from ``first`` to ``last`` (so it is off the lower hull)."""
    cross = ((middle.bits - first.bits) * (last.distortion - first.distortion)
             - (middle.distortion - first.distortion) * (last.bits - first.bits))
    return cross <= 0
