"""The elementwise unit (add, sub, max, min, mul) and concat with per-input rescale.

docs/arithmetic.md §8. Inputs are int8/uint8 with numpy broadcasting. Each operand enters as
d = value - zero_point (signed 9 bit).
* add/sub/max/min: each input has its own (M_i, N_i) approximating s_i / s_out. With N = max(N_a, N_b)
  both terms are aligned exactly, t_i = d_i * M_i * 2**(N - N_i), combined (t_a + t_b, t_a - t_b,
  max, min) in ELTWISE_SUM_BITS, then rounded once: round(. / 2**N) + zp_out, clamped.
  This is the Zhouyi whitepaper's §4.24 (M' = M_2 M_3 2**(N1-N2), M'' = M_1 M_3, N' = N_1 + N_3) with the
  compiler multiplying the factors out offline, and only one rounding.
* mul: round(d_a * d_b * M / 2**N) + zp_out with M / 2**N ~ s_a s_b / s_out (Zhouyi whitepaper §3.3.2.1).
The module opens with the definitions in int64 numpy; :func:`eltwise` and :func:`concat` check their arguments
and run the kernels of aipu.sim.golden.fast.eltwise (32-bit lanes; per-channel concat parameters take
:func:`requantize`), which tests/sim/golden/test_eltwise_kernels.py checks against the definitions.
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
from aipu.sim.golden.rounding import check_rounding, round_half_away, rounding_shift_right

ELTWISE_OPS = ("add", "sub", "max", "min", "mul")
#: largest exact alignment 2**(N - N_i) such that MAC_OPERAND_MAX * MULTIPLIER_MAX * 2**align + the other
#: term fits ELTWISE_SUM_BITS
MAX_ALIGN = ELTWISE_SUM_BITS - 2 - (MAC_OPERAND_MAX * MULTIPLIER_MAX).bit_length()
_COMBINE = {"add": np.add, "sub": np.subtract, "max": np.maximum, "min": np.minimum}


# The definition (docs/arithmetic.md §8): u, the value before the output stage (requant.output_stage adds the
# output zero point and clamps).

def eltwise_value(a: np.ndarray, b: np.ndarray, op: str, multiplier, shift, a_zero_point: int, b_zero_point: int,
                  rounding: str) -> np.ndarray:
    """u of a and b broadcast, int64: add/sub/max/min (multiplier (M_a, M_b), shift (N_a, N_b), §8.1) combine
    the exactly aligned terms t_i = d_i * M_i * 2**(N - N_i), N = max(N_a, N_b), and round once; mul (M, N,
    §8.2) rounds d_a * d_b * M. d = value - zero point."""
    d_a, d_b = a.astype(np.int64) - a_zero_point, b.astype(np.int64) - b_zero_point
    if op == "mul":
        return rounding_shift_right(d_a * d_b * multiplier, shift, rounding)
    (m_a, m_b), (n_a, n_b) = multiplier, shift
    n = max(n_a, n_b)
    t_a, t_b = d_a * (m_a << (n - n_a)), d_b * (m_b << (n - n_b))
    return rounding_shift_right(_COMBINE[op](t_a, t_b), n, rounding)


def rescale_value(x: np.ndarray, zero_point: int, multiplier, shift, rounding: str) -> np.ndarray:
    """Concat's requant of one input before the output stage (§8.3): round((x - zp_i) * M_i / 2**N_i), int64."""
    return rounding_shift_right((x.astype(np.int64) - zero_point) * multiplier, shift, rounding)


# The public functions: checks, then the kernels.

def _zero_point(name: str, dtype: np.dtype, zero_point) -> int:
    """The checks of an operand's type (on an empty array of it, for check_array's words) and zero point."""
    check_array(name, np.empty(0, dtype), BYTE_DTYPES)
    return check_int(f"{name}_zero_point", zero_point, *dtype_range(dtype))


def _pair(name: str, value, lo: int, hi: int) -> tuple[int, int]:
    if np.ndim(value) != 1 or len(value) != 2:
        raise ValueError(f"{name} must be a pair (a, b) for add/sub/max/min, got {value!r}")
    return check_int(f"{name}[0]", value[0], lo, hi), check_int(f"{name}[1]", value[1], lo, hi)


class _Plan(NamedTuple):
    """What eltwise makes of all its arguments but the operands' values: a kernel call."""

    kernel: Callable            # add, add_one_sum, mul or max_min of sim/golden/fast/eltwise.py
    parameters: np.ndarray      # its int32 parameters
    tie_rule: int
    lifted: str | None          # "a" or "b": the int8 operand of an int8/uint8 pair, which goes in as uint8 + 128
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
    (a_dtype, za), (b_dtype, zb), lifted = _one_type((a_dtype, za), (b_dtype, zb))
    swap, per_run_kernel = False, None
    if op == "mul":
        shortest = module.PER_RUN_BLOCK     # mul_per_run's shortest run
        swap = b_shape == shape and _repeat(a_shape, shape) >= shortest
        if swap or (a_shape == shape and _repeat(b_shape, shape) >= shortest):
            per_run_kernel = module.mul_per_run
        if swap:
            za, zb = zb, za
        kernel, parameters, tie_rule = module.mul_parameters(m, n, za, zb, zp, qmin, qmax, rounding)
    elif op in ("max", "min"):
        kernel, parameters, tie_rule = module.max_min_parameters(op == "max", (za, ma, na), (zb, mb, nb), zp, qmin,
                                                                 qmax, rounding)
    else:
        kernel, parameters, tie_rule, swap = module.add_parameters(
            1 if op == "add" else -1, (za, ma, na, dtype_range(a_dtype)), (zb, mb, nb, dtype_range(b_dtype)), zp,
            qmin, qmax, rounding)
    return _Plan(kernel, parameters, tie_rule, lifted, swap, per_run_kernel, shape, dtype)


def _one_type(a: tuple[np.dtype, int], b: tuple[np.dtype, int]):
    """((type, zero point) of a, of b, which was lifted) as the kernels take them: both operands of one type, so
    that numba compiles a kernel for each of two operand types, not four pairs. Of an int8/uint8 pair, the int8
    operand x goes in as the uint8 x + 128 (:func:`_lifted`) with its zero point raised by 128: x - z is
    unchanged. Only such a pair pays for the extra pass over one operand."""
    if a[0] == b[0]:
        return a, b, None
    lifted = "a" if a[0] == np.int8 else "b"
    raised = (np.dtype(np.uint8), (a if lifted == "a" else b)[1] - int(np.iinfo(np.int8).min))
    return (raised, b, lifted) if lifted == "a" else (a, raised, lifted)


def _lifted(x: np.ndarray) -> np.ndarray:
    """int8 values x as the uint8 values x + 128: the sign bit flipped."""
    return x.view(np.uint8) ^ np.uint8(0x80)


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
    """x flat, broadcast to ``shape`` (:func:`_values`). A broadcast along trailing axes only repeats each value,
    which np.repeat does faster than numpy's general broadcast copy."""
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
    if plan.lifted is not None:
        a, b = (_lifted(a), b) if plan.lifted == "a" else (a, _lifted(b))
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

    M_i = 1, N_i = 0 and zp_i = zp_out is an exact copy (the unified-scale trick of Zhouyi whitepaper §4.12).
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
    parameters, tie_rule = kernels("eltwise").rescale_parameters(zero_point, multiplier, shift, out_zero_point, low,
                                                                 high, rounding)
    copy = (multiplier == 1 << shift and zero_point == out_zero_point and out == dtype
            and (low, high) == dtype_range(out))
    return _Rescale(zero_point, parameters, tie_rule, out, copy)


_cached_rescale_plan = functools.lru_cache(maxsize=1024)(_rescale_plan)


def _is_int(value, hi: int) -> bool:
    """An integer scalar in [0, hi] (not a bool, which requantize rejects)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value <= hi
