"""Bounded-ReLU activation quantization, all three stages (T/AI 115.1-2021 §7.2.4.4, eqs. 19-22, Tables 193-196).

Stage 1 (statistics): each calibration batch's N-sigma percentile (Table 195), averaged as a running mean into
b_f; b_i = round(b_f * X_scale + X_offset) (eq. 19, X_scale a multiplier), b_f = (b_i - X_offset) / X_scale
(eq. 20); (mul, shift) with b_i * mul / 2**shift ~ 2**(n-1) (Table 196's mul_shift); Y_scale = X_scale * mul /
2**shift. Stage 2 (training): clip(X, 0, b_f) in float. Stage 3 (inference, integers): Y = (clip(X, 0, b_i) * mul
+ 2**(shift-1)) >> shift, the golden model's half-up rounding shift, then clamped to the output: [0, 2**(n-1)]
fits an unsigned n-bit output; a signed one clamps at 2**(n-1) - 1 (A0-13).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from aipu.quant._checks import check_bits, check_choice, check_codes, check_finite, check_positive
from aipu.quant.methods import QMethod
from aipu.sim.golden.rounding import round_half_away, rounding_shift_right

#: Table 195: the percentile each N-sigma bound stands for.
N_SIGMA_PERCENTILE = {3.0: 0.99865, 3.2: 0.99921, 3.5: 0.99977}
CALIBRATION_BATCHES = 50        # Table 196 counts 50 batches
MUL_SHIFT_SHIFTS = range(1, 28)  # Table 196's mul_shift tries shifts 1..27


@dataclass(frozen=True)
class BRelu:
    """Table 193's parameters: N_sigma, X's scale (multiplier) and offset, Bound_f, the sample count n, Bound_i,
    Mul, Shift; ``bits`` is n of 2**(n-1) and ``signed_output`` the output's type."""
    n_sigma: float
    x_scale: float
    x_offset: float
    bound_f: float
    n: int
    bound_i: int
    mul: int
    shift: int
    bits: int = 8
    signed_output: bool = False
    q_method: ClassVar[QMethod] = QMethod.BRELU_ACTIVATION

    @property
    def y_scale(self) -> float:
        """Y_scale = X_scale * mul / 2**shift (a multiplier, as X_scale)."""
        return self.x_scale * self.mul / 2 ** self.shift

    @property
    def output_max(self) -> int:
        return (1 << (self.bits - 1)) - (1 if self.signed_output else 0)


def n_sigma_bound(x, n_sigma: float = 3.0) -> float:
    """Table 196's n_sigma_of: the sorted values' entry at round(size * rate), rate from Table 195 (3.2 too)."""
    rate = N_SIGMA_PERCENTILE[check_choice("n_sigma", float(n_sigma), tuple(N_SIGMA_PERCENTILE))]
    values = np.sort(check_finite("x", x).ravel())
    if values.size == 0:
        raise ValueError("x is empty: a percentile needs at least one value")
    return float(values[min(int(round_half_away(values.size * rate)), values.size - 1)])


def mul_shift(bound_i: int, bits: int = 8) -> tuple[int, int]:
    """Table 196's mul_shift (max_u read as b_i): the first shift in 1..27 whose mul = round((2**(n-1) + 1/2) *
    2**shift / b_i) puts b_i * mul / 2**shift within 1/2 of 2**(n-1). Raises ValueError when none does."""
    bound_i, target = int(check_codes("bound_i", bound_i, 1, 1 << 40)), 1 << (check_bits("bits", bits, 2, 16) - 1)
    for shift in MUL_SHIFT_SHIFTS:
        reach = (target + 0.5) * 2 ** shift
        if reach > bound_i:
            mul = int(round_half_away(reach / bound_i))
            if abs(bound_i * mul / 2 ** shift - target) < 0.5:
                return mul, shift
    raise ValueError(f"bound_i={bound_i} has no (mul, shift <= 27) with bound_i * mul / 2**shift within 1/2 of "
                     f"{target}")


def brelu_parameters(batches, x_scale: float, x_offset: float = 0.0, n_sigma: float = 3.0, bits: int = 8,
                     signed_output: bool = False, batch_count: int = CALIBRATION_BATCHES) -> BRelu:
    """Stage 1 over the first ``batch_count`` calibration batches (X's float values): the running mean
    b_f = (b_f * k + bound) / (k + 1) of their bounds (A0-13), then eqs. (19), (20) and mul_shift."""
    x_scale, x_offset = float(check_positive("x_scale", x_scale)), float(check_finite("x_offset", x_offset))
    check_bits("batch_count", batch_count, 1, 1 << 30)
    bound_f, count = 0.0, 0
    for batch in batches:
        bound_f = (bound_f * count + n_sigma_bound(batch, n_sigma)) / (count + 1)
        count += 1
        if count == batch_count:
            break
    if count == 0:
        raise ValueError("batches is empty: give at least one calibration batch")
    bound_i = int(round_half_away(bound_f * x_scale + x_offset))
    if bound_i <= 0:
        raise ValueError(f"the bound {bound_f!r} quantizes to b_i={bound_i}: a bounded ReLU needs b_i >= 1")
    mul, shift = mul_shift(bound_i, bits)
    return BRelu(float(n_sigma), x_scale, x_offset, (bound_i - x_offset) / x_scale, count, bound_i, mul, shift,
                 bits, signed_output)


def brelu_train(x, params: BRelu) -> np.ndarray:
    """Stage 2, eq. (21): clip(X, 0, b_f) in float."""
    return np.clip(check_finite("x", x), 0.0, params.bound_f)


def brelu_infer(x, params: BRelu) -> np.ndarray:
    """Stage 3, eq. (22) then the requantization: (clip(X, 0, b_i) * mul + 2**(shift-1)) >> shift by the golden
    model's rounding shift, clamped to the output type (int64 values)."""
    codes = check_codes("x", x, -(1 << 40), 1 << 40)
    scaled = rounding_shift_right(np.clip(codes, 0, params.bound_i) * np.int64(params.mul), params.shift, "half_up")
    return np.minimum(scaled, params.output_max)
