"""Rate-distortion optimised quantization (RDOQ) of one layer for DeepCABAC: an encoder decision.

DeepCABAC patent (seed 004) §4.3 and §4.4: a layer is quantized uniformly with one step Δ (a weight w becomes
the level l, reconstructed as q = l·Δ), and each level is the candidate of least

    cost = (w − q)² / σ² + λ · R(q)

where σ is the weight's standard deviation (its relevance, ``relevance``) and R(q) the bits the arithmetic
coder would spend on l in its current context state. σ = 1 everywhere is plain-MSE RDOQ; λ = 0 is plain
rounding. The choice is greedy, weight by weight in the coder's scan order, as the patent describes it (no
trellis).

R(q) comes from :class:`RateCounter`, a bin coder for the layer coder's own ``code_level`` that keeps a copy of
the contexts and of the arithmetic coder's range and adds, for each bin, log2(range / sub-range), the exact
information the coder spends on it. After each weight the counter codes the chosen level, so the estimate
follows the contexts' adaptation as the real encoder does. The levels go to ``encode_layer`` unchanged: the
decoder needs nothing new.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

from .reference.engine import FIRST_RANGE, HALF
from .reference.estimators import estimator_factory
from .reference.layer_coder import ContextStore, DeepCabacOptions, Neighbourhood, code_level, matrix_shape


class RateCounter:
    """A bin coder that codes nothing: it tracks the contexts and the coder's range, and counts the bits."""

    def __init__(self, contexts, coder_range: int = FIRST_RANGE) -> None:
        self.contexts = contexts
        self.range = coder_range
        self.bits = 0.0

    @classmethod
    def fresh(cls, options: DeepCabacOptions) -> RateCounter:
        """A counter in the state the layer encoder starts from."""
        make = estimator_factory(options.estimator, **options.estimator_parameters)
        return cls(ContextStore(lambda key: make()))

    def decision(self, key, bin_value: int) -> int:
        context = self.contexts[key]
        lps_range = context.lps_range(self.range)
        sub_range = self.range - lps_range if bin_value == context.mps() else lps_range
        self.bits += math.log2(self.range / sub_range)
        context.update(bin_value)
        self.range = sub_range
        while self.range < HALF:
            self.range <<= 1
        return bin_value

    def bypass(self, count: int, value: int) -> int:
        self.bits += count
        return value

    def trial(self) -> RateCounter:
        """A counter starting from this one's state that leaves it untouched (it copies a context on first use)."""
        base = self.contexts
        return RateCounter(ContextStore(lambda key: copy.copy(base[key])), self.range)


@dataclass(frozen=True)
class RdoqResult:
    """The chosen levels (int32, the layer's shape), the bits the counter estimates for them, and the
    weighted distortion Σ (w − lΔ)² / σ² they leave."""

    levels: np.ndarray
    estimated_bits: float
    distortion: float


def layer_step(weights, max_level: int) -> float:
    """The per-layer step Δ that puts the largest |w| on level ``max_level`` (the patent leaves Δ to the encoder;
    §4.3). A layer of zeros gets Δ = 1."""
    if max_level < 1:
        raise ValueError(f"max_level must be >= 1, got {max_level}")
    largest = float(np.max(np.abs(weights))) if np.size(weights) else 0.0
    return largest / max_level if largest > 0 else 1.0


def uniform_levels(weights, step: float) -> np.ndarray:
    """Plain rounding to the nearest level (ties to even), the baseline without a rate term."""
    return np.rint(np.asarray(weights, np.float64) / step).astype(np.int32)


def candidate_levels(ratio: float) -> list[int]:
    """The nearest level to ``ratio`` = w/Δ first, then the other neighbour, then 0, without repeats."""
    nearest = int(np.rint(ratio))
    other = math.floor(ratio) if nearest > ratio else math.ceil(ratio)
    return list(dict.fromkeys((nearest, int(other), 0)))


def rdoq_layer(weights, step: float, lam: float, sigma=None, options: DeepCabacOptions = DeepCabacOptions(),
               max_distortion: float | None = None) -> RdoqResult:
    """RD-optimised levels of one layer (module docstring).

    ``sigma``: the weights' standard deviations, the layer's shape, all > 0 (None: 1, plain-MSE RDOQ).
    ``max_distortion``: if set, a candidate other than the nearest level must keep (w − q)²/σ² within it; 1.0 is
    the patent's optional rule that q stays within ±σ of w (§4.4)."""
    values = np.asarray(weights, np.float64)
    if not (step > 0 and math.isfinite(step)) or lam < 0:
        raise ValueError(f"step must be finite and > 0 and lambda >= 0, got step {step} and lambda {lam}")
    precision = np.ones_like(values) if sigma is None else 1.0 / np.square(np.asarray(sigma, np.float64))
    if precision.shape != values.shape:
        raise ValueError(f"sigma has shape {precision.shape}, the weights {values.shape}")
    flat, flat_precision = values.ravel().tolist(), precision.ravel().tolist()
    levels = [0] * len(flat)
    counter = RateCounter.fresh(options)
    around = Neighbourhood(levels, matrix_shape(values.shape)[1])
    distortion = 0.0
    for index, (weight, weight_precision) in enumerate(zip(flat, flat_precision)):
        around.row, around.column = divmod(index, around.columns)
        best_cost, best_level, best_distortion = math.inf, 0, 0.0
        for position, level in enumerate(candidate_levels(weight / step)):
            level_distortion = (weight - level * step) ** 2 * weight_precision
            if position and max_distortion is not None and level_distortion > max_distortion:
                continue
            cost = level_distortion
            if lam:
                trial = counter.trial()
                code_level(trial, options, around, level)
                cost += lam * trial.bits
            if cost < best_cost:
                best_cost, best_level, best_distortion = cost, level, level_distortion
        code_level(counter, options, around, best_level)
        levels[index] = around.previous = best_level
        distortion += best_distortion
    return RdoqResult(np.array(levels, np.int32).reshape(values.shape), counter.bits, distortion)
