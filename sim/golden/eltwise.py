"""The elementwise unit (add, sub, max, min, mul) and concat with per-input rescale.

docs/arithmetic.md §8. Inputs are int8/uint8 with numpy broadcasting. Each operand enters as
d = value - zero_point (signed 9 bit).
* add/sub/max/min: each input has its own (M_i, N_i) approximating s_i / s_out. With N = max(N_a, N_b)
  both terms are aligned exactly, t_i = d_i * M_i * 2**(N - N_i), combined (t_a + t_b, t_a - t_b,
  max, min) in ELTWISE_SUM_BITS, then rounded once: round(. / 2**N) + zp_out, clamped.
  This is seed 003 L1063-1065 (M' = M_2 M_3 2**(N1-N2), M'' = M_1 M_3, N' = N_1 + N_3) with the
  compiler multiplying the factors out offline, and only one rounding.
* mul: round(d_a * d_b * M / 2**N) + zp_out with M / 2**N ~ s_a s_b / s_out (S003 L392-396).
The arithmetic runs in numba kernels with 32-bit lanes (sim/golden/fast/eltwise.py).
"""
from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import numpy as np

from aipu.sim.machine.arch import ACC_DTYPE, ELTWISE_SUM_BITS, MAC_OPERAND_MAX, MULTIPLIER_MAX, SHIFT_MAX
from aipu.sim.golden.fast import kernels
from aipu.sim.golden._checks import BYTE_DTYPES, check_array, check_int, dtype_range, plain_scalars
from aipu.sim.golden.requant import _check_scales, _output_checks, quantize_multiplier, requantize
from aipu.sim.golden.rounding import check_rounding, round_half_away

ELTWISE_OPS = ("add", "sub", "max", "min", "mul")
#: largest exact alignment 2**(N - N_i) such that MAC_OPERAND_MAX * MULTIPLIER_MAX * 2**align + the other
#: term fits ELTWISE_SUM_BITS
MAX_ALIGN = ELTWISE_SUM_BITS - 2 - (MAC_OPERAND_MAX * MULTIPLIER_MAX).bit_length()


def _zero_point(name: str, dtype: np.dtype, zero_point) -> int:
    """The checks of an operand's type (on an empty array of it, for check_array's words) and zero point."""
    check_array(name, np.empty(0, dtype), BYTE_DTYPES)
    return check_int(f"{name}_zero_point", zero_point, *dtype_range(dtype))


def _pair(name: str, value, lo: int, hi: int) -> tuple[int, int]:
    if np.ndim(value) != 1 or len(value) != 2:
        raise ValueError(f"{name} must be a pair (a, b) for add/sub/max/min, got {value!r}")
    return check_int(f"{name}[0]", value[0], lo, hi), check_int(f"{name}[1]", value[1], lo, hi)


def _tie_rule(rounding: str, shift: int) -> int:
    """What the kernels do on an exact half after rounding it up: nothing for floor (no offset, no ties) and
    where the shift is 0 (nothing is rounded)."""
    module = kernels("eltwise")
    rules = {"floor": module.NO_TIE, "half_up": module.NO_TIE, "half_to_even": module.TIE_TO_EVEN,
             "half_away_from_zero": module.TIE_AWAY_FROM_ZERO}
    return rules[rounding] if shift else module.NO_TIE


def _offsets(e: int, low: int, rounding: str) -> tuple[int, int, int]:
    """(h_x, h_y, low) to round (X * 2**e + Y) / 2**(e + low) in the kernels: half up's offset on X or on Y, and
    ``low`` capped where it stops mattering (sim/golden/fast/eltwise.py)."""
    low = min(low, 26)
    if rounding == "floor" or e + low == 0:
        return 0, 0, low
    return (1 << (low - 1), 0, low) if low else (0, 1 << (e - 1), low)


def _single_term(zero_point: int, multiplier: int, shift: int, rounding: str) -> tuple[int, int, int]:
    """(k, c, low) with which the kernels round (x - zero_point) * M / 2**N as (x * k + c) / 2**low; N = 0 as
    2 M / 2**1, which has no ties (the kernels' tie rule then needs no exception)."""
    if shift == 0:
        multiplier, shift = 2 * multiplier, 1
    h, _, low = _offsets(0, shift, rounding)
    return multiplier, h - zero_point * multiplier, low


def _int32(*values) -> np.ndarray:
    return np.array(values, np.int32)


def _folded(tie_rule: int, low: int, zero_point: int) -> int:
    """What of the output zero point goes into the rounding's sum X (zero_point * 2**low, then added to X, the
    zero point becoming 0): floor((X + zp 2**L) / 2**L) = floor(X / 2**L) + zp, where no tie rule looks at the
    rounded value's sign or parity and X stays far inside int32 (|X + floor(Y / 2**e)| < 2**25 for L >= 1).
    The kernels' uncounted loop then adds nothing after rounding (an add 5-7 % faster)."""
    fold = tie_rule == kernels("eltwise").NO_TIE and low >= 1 and abs(zero_point) << low <= 1 << 30
    return zero_point << low if fold else 0


def _folded_terms(tie_rule: int, terms: list[tuple[int, int, int]], zero_point: int) -> tuple[list, int]:
    """Single terms (k, c, low) with the output zero point folded into each c where every one takes it
    (:func:`_folded`; max, min and concat add it after rounding them), and the zero point left to add."""
    folds = [_folded(tie_rule, low, zero_point) for _, _, low in terms]
    if zero_point and all(folds):
        return [(k, c + fold, low) for (k, c, low), fold in zip(terms, folds)], 0
    return terms, zero_point


class _Plan(NamedTuple):
    """What eltwise makes of all its arguments but the operands' values: a kernel call."""

    kernel: Callable            # add, mul or max_min of sim/golden/fast/eltwise.py
    parameters: np.ndarray      # its int32 parameters
    tie_rule: int
    swap: bool                  # b goes first (add/sub: the operand with the smaller shift; mul: a has runs)
    per_run_kernel: Callable | None     # mul_per_run where b (a after the swap) has a value per run of values
    shape: tuple[int, ...]
    dtype: np.dtype


def _plan(a_dtype, a_shape, b_dtype, b_shape, op, multiplier, shift, a_zero_point, b_zero_point, out_zero_point,
          qmin, qmax, out_dtype, rounding) -> _Plan:
    """eltwise's checks, in its order, of everything but the operands' values, and the kernel call they give."""
    module = kernels("eltwise")
    if op not in ELTWISE_OPS:
        raise ValueError(f"op={op!r} is not one of {ELTWISE_OPS}")
    check_rounding(rounding)
    za, zb = _zero_point("a", a_dtype, a_zero_point), _zero_point("b", b_dtype, b_zero_point)
    try:
        shape = a_shape if a_shape == b_shape else np.broadcast_shapes(a_shape, b_shape)
    except ValueError as exc:
        raise ValueError(f"shapes of a {a_shape} and b {b_shape} do not broadcast") from exc
    if op == "mul":
        m, n = check_int("multiplier", multiplier, 0, MULTIPLIER_MAX), check_int("shift", shift, 0, SHIFT_MAX)
    else:
        (ma, mb), (na, nb) = _pair("multiplier", multiplier, 0, MULTIPLIER_MAX), _pair("shift", shift, 0, SHIFT_MAX)
        if max(na, nb) - min(na, nb) > MAX_ALIGN:
            raise ValueError(f"shift=({na}, {nb}) differ by {max(na, nb) - min(na, nb)} > {MAX_ALIGN}: the aligned "
                             f"terms would not fit {ELTWISE_SUM_BITS} bits")
    dtype, qmin, qmax, zp = _output_checks(out_zero_point, qmin, qmax, out_dtype)
    swap, per_run_kernel = False, None
    if op == "mul":
        shortest = module.PER_RUN_BLOCK     # mul_per_run's shortest run
        swap = b_shape == shape and _repeat(a_shape, shape) >= shortest
        if swap or (a_shape == shape and _repeat(b_shape, shape) >= shortest):
            per_run_kernel = module.mul_per_run
        if swap:
            za, zb = zb, za
        e = min(8, n)
        h_x, h_y, low = _offsets(e, n - e, rounding)
        # N = 0 rounds nothing: a product past 2**17 / M saturates every output type, so it is capped there
        product_max = MAC_OPERAND_MAX ** 2 if n else (1 << 17) // max(m, 1) + 1
        kernel, tie_rule = module.mul, _tie_rule(rounding, n)
        folded = _folded(tie_rule, low, zp)
        parameters = _int32(za, zb, product_max, m >> e, h_x + folded, m & ((1 << e) - 1), h_y, e, low,
                            zp - (folded >> low), qmin, qmax)
    elif op in ("max", "min"):
        kernel, tie_rule = module.max_min, _tie_rule(rounding, 1)
        (term_a, term_b), zp = _folded_terms(tie_rule, [_single_term(za, ma, na, rounding),
                                                        _single_term(zb, mb, nb, rounding)], zp)
        parameters = _int32(op == "max", *term_a, *term_b, zp, qmin, qmax)
    else:
        sign, swap = (1 if op == "add" else -1), na > nb
        terms = [(za, ma, na, 1), (zb, mb, nb, sign)]
        (z_f, m_f, n_f, s_f), (z_s, m_s, n_s, s_s) = terms[::-1] if swap else terms
        h_x, h_y, low = _offsets(n_s - n_f, n_f, rounding)
        kernel, tie_rule = module.add, _tie_rule(rounding, n_s)
        folded = _folded(tie_rule, low, zp)
        k_f, c_f, k_s, c_s, e = s_f * m_f, h_x - s_f * m_f * z_f + folded, s_s * m_s, h_y - s_s * m_s * z_s, n_s - n_f
        parameters = _int32(k_f, c_f, k_s, c_s, e, low, zp - (folded >> low), qmin, qmax)
        first_range, second_range = (b_dtype, a_dtype) if swap else (a_dtype, b_dtype)
        if tie_rule == module.NO_TIE and e + low < 32 and _one_sum_fits(
                k_f << e, k_s, (c_f << e) + c_s, dtype_range(first_range), dtype_range(second_range)):
            kernel, parameters = module.add_one_sum, _int32(k_f << e, k_s, (c_f << e) + c_s, e + low,
                                                            zp - (folded >> low), qmin, qmax)
    return _Plan(kernel, parameters, tie_rule, swap, per_run_kernel, shape, dtype)


def _one_sum_fits(k_f: int, k_s: int, c: int, first_range: tuple[int, int], second_range: tuple[int, int]) -> bool:
    """Whether first * k_f + second * k_s + c stays within int32 for every value of the operands' types (its
    extremes are at their corners): add_one_sum then forms X * 2**e + Y in one sum, 11-12 % faster than the
    nested division on 64x56x56, 24x56x56 (uint8) and 256x14x14 adds (measured)."""
    extremes = [f * k_f + s * k_s + c for f in first_range for s in second_range]
    return -(1 << 31) <= min(extremes) and max(extremes) < 1 << 31


_cached_plan = functools.lru_cache(maxsize=1024)(_plan)


def _cacheable(rounding, out_dtype, scalars) -> bool:
    """Arguments a plan cached for equal ones holds for (plain_scalars), with a rounding mode and a type."""
    return type(rounding) is str and isinstance(out_dtype, (type, str, np.dtype)) and plain_scalars(scalars)


def _repeat(x_shape: tuple[int, ...], shape: tuple[int, ...]) -> int:
    """How many times each value of an array of ``x_shape`` repeats in a row when broadcast to ``shape``: the
    size of the trailing axes it is broadcast along where those are all it is broadcast along (a value per
    channel, as a squeeze-excite scale), else 0. x's missing leading axes count as axes of size 1."""
    if len(x_shape) > len(shape):
        return 0
    x_shape = (1,) * (len(shape) - len(x_shape)) + tuple(x_shape)
    leading = next((axis for axis, size in enumerate(x_shape) if size != shape[axis]), len(shape))
    return math.prod(shape[leading:]) if all(size == 1 for size in x_shape[leading:]) else 0


def _values(x: np.ndarray) -> np.ndarray:
    """x flat and C-contiguous; copied rather than read-only (numba would compile the kernels anew for a
    read-only array)."""
    return x.reshape(-1) if x.flags.c_contiguous and x.flags.writeable else x.flatten()


def _flat(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """x flat, broadcast to ``shape`` (:func:`_values`). A broadcast along trailing axes only repeats each value:
    1.5x faster than numpy's general broadcast copy."""
    if x.shape == shape:
        return _values(x)
    repeat = _repeat(x.shape, shape)
    if repeat:
        return np.repeat(x.reshape(-1), repeat)
    return np.broadcast_to(x, shape).copy().reshape(-1)


def eltwise(a: np.ndarray, b: np.ndarray, op: str, *, multiplier, shift, a_zero_point=0, b_zero_point=0,
            out_zero_point=0, qmin=None, qmax=None, out_dtype=np.int8, rounding: str = "half_up",
            return_saturated: bool = False):
    """Quantized elementwise op. add/sub/max/min: multiplier=(M_a, M_b), shift=(N_a, N_b);
    mul: multiplier=M, shift=N. Returns ``out_dtype`` (and the saturation count if asked).

    The checks and the kernel's parameters depend on neither operand's values; a command repeats them for every
    tile, so they are cached for plain int arguments (a small tensor otherwise spends most of its time there)."""
    for name, value in (("a", a), ("b", b)):
        if not isinstance(value, np.ndarray):
            check_array(name, value, BYTE_DTYPES)
    scalars = (multiplier, shift, a_zero_point, b_zero_point, out_zero_point, qmin, qmax)
    key = (a.dtype, a.shape, b.dtype, b.shape, op, *scalars, out_dtype, rounding)
    plan = _cached_plan(*key) if type(op) is str and _cacheable(rounding, out_dtype, scalars) else _plan(*key)
    first, second = (b, a) if plan.swap else (a, b)
    out = np.empty(plan.shape, plan.dtype)
    if plan.per_run_kernel is not None and not return_saturated:
        plan.per_run_kernel(_values(first), _values(second), plan.parameters, plan.tie_rule, out.reshape(-1))
        return out
    saturated = plan.kernel(_flat(first, plan.shape), _flat(second, plan.shape), plan.parameters, plan.tie_rule,
                            out.reshape(-1), return_saturated)
    return (out, int(saturated)) if return_saturated else out


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
        name = f"inputs[{i}]"
        if not isinstance(x, np.ndarray):
            check_array(name, x, BYTE_DTYPES)
        key = (name, x.dtype, zp, m, n, out_zero_point, qmin, qmax, out_dtype, rounding)
        plan = (_cached_rescale_plan(*key) if _cacheable(rounding, out_dtype, (zp, m, n, out_zero_point, qmin, qmax))
                else _rescale_plan(*key))
        if plan.parameters is None:     # per-channel parameters along axis 0, or an error that requantize reports
            centred = (x.astype(np.int64) - plan.zero_point).astype(ACC_DTYPE)
            part = requantize(centred, multiplier=m, shift=n, out_zero_point=out_zero_point, qmin=qmin, qmax=qmax,
                              rounding=rounding, out_dtype=out_dtype, channel_axis=0)
        elif plan.copy:
            part = x
        else:
            part = np.empty(x.shape, plan.dtype)
            kernels("eltwise").rescale(_flat(x, x.shape), plan.parameters, plan.tie_rule, part.reshape(-1))
        parts.append(part)
    try:
        return np.concatenate(parts, axis=check_int("axis", axis))
    except (ValueError, np.exceptions.AxisError) as exc:
        raise ValueError(f"concat: inputs do not concatenate along axis {axis}: {exc}") from exc


class _Rescale(NamedTuple):
    """What concat makes of one input's arguments but its values: the rescale kernel's call."""

    zero_point: int
    parameters: np.ndarray | None   # of the rescale kernel; None for (M, N) that requantize is to take
    tie_rule: int = 0
    dtype: np.dtype | None = None
    copy: bool = False              # the rescale is the identity (the unified-scale trick): the input is the part


def _rescale_plan(name, dtype, zero_point, multiplier, shift, out_zero_point, qmin, qmax, out_dtype,
                  rounding) -> _Rescale:
    """concat's checks of one input, in requantize's order, and the parameters of its rescale."""
    zero_point = _zero_point(name, dtype, zero_point)
    if not (_is_int(multiplier, MULTIPLIER_MAX) and _is_int(shift, SHIFT_MAX)):   # not the unit's scalar (M_i, N_i)
        return _Rescale(zero_point, None)
    check_rounding(rounding)
    out, low, high, out_zero_point = _output_checks(out_zero_point, qmin, qmax, out_dtype)
    tie_rule = _tie_rule(rounding, 1)
    (term,), folded_zero_point = _folded_terms(tie_rule, [_single_term(zero_point, multiplier, shift, rounding)],
                                               out_zero_point)
    parameters = _int32(*term, folded_zero_point, low, high)
    copy = (multiplier == 1 << shift and zero_point == out_zero_point and out == dtype
            and (low, high) == dtype_range(out))
    return _Rescale(zero_point, parameters, tie_rule, out, copy)


_cached_rescale_plan = functools.lru_cache(maxsize=1024)(_rescale_plan)


def _is_int(value, hi: int) -> bool:
    """An integer scalar in [0, hi] (not a bool, which requantize rejects)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value <= hi
