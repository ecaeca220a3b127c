"""Fixed-point (power-of-two) quantization: parameters (T/AI 115.1-2021 §7.2.3.2, Tables 178-181; §8.2.3.2,
Tables 239-240) and activations with their calibration (§7.2.4.2, Tables 189-190; §8.2.4.2, Tables 245-246;
§9.4.1.2, Table 289).

A tensor is one unit with scale 2**-p: q = clip(round(2**p * x), -2**(n-1), 2**(n-1) - 1), x' = 2**-p * q (eqs.
13-15). p comes from eq. (16) (non-overflow) or from eq. (17)'s least squared error over p..p+3 (min-diff, Table
181). The clip is the standard's saturation (A0-5: without it min-diff prefers overflowing codes); an all-zero
tensor has p = 0.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

import numpy as np

from aipu.quant._checks import check_bits, check_choice, check_codes, check_finite, code_range, round_clip
from aipu.quant.methods import DMethod, QMethod

MIN_DIFF_TRIES = 3      # Table 181 tries p + 1 .. p + 3 after the non-overflow p


class PositionMethod(IntEnum):
    """Table 179."""
    NON_OVERFLOW = 0
    MIN_DIFF = 1


@dataclass(frozen=True)
class FixQuantizeParameter:
    """Table 178's parameters: the weights' and the bias's fixed-point positions, the method and the bits."""
    w_p: int
    b_p: int | None
    method: PositionMethod
    n: int
    q_method: ClassVar[QMethod] = QMethod.FIXED_POINT_PARAMETER
    d_method: ClassVar[DMethod] = DMethod.FIXED_POINT_PARAMETER


@dataclass(frozen=True)
class FixQuantizeActivation:
    """Table 189's parameters: the activation's position X_p, the method and the bits."""
    x_p: int
    method: PositionMethod
    n: int
    q_method: ClassVar[QMethod] = QMethod.FIXED_POINT_ACTIVATION
    d_method: ClassVar[DMethod] = DMethod.FIXED_POINT_ACTIVATION


def calc_quantized_value(t, p: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Table 181's calc_quantized_value with saturation: (2**-p * q, q), q = clip(round(2**p * t))."""
    with np.errstate(over="ignore"):      # 2**p * t beyond float64 is infinite, and saturates like any value out
        scaled = np.ldexp(check_finite("t", t), p)
    q = round_clip(scaled, *code_range(n, signed=True))
    return np.ldexp(q.astype(np.float64), -p), q


def non_overflow_position(t, n: int) -> int:
    """Eq. (16): the largest p at which max|t| still fits [-2**(n-1), 2**(n-1) - 1]; 0 for an all-zero t."""
    t = check_finite("t", t)
    lo, hi = code_range(n, signed=True)
    bound = max(abs(float(t.max()) / hi), abs(float(t.min()) / lo)) if t.size else 0.0
    return math.floor(-math.log2(bound)) if bound > 0 else 0


def quantize_tensor(t, method=PositionMethod.NON_OVERFLOW, n: int = 8) -> tuple[np.ndarray, int]:
    """Table 181's quantize_tensor: (codes, p). Min-diff keeps the first p with the least squared error."""
    method = PositionMethod(check_choice("method", method, tuple(PositionMethod)))
    t = check_finite("t", t)
    p = non_overflow_position(t, check_bits("n", n))
    dequantized, best = calc_quantized_value(t, p, n)
    if method == PositionMethod.NON_OVERFLOW:
        return best, p
    best_p, least = p, float(np.sum((t - dequantized) ** 2))
    for candidate in range(p + 1, p + 1 + MIN_DIFF_TRIES):
        dequantized, q = calc_quantized_value(t, candidate, n)
        error = float(np.sum((t - dequantized) ** 2))
        if error < least:
            best, best_p, least = q, candidate, error
    return best, best_p


def fix_quantize_parameter(w, b=None, method=PositionMethod.NON_OVERFLOW, n: int = 8):
    """Table 181: (W_quantized, B_quantized, record); the bias gets its own position from B (A0-5)."""
    w_q, w_p = quantize_tensor(w, method, n)
    b_q, b_p = quantize_tensor(b, method, n) if b is not None else (None, None)
    return w_q, b_q, FixQuantizeParameter(w_p, b_p, PositionMethod(method), n)


def _dequantize(q, p: int, n: int) -> np.ndarray:
    """Eq. (15) / Table 240: q * 2**-p."""
    return np.ldexp(check_codes("q", q, *code_range(n, signed=True)).astype(np.float64), -p)


def fix_dequantize_parameter(w_q, b_q, params: FixQuantizeParameter):
    """Table 240: the weights and (if any) the bias at their positions."""
    b = _dequantize(b_q, params.b_p, params.n) if b_q is not None else None
    return _dequantize(w_q, params.w_p, params.n), b


def calibrate_position(batches, method=PositionMethod.NON_OVERFLOW, n: int = 8, selection: str = "mode") -> int:
    """The activation's final position over calibration batches (Table 190, Table 289): each batch's p from
    :func:`quantize_tensor`, then the most frequent p (``"mode"``, ties to the smaller p: fewer saturations) or the
    largest (``"max"``, as §7.2.4.2's prose says); A0-6."""
    check_choice("selection", selection, ("mode", "max"))
    positions = np.array([quantize_tensor(batch, method, n)[1] for batch in batches])
    if positions.size == 0:
        raise ValueError("batches is empty: give at least one calibration batch")
    if selection == "max":
        return int(positions.max())
    values, counts = np.unique(positions, return_counts=True)     # ascending: argmax takes the smaller p
    return int(values[np.argmax(counts)])


def fix_quantize_activation(x, calibration_batches, method=PositionMethod.NON_OVERFLOW, n: int = 8,
                            selection: str = "mode"):
    """Table 190: (X_quantized, record) with X_p calibrated over the batches (the activations of the layer)."""
    p = calibrate_position(calibration_batches, method, n, selection)
    return calc_quantized_value(x, p, n)[1], FixQuantizeActivation(p, PositionMethod(method), n)


def fix_dequantize_activation(x_q, params: FixQuantizeActivation) -> np.ndarray:
    """Table 246: X_quantized * 2**-X_p."""
    return _dequantize(x_q, params.x_p, params.n)
