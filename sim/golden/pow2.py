"""The shift-quantization patent (docs/sources.md) expressed on the requantizer: offline helpers.

docs/arithmetic.md §5. A value is q * 2**(-e) with a per-layer exponent e. The patent's forward step
(S620-S640: ReLU, saturate to +-QUAN * 2**s, arithmetic shift by s, keep the low 8 bits) is exactly
``requantize(acc, bias=b, **pow2_requant_params(...))``: M = 1, N = s, rounding "floor",
out_zero_point 0, clamp [-QUAN or 0, QUAN]; a negative s becomes M = 2**-s, N = 0.
"""
from __future__ import annotations

import numpy as np

from aipu.sim.machine.arch import BIAS_BITS, BIAS_DTYPE, MULTIPLIER_BITS, bit_range
from aipu.sim.golden._checks import QUANT_DTYPES, check_int, dtype_range
from aipu.sim.golden.rounding import round_half_away

#: QUAN of the patent's embodiment: 8-bit features, 7-bit kernels (the patent's [0069]).
FEATURE_QUAN, KERNEL_QUAN = 127, 63
_BIAS_MIN, _BIAS_MAX = bit_range(BIAS_BITS, signed=True)
_OUTPUT_QUAN_MAX = max(dtype_range(dtype)[1] for dtype in QUANT_DTYPES)   # [-QUAN, QUAN] fits an output type


def pow2_scale_exponent(abs_max: float, quan: int) -> int:
    """The patent's formula (1), [0014]: e = round(log2(QUAN / abs_max)), ties away from zero."""
    quan = check_int("quan", quan, 1)
    if not (np.isfinite(abs_max) and abs_max > 0):
        raise ValueError(f"abs_max={abs_max!r} must be finite and positive")
    return int(round_half_away(np.log2(quan / float(abs_max))))


def pow2_quantize(values, exponent: int, quan: int | None) -> np.ndarray:
    """The patent's formula (2), [0023]: q = round(v * 2**e), ties away from zero, then clamped to [-QUAN, QUAN].

    ``quan=None`` is the int32 bias (the patent's [0084]): no clamp, but it must fit BIAS_BITS (ValueError).
    The clamp resolves A2-3 (the patent's 255 -> 128 and 7-bit weights up to +-89). Returns int32.
    """
    exponent = check_int("exponent", exponent)
    q = round_half_away(np.ldexp(np.asarray(values, dtype=np.float64), exponent))
    if quan is None:
        if q.size and (q.min() < _BIAS_MIN or q.max() > _BIAS_MAX):
            raise ValueError(f"quantized bias {int(q[np.abs(q).argmax()])} does not fit int{BIAS_BITS}")
    else:
        quan = check_int("quan", quan, 1, _BIAS_MAX)
        q = np.clip(q, -quan, quan)
    return q.astype(BIAS_DTYPE)


def pow2_requant_params(feature_in_exponent: int, kernel_exponent: int, feature_out_exponent: int, *,
                        quan: int = FEATURE_QUAN, relu: bool = False) -> dict:
    """Keyword arguments for :func:`requantize` that perform the patent's S620-S640 for one layer.

    s = scale_feature[i-1] + scale_kernel[i] - scale_feature[i] (S640, [0097]). s >= 0: M = 1, N = s.
    s < 0 (A2-4, a left shift): M = 2**-s, N = 0, exact while -s <= MULTIPLIER_BITS - 1.
    """
    shift = (check_int("feature_in_exponent", feature_in_exponent) + check_int("kernel_exponent", kernel_exponent)
             - check_int("feature_out_exponent", feature_out_exponent))
    quan = check_int("quan", quan, 1, _OUTPUT_QUAN_MAX)
    if shift < -(MULTIPLIER_BITS - 1):
        raise ValueError(f"layer shift s={shift} needs a left shift by {-shift} > {MULTIPLIER_BITS - 1} bits")
    multiplier, right = (1, shift) if shift >= 0 else (2 ** -shift, 0)
    return {"multiplier": multiplier, "shift": right, "rounding": "floor", "out_zero_point": 0,
            "qmin": 0 if relu else -quan, "qmax": quan}
