"""Scale alignment of the inputs of add, sub or concat (T/AI 115.1-2021 §7.2.4.5, eqs. 23-28, Tables 197-198).

Scales are steps here (real = q * scale, A0-14). Stage 1: for each input j but the reference, scale_diff =
Yscale_ref / Yscale_j (eq. 23) and (mul, shift) = mul_shift_f(scale_diff) (eq. 24, Table 198), so mul / 2**shift
~ Yscale_j / Yscale_ref; the reference has (1, 0). The aligned input's exact scale is then Yscale_ref * mul /
2**shift (eq. 25 as the step convention needs it), and eq. (26) folds the same correction into the producing
layer's weight scale. Stage 3 (integers): Yq_j = (Y_j * mul + 2**(shift-1)) >> shift (eq. 28), the golden model's
half-up rounding shift; at shift 0 the rounding term is 0. Only Method 1 and layer granularity exist.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from aipu.quant._checks import check_bits, check_codes, check_count, check_positive
from aipu.quant.methods import QMethod
from aipu.sim.golden.rounding import round_half_away, rounding_shift_right

PRECISION = 0.02            # Table 198's default relative precision
MUL_SHIFT_SHIFTS = range(0, 28)


@dataclass(frozen=True)
class ScaleSynchronization:
    """Table 197's parameters: (mul, shift) per input, the reference's (1, 0); Method 1, layer granularity."""
    params: tuple[tuple[int, int], ...]
    reference: int = 0
    method: int = 1
    granularity: int = 2
    q_method: ClassVar[QMethod] = QMethod.SCALE_ALIGNMENT


def mul_shift_f(scale: float, precision: float = PRECISION) -> tuple[int, int]:
    """Table 198 (``ratio`` read as ``scale``): the first shift in 0..27 with 2**shift > scale whose
    mul = round(2**shift / scale) gives |2**shift / mul - scale| < precision * scale. Raises ValueError when no
    shift meets the precision (A0-14)."""
    scale, precision = float(check_positive("scale", scale)), float(check_positive("precision", precision))
    for shift in MUL_SHIFT_SHIFTS:
        if 2 ** shift > scale:
            mul = int(round_half_away(2 ** shift / scale))
            if abs(2 ** shift / mul - scale) < precision * scale:
                return mul, shift
    raise ValueError(f"scale={scale!r}: no shift in 0..27 gives 2**shift / mul within {precision} of it")


def scale_synchronization_parameters(y_scales, reference: int = 0, w_scales=None, precision: float = PRECISION):
    """Stage 1: (record, aligned scales, weight scales). The aligned scale of input j is Yscale_ref * mul /
    2**shift (eq. 25 under the step convention; the reference keeps its own); each given weight scale becomes
    Wscale_j * aligned_j / Yscale_j (eq. 26; per-channel arrays welcome)."""
    scales = check_positive("y_scales", y_scales)
    if scales.ndim != 1 or scales.size < 2:
        raise ValueError(f"y_scales has shape {scales.shape}: give one scale per input, at least two")
    reference = check_bits("reference", reference, 0, scales.size - 1)
    params = tuple((1, 0) if j == reference else mul_shift_f(scales[reference] / scales[j], precision)
                   for j in range(scales.size))
    aligned = [float(scales[reference] * mul / 2 ** shift) for mul, shift in params]
    folded = None
    if w_scales is not None:
        check_count("w_scales", w_scales, scales.size)
        folded = [check_positive("w_scales", w) * aligned[j] / scales[j] for j, w in enumerate(w_scales)]
    return ScaleSynchronization(params, reference), aligned, folded


def scale_synchronization(x, params: ScaleSynchronization) -> list[np.ndarray]:
    """Stage 3, eq. (28) on every input but the reference (integers in, int64 out; params indexed by input,
    A0-14)."""
    check_count("x", x, len(params.params))
    return [check_codes("x", values, -(1 << 40), 1 << 40) if j == params.reference else
            rounding_shift_right(check_codes("x", values, -(1 << 40), 1 << 40) * np.int64(mul), shift, "half_up")
            for j, (values, (mul, shift)) in enumerate(zip(x, params.params))]
