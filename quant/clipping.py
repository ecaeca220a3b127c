"""Trained clipping value, the inference side (T/AI 115.1-2021 §7.2.4.1, Tables 187-188; §8.2.4.1, Tables
243-244) and the EMA starting value of alpha (§9.4.2.2, eq. 48).

x is clipped to [-alpha, alpha] and q = round(x * X_scale) with X_scale = (2**(n-1) - 1) / alpha, the scale of the
dequantizer and of §9.4.2.2 (A0-10: Table 188's 2**(n-1) / alpha sends x = alpha to 2**(n-1), past the code
range); x' = q * alpha / (2**(n-1) - 1). The gradient training of alpha is out of scope.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from aipu.quant._checks import check_bits, check_codes, check_count, check_finite, check_positive, round_clip
from aipu.quant.granularity import Granularity, partition
from aipu.quant.methods import DMethod, QMethod


@dataclass(frozen=True)
class TrainableAlphaQuantization:
    """Table 187's parameters: the clipping value Alpha per unit, and N bits (X_offset is 0)."""
    alpha: tuple[float, ...]
    granularity: Granularity
    n: int
    q_method: ClassVar[QMethod] = QMethod.TRAINED_CLIPPING
    d_method: ClassVar[DMethod] = DMethod.TRAINED_CLIPPING

    def __post_init__(self):
        check_bits("n", self.n, 2)
        check_positive("alpha", self.alpha)

    @property
    def levels(self) -> int:
        """2**(n-1) - 1: the code of x = alpha."""
        return (1 << (self.n - 1)) - 1

    def x_scale(self) -> np.ndarray:
        return self.levels / np.asarray(self.alpha)


def trainable_alpha_quantize(x, params: TrainableAlphaQuantization, labels=None):
    """Table 188 with A0-10's scale: round(clip(x, -alpha, alpha) * X_scale), in [-(2**(n-1) - 1), 2**(n-1) - 1]."""
    units = partition(x, params.granularity, labels)
    check_count("alpha", params.alpha, units.count)
    flat, alpha = units.flatten(x), units.spread(params.alpha)
    return units.join(round_clip(np.clip(flat, -alpha, alpha) * units.spread(params.x_scale()),
                                 -params.levels, params.levels))


def trainable_alpha_dequantize(q, params: TrainableAlphaQuantization, labels=None):
    """Table 244: q / X_scale."""
    units = partition(q, params.granularity, labels)
    check_count("alpha", params.alpha, units.count)
    codes = check_codes("q", units.flatten(q, "q"), -params.levels, params.levels)
    return units.join(codes / units.spread(params.x_scale()))


def ema_alpha(batches, gamma: float = 0.9) -> float:
    """Eq. (48): alpha_t = gamma * alpha_(t-1) + (1 - gamma) * mean over the batch's samples of each sample's
    maximum; alpha_0 is the first batch's mean. Each batch is an array [samples, ...] of the tensor's values."""
    gamma = float(check_finite("gamma", gamma))
    if not 0 <= gamma < 1:
        raise ValueError(f"gamma={gamma!r} must lie in [0, 1)")
    alpha = None
    for batch in batches:
        values = check_finite("batch", batch)
        if values.ndim == 0 or values.size == 0:
            raise ValueError(f"batch has shape {values.shape}: give [samples, ...] with at least one value")
        mean_max = float(values.reshape(len(values), -1).max(axis=1).mean())
        alpha = mean_max if alpha is None else gamma * alpha + (1 - gamma) * mean_max
    if alpha is None:
        raise ValueError("batches is empty: give at least one batch")
    return alpha
