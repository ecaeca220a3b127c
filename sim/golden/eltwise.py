"""The elementwise unit (add, sub, max, min, mul) and concat with per-input rescale.

docs/arithmetic.md §8. Inputs are int8/uint8 with numpy broadcasting. Each operand enters as
d = value - zero_point (signed 9 bit).
* add/sub/max/min: each input has its own (M_i, N_i) approximating s_i / s_out. With N = max(N_a, N_b)
  both terms are aligned exactly, t_i = d_i * M_i * 2**(N - N_i), combined (t_a + t_b, t_a - t_b,
  max, min) in ELTWISE_SUM_BITS, then rounded once: round(. / 2**N) + zp_out, clamped.
  This is seed 003 L1063-1065 (M' = M_2 M_3 2**(N1-N2), M'' = M_1 M_3, N' = N_1 + N_3) with the
  compiler multiplying the factors out offline, and only one rounding.
* mul: round(d_a * d_b * M / 2**N) + zp_out with M / 2**N ~ s_a s_b / s_out (S003 L392-396).
"""
from __future__ import annotations

import numpy as np

from aipu.sim.machine.arch import ACC_DTYPE, ELTWISE_SUM_BITS, MAC_OPERAND_MAX, MULTIPLIER_MAX, SHIFT_MAX
from aipu.sim.golden._checks import BYTE_DTYPES, check_array, check_int, dtype_range
from aipu.sim.golden.requant import _check_scales, _output_stage, quantize_multiplier, requantize
from aipu.sim.golden.rounding import check_rounding, round_half_away, rounding_shift_right

ELTWISE_OPS = ("add", "sub", "max", "min", "mul")
#: largest exact alignment 2**(N - N_i) such that MAC_OPERAND_MAX * MULTIPLIER_MAX * 2**align + the other
#: term fits ELTWISE_SUM_BITS
MAX_ALIGN = ELTWISE_SUM_BITS - 2 - (MAC_OPERAND_MAX * MULTIPLIER_MAX).bit_length()


def _centred(name: str, value: np.ndarray, zero_point) -> np.ndarray:
    check_array(name, value, BYTE_DTYPES)
    return value.astype(np.int64) - check_int(f"{name}_zero_point", zero_point, *dtype_range(value.dtype))


def _pair(name: str, value, lo: int, hi: int) -> tuple[int, int]:
    if np.ndim(value) != 1 or len(value) != 2:
        raise ValueError(f"{name} must be a pair (a, b) for add/sub/max/min, got {value!r}")
    return check_int(f"{name}[0]", value[0], lo, hi), check_int(f"{name}[1]", value[1], lo, hi)


def eltwise(a: np.ndarray, b: np.ndarray, op: str, *, multiplier, shift, a_zero_point=0, b_zero_point=0,
            out_zero_point=0, qmin=None, qmax=None, out_dtype=np.int8, rounding: str = "half_up",
            return_saturated: bool = False):
    """Quantized elementwise op. add/sub/max/min: multiplier=(M_a, M_b), shift=(N_a, N_b);
    mul: multiplier=M, shift=N. Returns ``out_dtype`` (and the saturation count if asked)."""
    if op not in ELTWISE_OPS:
        raise ValueError(f"op={op!r} is not one of {ELTWISE_OPS}")
    check_rounding(rounding)
    da, db = _centred("a", a, a_zero_point), _centred("b", b, b_zero_point)
    try:
        np.broadcast_shapes(da.shape, db.shape)
    except ValueError as exc:
        raise ValueError(f"shapes of a {a.shape} and b {b.shape} do not broadcast") from exc
    if op == "mul":
        m, n = check_int("multiplier", multiplier, 0, MULTIPLIER_MAX), check_int("shift", shift, 0, SHIFT_MAX)
        scaled = rounding_shift_right(da * db * m, n, rounding)
    else:
        (ma, mb), (na, nb) = _pair("multiplier", multiplier, 0, MULTIPLIER_MAX), _pair("shift", shift, 0, SHIFT_MAX)
        n = max(na, nb)
        if n - min(na, nb) > MAX_ALIGN:
            raise ValueError(f"shift=({na}, {nb}) differ by {n - min(na, nb)} > {MAX_ALIGN}: the aligned "
                             f"terms would not fit {ELTWISE_SUM_BITS} bits")
        ta, tb = da * (ma << (n - na)), db * (mb << (n - nb))
        combined = {"add": np.add, "sub": np.subtract, "max": np.maximum, "min": np.minimum}[op](ta, tb)
        scaled = rounding_shift_right(combined, n, rounding)
    return _output_stage(scaled, out_zero_point, qmin, qmax, out_dtype, return_saturated)


def eltwise_params(op: str, a_scale: float, b_scale: float, out_scale: float) -> dict:
    """``multiplier``/``shift`` for :func:`eltwise` from the three real scales (real = scale * (q - zp)).

    add/sub/max/min: M_i / 2**N_i ~ s_i / s_out, each within the :func:`quantize_multiplier` bound; if
    the shifts differ by more than MAX_ALIGN the finer input is re-quantized at the coarser shift +
    MAX_ALIGN (its relative error grows, but its contribution is < 2**-MAX_ALIGN of the other's).
    mul: M / 2**N ~ s_a s_b / s_out.
    """
    if op not in ELTWISE_OPS:
        raise ValueError(f"op={op!r} is not one of {ELTWISE_OPS}")
    for name, value in (("a_scale", a_scale), ("b_scale", b_scale), ("out_scale", out_scale)):
        _check_scales(value, name)
    if op == "mul":
        m, n = quantize_multiplier(a_scale * b_scale / out_scale)
        return {"multiplier": m, "shift": n}
    (ma, na), (mb, nb) = quantize_multiplier(a_scale / out_scale), quantize_multiplier(b_scale / out_scale)
    limit = min(na, nb) + MAX_ALIGN
    if na > limit:
        na, ma = limit, int(round_half_away(np.ldexp(a_scale / out_scale, limit)))
    if nb > limit:
        nb, mb = limit, int(round_half_away(np.ldexp(b_scale / out_scale, limit)))
    return {"multiplier": (ma, mb), "shift": (na, nb)}


def concat(inputs, *, axis: int = 1, zero_points, multipliers, shifts, out_zero_point=0, qmin=None, qmax=None,
           out_dtype=np.int8, rounding: str = "half_up") -> np.ndarray:
    """Concatenate after requantizing each input: round((x_i - zp_i) * M_i / 2**N_i) + zp_out.

    M_i = 1, N_i = 0 and zp_i = zp_out is an exact copy (S003 L719-756's unified-scale trick).
    """
    inputs = list(inputs)
    if not inputs:
        raise ValueError("concat needs at least one input")
    for name, values in (("zero_points", zero_points), ("multipliers", multipliers), ("shifts", shifts)):
        if len(values) != len(inputs):
            raise ValueError(f"{name} has {len(values)} entries for {len(inputs)} inputs")
    parts = []
    for i, (x, zp, m, n) in enumerate(zip(inputs, zero_points, multipliers, shifts)):
        centred = _centred(f"inputs[{i}]", x, zp).astype(ACC_DTYPE)
        parts.append(requantize(centred, multiplier=m, shift=n, out_zero_point=out_zero_point, qmin=qmin,
                                qmax=qmax, rounding=rounding, out_dtype=out_dtype, channel_axis=0))
    try:
        return np.concatenate(parts, axis=check_int("axis", axis))
    except (ValueError, np.exceptions.AxisError) as exc:
        raise ValueError(f"concat: inputs do not concatenate along axis {axis}: {exc}") from exc
