"""The requantizer (output stage) and the offline helpers that produce its parameters.

docs/arithmetic.md §4. Three modes share the front end (bias add at REQUANT_SUM_BITS, per-channel
parameters along ``channel_axis``) and the back end (+ output zero point, clamp to [qmin, qmax],
which also implements fused ReLU/ReLU6/Clip):

* :func:`requantize` -- the NPU's native integer mode: (acc + bias) * M >> N with a selectable
  rounding, plus an optional second (M, N) pair for negative sums (Leaky ReLU / PReLU).
* :func:`requantize_float32` -- the ONNX-compatible mode: an IEEE float32 scale, as onnxruntime.
* :func:`requantize_tflite` -- TFLite's SaturatingRoundingDoublingHighMul + RoundingDivideByPOT.

A REQUANT command (:func:`requantize_records`) may also take two accumulator planes a channel (dual, §4.7:
T/AI 115.1-2021 §7.2.3.3's dual INT4 weights) and write INT4 outputs, two a byte (§4.8).

The module opens with each mode's definition, int64 numpy step for step as docs/arithmetic.md writes it.
The public functions check their arguments, then run the native and float32 modes through the fused kernels
of aipu.sim.golden.fast.requant (tests/sim/golden/test_requant_kernels.py checks them against the
definitions); the TFLite mode and the dual planes run their definitions, and the float64 variant of the
float32 mode (onnx.reference's order, not the NPU's) is plain numpy in :func:`requantize_float32`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from aipu.sim.machine.arch import (ACC_DTYPE, BIAS_BITS, INT4_MAX, INT4_MIN, MULTIPLIER_BITS, MULTIPLIER_MAX,
                                   PARAM_DTYPE, SHIFT_MAX, TFLITE_MULTIPLIER_BITS, bit_range, pack_int4)
from aipu.sim.golden.fast import kernels
from aipu.sim.golden._checks import (check_array, check_axis, check_clamp, check_out_dtype,
                                     check_int_param, dtype_range, first_outside, per_channel)
from aipu.sim.golden.rounding import check_rounding, round_half_away, rounding_shift_right

_TFLITE_INT_BITS = TFLITE_MULTIPLIER_BITS + 1      # TFLite computes in int32: a Q0.31 multiplier and a sign
_TFLITE_INT_MIN, _TFLITE_INT_MAX = bit_range(_TFLITE_INT_BITS, signed=True)
_FLOAT_BOUND = 2.0 ** 40
_INT32_BIAS = bit_range(BIAS_BITS, signed=True) == dtype_range(np.dtype(np.int32))   # int32's type bounds a bias


# The definition (docs/arithmetic.md §4). ``total`` is t = acc + bias in int64; every parameter is a scalar or
# broadcasts against it (one entry per channel along its channel axis).

def native_requant(total: np.ndarray, multiplier, shift, rounding: str, negative_multiplier=None,
                   negative_shift=None) -> np.ndarray:
    """u = rounding_shift_right(t * M', N', mode), (M', N') = (M-, N-) where t < 0 and a negative pair is given,
    else (M, N) (§4.1, §4.2). |t * M'| < 2**48: exact in int64."""
    if negative_multiplier is not None:
        multiplier = np.where(total < 0, negative_multiplier, multiplier)
        shift = np.where(total < 0, negative_shift, shift)
    return rounding_shift_right(total * multiplier, shift, rounding)


def dual_requant(total: np.ndarray, second: np.ndarray, multiplier, second_multiplier, shift,
                 rounding: str) -> np.ndarray:
    """u = rounding_shift_right(t * M + a2 * M2, N, mode) (§4.7): the first plane's sum t = a1 + bias and the
    second plane's accumulator a2, each times its plane's multiplier, one shared shift and one rounding.
    |t * M| < 2**48 and |a2 * M2| < 2**47: the sum fits REQUANT_DUAL_BITS (50), exact in int64."""
    return rounding_shift_right(total * multiplier + second.astype(np.int64) * second_multiplier, shift, rounding)


def float32_requant(total: np.ndarray, scale) -> np.ndarray:
    """round_half_to_even(fp32(fp32(t) * scale)) (§4.5): t rounded to float32 (RNE), times the float32 scale in
    float32 (RNE), rounded half to even to an integer. Bounded to +-2**40 first (beyond it every output type
    saturates), so that +-inf and the int64 conversion stay defined."""
    with np.errstate(over="ignore"):
        product = total.astype(np.float32) * np.asarray(scale, np.float32)
    return np.rint(np.clip(product.astype(np.float64), -_FLOAT_BOUND, _FLOAT_BOUND)).astype(np.int64)


def tflite_requant(total: np.ndarray, multiplier, shift) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier (§4.6) on t within int32, shift in [-31, 30]:
    SaturatingRoundingDoublingHighMul(t * 2**left, M) = round_half_up(t * 2**left * M / 2**31), then
    RoundingDivideByPOT(., right) = round_half_away_from_zero(. / 2**right); left = max(shift, 0),
    right = max(-shift, 0)."""
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    high = rounding_shift_right((total << left) * multiplier, TFLITE_MULTIPLIER_BITS, "half_up")
    return rounding_shift_right(high, right, "half_away_from_zero")


def output_stage(value: np.ndarray, zero_point, qmin: int, qmax: int, dtype) -> tuple[np.ndarray, int]:
    """v = u + zp_out, out = clamp(v, qmin, qmax) in the output type (§4.1), and how many values the clamp
    changed."""
    shifted = value + zero_point
    saturated = int(np.count_nonzero((shifted < qmin) | (shifted > qmax)))
    return np.clip(shifted, qmin, qmax).astype(dtype), saturated


# The public functions: checks, then the fused kernels (native, float32) or the definition (TFLite).

class _Channels:
    """Validates the accumulator and turns scalar / per-channel parameters into broadcastable int64."""

    def __init__(self, acc, channel_axis: int):
        self.acc = check_array("acc", acc, (ACC_DTYPE,))
        self.axis = check_axis("channel_axis", channel_axis, acc.ndim) if acc.ndim else 0
        self.count = acc.shape[self.axis] if acc.ndim else None

    def param(self, name: str, value, lo: int, hi: int) -> np.ndarray:
        arr = check_int_param(name, value, lo, hi, self.count)
        return per_channel(arr, self.acc.ndim, self.axis)

    def biased(self, bias) -> np.ndarray:
        """acc + bias, formed exactly in REQUANT_SUM_BITS (int64 here)."""
        total = self.acc.astype(np.int64)
        if bias is not None:
            total += self.param("bias", bias, *bit_range(BIAS_BITS, signed=True))
        return total

    def bias32(self, bias) -> np.ndarray:
        """The checked bias (None: 0) as int32, one entry per channel: an int32 array of one entry per channel
        as it is (its type bounds it), with no copies to int64 and back."""
        if _INT32_BIAS and type(bias) is np.ndarray and bias.dtype == np.int32 and bias.shape == (self.count,):
            return np.ascontiguousarray(bias)
        return self.vector("bias", 0 if bias is None else bias, *bit_range(BIAS_BITS, signed=True)).astype(np.int32)

    def vector(self, name: str, value, lo: int, hi: int) -> np.ndarray:
        """A checked scalar or per-channel integer parameter as int64, one entry per channel."""
        return self.spread(check_int_param(name, value, lo, hi, self.count))

    def spread(self, value: np.ndarray) -> np.ndarray:
        """A scalar or per-channel parameter as one entry per channel (the kernels' layout)."""
        count = self.count or 1
        if value.ndim == 1:      # checked to hold one entry per channel
            return np.ascontiguousarray(value)
        return np.full(count, value, value.dtype)

    def blocks(self) -> np.ndarray:
        """The accumulator as [outer, channels, inner], the channel axis in the middle."""
        acc = np.ascontiguousarray(self.acc)
        if not acc.ndim:
            return acc.reshape(1, 1, 1)
        shape = acc.shape
        return acc.reshape(math.prod(shape[:self.axis]), shape[self.axis], math.prod(shape[self.axis + 1:]))


def _output_checks(out_zero_point, qmin, qmax, out_dtype, int4: bool = False) -> tuple[np.dtype, int, int, int]:
    """The output type, the clamp bounds (default: the type's range) and the zero point, checked: remembered for
    arguments that hash (a command repeats them for every tile), checked afresh for the others (an array zero
    point). ``int4``: the values of INT4 outputs, int8 within INT4's range."""
    try:
        return _hashable_output_checks(out_zero_point, qmin, qmax, out_dtype, int4)
    except TypeError:       # unhashable, or a bad type: checking again raises the right error
        return _check_output(out_zero_point, qmin, qmax, out_dtype, int4)


def _check_output(out_zero_point, qmin, qmax, out_dtype, int4: bool = False) -> tuple[np.dtype, int, int, int]:
    dtype = check_out_dtype("out_dtype", out_dtype)
    if int4 and dtype != np.int8:
        raise TypeError(f"INT4 outputs are computed as int8 values, not {dtype.name}")
    lo, hi = (INT4_MIN, INT4_MAX) if int4 else dtype_range(dtype)
    qmin, qmax = check_clamp(lo if qmin is None else qmin, hi if qmax is None else qmax, dtype, (lo, hi))
    zp = int(check_int_param("out_zero_point", out_zero_point, lo, hi, None))
    return dtype, qmin, qmax, zp


_hashable_output_checks = functools.lru_cache(maxsize=256, typed=True)(_check_output)


def _run_kernel(kernel, channels: _Channels, parameters: tuple, out_zero_point, qmin, qmax, out_dtype,
                return_saturated: bool):
    """One of sim/golden/fast/requant.py over the accumulator, with the output stage's checks."""
    dtype, qmin, qmax, zp = _output_checks(out_zero_point, qmin, qmax, out_dtype)
    blocks = channels.blocks()
    out = np.empty(blocks.shape, dtype)
    # Python ints (numba types them faster); the clamped values are counted only if asked (counting costs time)
    saturated = int(kernel(blocks, *parameters, return_saturated, zp, qmin, qmax, out))
    out = out.reshape(channels.acc.shape)
    return (out, saturated) if return_saturated else out


def _float32_kernels(blocks, bias, scale, count, zero_point, qmin, qmax, out) -> int:
    """The float32 requant kernel in 32-bit lanes, or the float64 one where some acc + bias leaves int32."""
    module = kernels("requant")
    saturated = module.float32_requant(blocks, bias, scale, count, zero_point, qmin, qmax, out)
    return saturated if saturated >= 0 else module.float32_requant_wide(blocks, bias, scale, zero_point, qmin, qmax,
                                                                         out)


def _output_stage(value: np.ndarray, out_zero_point, qmin, qmax, out_dtype, return_saturated: bool):
    """:func:`output_stage` after its checks (qmin and qmax default to the output type's range)."""
    dtype, qmin, qmax, zp = _output_checks(out_zero_point, qmin, qmax, out_dtype)
    out, saturated = output_stage(value, zp, qmin, qmax, dtype)
    return (out, saturated) if return_saturated else out


def requantize(acc: np.ndarray, *, bias=None, multiplier, shift, out_zero_point=0, qmin=None, qmax=None,
               rounding: str = "half_up", channel_axis: int = 1, out_dtype=np.int8,
               negative_multiplier=None, negative_shift=None, return_saturated: bool = False):
    """Native requant: clamp(round((acc + bias) * M / 2**N) + zp, qmin, qmax).

    acc int32; bias, multiplier (0 .. 2**MULTIPLIER_BITS-1), shift (0 .. SHIFT_MAX) scalar or one per
    channel of ``channel_axis``. If ``negative_multiplier``/``negative_shift`` are given, sums < 0 use
    them instead (Leaky ReLU / PReLU with a single rounding). ``return_saturated`` -> (out, count).
    """
    channels = _Channels(acc, channel_axis)
    check_rounding(rounding)
    bias = channels.vector("bias", 0 if bias is None else bias, *bit_range(BIAS_BITS, signed=True))
    m = channels.vector("multiplier", multiplier, 0, MULTIPLIER_MAX)
    n = channels.vector("shift", shift, 0, SHIFT_MAX)
    if (negative_multiplier is None) != (negative_shift is None):
        raise ValueError("negative_multiplier and negative_shift must be given together "
                         f"(got {negative_multiplier!r} and {negative_shift!r})")
    leaky = negative_multiplier is not None
    if leaky:
        negative = (channels.vector("negative_multiplier", negative_multiplier, 0, MULTIPLIER_MAX),
                    channels.vector("negative_shift", negative_shift, 0, SHIFT_MAX))
    else:
        negative = (m, n)
    # |(acc + bias) * M| < 2**48 (REQUANT_PRODUCT_BITS): exact in the kernel's int64
    module = kernels("requant")
    return _run_kernel(module.native_requant, channels,
                       (bias, m, n, *negative, leaky, module.ROUNDING_CODES[rounding]),
                       out_zero_point, qmin, qmax, out_dtype, return_saturated)


def requantize_dual(acc: np.ndarray, second: np.ndarray, *, bias=None, multiplier, second_multiplier, shift,
                    out_zero_point=0, qmin=None, qmax=None, rounding: str = "half_up", channel_axis: int = 1,
                    out_dtype=np.int8) -> np.ndarray:
    """Dual planes (§4.7): clamp(rsr((acc + bias) * M + second * M2, N) + zp, qmin, qmax), ``second`` the second
    plane's accumulators (the shape of ``acc``); every parameter a scalar or one per channel of ``channel_axis``,
    as :func:`requantize` takes them. The layer-level form of a REQUANT command with ``dual`` = 1."""
    channels = _Channels(acc, channel_axis)
    check_array("second", second, (ACC_DTYPE,))
    if second.shape != acc.shape:
        raise ValueError(f"second: expected the shape of acc {acc.shape}, got {second.shape}")
    check_rounding(rounding)
    m = channels.param("multiplier", multiplier, 0, MULTIPLIER_MAX)
    m2 = channels.param("second_multiplier", second_multiplier, 0, MULTIPLIER_MAX)
    n = channels.param("shift", shift, 0, SHIFT_MAX)
    value = dual_requant(channels.biased(bias), second, m, m2, n, rounding)
    return _output_stage(value, out_zero_point, qmin, qmax, out_dtype, False)


@dataclass(frozen=True)
class RequantStage:
    """How a REQUANT command requantizes, checked once (:func:`requant_stage`) for any number of tiles."""

    float32_scale: bool
    leaky: bool
    rounding: int           # a code of fast.requant.ROUNDING_CODES
    out_dtype: np.dtype     # int8 for INT4 outputs (their values)
    out_zero_point: int
    qmin: int
    qmax: int
    dual: bool = False      # two accumulator planes a channel (§4.7)
    int4: bool = False      # INT4 outputs, two a byte (§4.8)


def requant_stage(*, float32_scale: bool, leaky: bool = False, rounding: str = "half_up", out_zero_point=0,
                  qmin=None, qmax=None, out_dtype=np.int8, dual: bool = False, int4: bool = False) -> RequantStage:
    """Check a requantizer's mode and output stage for :func:`requantize_records`: native mode
    (:func:`requantize`) uses the records' bias, multiplier and shift, and the negative pair when ``leaky``;
    ``float32_scale`` mode (:func:`requantize_float32`) their bias and scale; ``dual`` (native, not leaky) the
    negative multiplier as the second plane's (:func:`dual_requant`). ``int4``: INT4 outputs (``out_dtype``
    int8, the zero point and clamp within -8 .. 7), packed two a byte."""
    check_rounding(rounding)
    if float32_scale and leaky:
        raise ValueError("leaky = 1 is not supported with a float32 scale")
    if dual and (float32_scale or leaky):
        raise ValueError(f"dual = 1 is not supported with {'a float32 scale' if float32_scale else 'leaky = 1'} "
                         "(the record's negative multiplier is the second plane's)")
    dtype, qmin, qmax, zp = _output_checks(out_zero_point, qmin, qmax, out_dtype, bool(int4))
    return RequantStage(bool(float32_scale), bool(leaky), kernels("requant").ROUNDING_CODES[rounding],
                        dtype, zp, qmin, qmax, bool(dual), bool(int4))


def requantize_records(acc: np.ndarray, records: np.ndarray, stage: RequantStage) -> tuple[np.ndarray, int]:
    """The requantizer as the NPU runs a REQUANT command: ``acc`` int32 [pixels, channels] ([pixels, channels, 2]
    with ``stage.dual``), one parameter record (arch.PARAM_DTYPE) per channel. Only what the record's field types
    leave open is checked here, so that a tile costs little more than its kernel. Returns (out [pixels, channels],
    or its bytes [pixels, channels / 2] for ``stage.int4``, and the saturated count)."""
    planes = (2,) if stage.dual else ()
    if (acc.dtype != ACC_DTYPE or acc.shape[2:] != planes or acc.ndim != 2 + len(planes)
            or records.dtype != PARAM_DTYPE or records.shape != acc.shape[1:2]):
        raise ValueError(f"expected int32 acc [pixels, channels{', 2' * stage.dual}] and one {PARAM_DTYPE} record "
                         f"per channel, got {acc.dtype.name} {acc.shape} and {records.dtype} {records.shape}")
    if stage.int4 and records.shape[0] % 2:
        raise ValueError(f"INT4 outputs pack two a byte: channels = {records.shape[0]} must be even")
    out, saturated = (_dual_records if stage.dual else _single_records)(acc, records, stage)
    return (pack_int4(out) if stage.int4 else out), saturated


def _dual_records(acc: np.ndarray, records: np.ndarray, stage: RequantStage) -> tuple[np.ndarray, int]:
    """Dual planes through their definition (plain int64 numpy: one pass over the tile); the records' negative
    shift must be 0 (the planes share the shift; §4.7)."""
    bias = _record_field(records, "bias", *bit_range(BIAS_BITS, signed=True))
    m = _record_field(records, "multiplier", 0, MULTIPLIER_MAX)
    n = _record_field(records, "shift", 0, SHIFT_MAX)
    m2 = _record_field(records, "negative_multiplier", 0, MULTIPLIER_MAX)
    _record_field(records, "negative_shift", 0, 0)
    rounding = next(name for name, code in kernels("requant").ROUNDING_CODES.items() if code == stage.rounding)
    value = dual_requant(acc[..., 0] + bias, acc[..., 1], m, m2, n, rounding)
    return output_stage(value, stage.out_zero_point, stage.qmin, stage.qmax, stage.out_dtype)


def _single_records(acc: np.ndarray, records: np.ndarray, stage: RequantStage) -> tuple[np.ndarray, int]:
    """One accumulator a channel through the fused kernels."""
    blocks = np.ascontiguousarray(acc.T)[None]         # [1, channels, pixels]: the kernels' inner loop runs long
    out = np.empty(blocks.shape, stage.out_dtype)
    bias = _record_field(records, "bias", *bit_range(BIAS_BITS, signed=True))
    clamp = (np.int64(stage.out_zero_point), np.int64(stage.qmin), np.int64(stage.qmax), out)
    if stage.float32_scale:
        scale = np.ascontiguousarray(records["scale"])
        _require_positive_finite(scale)
        saturated = _float32_kernels(blocks, bias.astype(np.int32), scale, True, *clamp)
    else:
        m = _record_field(records, "multiplier", 0, MULTIPLIER_MAX)
        n = _record_field(records, "shift", 0, SHIFT_MAX)
        negative = ((_record_field(records, "negative_multiplier", 0, MULTIPLIER_MAX),
                     _record_field(records, "negative_shift", 0, SHIFT_MAX)) if stage.leaky else (m, n))
        saturated = kernels("requant").native_requant(blocks, bias, m, n, *negative, stage.leaky,
                                                               stage.rounding, True, *clamp)
    return out[0].T, int(saturated)


def _record_field(records: np.ndarray, name: str, lo: int, hi: int) -> np.ndarray:
    """One integer field of the parameter records as int64, checked against [lo, hi] where its type could
    leave it."""
    values = records[name].astype(np.int64)
    type_lo, type_hi = dtype_range(records.dtype[name])
    if values.size and ((type_lo < lo and values.min() < lo) or (type_hi > hi and values.max() > hi)):
        raise ValueError(f"{name}={int(values[(values < lo) | (values > hi)][0])} is outside [{lo}, {hi}]")
    return values


def onnx_requant_scale(x_scale, w_scale, y_scale) -> np.ndarray:
    """float32(float32(x_scale * w_scale) / y_scale), evaluated as onnxruntime's QLinearConv does."""
    x, w, y = (np.asarray(v, dtype=np.float32) for v in (x_scale, w_scale, y_scale))
    return (x * w) / y


def requantize_float32(acc: np.ndarray, *, bias=None, scale, out_zero_point=0, qmin=None, qmax=None,
                       channel_axis: int = 1, out_dtype=np.int8, product: str = "float32",
                       return_saturated: bool = False):
    """ONNX-compatible requant with a float32 scale (scalar or per channel).

    product="float32" (the hardware mode; onnxruntime/MLAS): f = fp32(acc + bias) (RNE),
    g = fp32(f * scale) (RNE), y = round_half_even(g) + zp, clamped.
    product="float64" reproduces onnx.reference: g = float64(acc + bias) * float64(scale) + zp,
    then round half to even (the zero point is added *before* rounding there).
    """
    channels = _Channels(acc, channel_axis)
    if product not in ("float32", "float64"):
        raise ValueError(f"product={product!r} must be 'float32' or 'float64'")
    scale = np.asarray(scale)
    if scale.dtype != np.float32:
        raise TypeError(f"scale must be float32 (the register format), got {scale.dtype.name}")
    if scale.ndim > 1 or (scale.ndim == 1 and scale.shape[0] != channels.count):
        raise ValueError(f"scale must be a scalar or have one entry per channel ({channels.count}), "
                         f"got shape {scale.shape}")
    _require_positive_finite(scale)
    if product == "float32":      # the hardware mode: one fused pass (an overflow to +-inf saturates)
        return _run_kernel(_float32_kernels, channels, (channels.bias32(bias), channels.spread(scale)),
                           out_zero_point, qmin, qmax, out_dtype, return_saturated)
    total = channels.biased(bias)
    dtype = check_out_dtype("out_dtype", out_dtype)
    zp = check_int_param("out_zero_point", out_zero_point, *dtype_range(dtype), None)
    scaled = total.astype(np.float64)       # in place: tensor-sized temporaries cost more than the arithmetic
    scaled *= per_channel(scale, acc.ndim, channels.axis).astype(np.float64)
    scaled += zp
    # Beyond +-2**40 every output saturates; bounding first keeps the int64 conversion defined.
    np.clip(scaled, -_FLOAT_BOUND, _FLOAT_BOUND, out=scaled)
    rounded = np.rint(scaled, out=scaled).astype(np.int64) - zp
    return _output_stage(rounded, zp, qmin, qmax, dtype, return_saturated)


def requantize_tflite(acc: np.ndarray, *, bias=None, multiplier, shift, out_zero_point=0, qmin=None,
                      qmax=None, channel_axis: int = 1, out_dtype=np.int8, return_saturated: bool = False):
    """TFLite's MultiplyByQuantizedMultiplier (double rounding: :func:`tflite_requant`), then + zp and clamp.

    x = acc + bias and x * 2**max(shift, 0) must fit int32 (TFLite computes in int32; OverflowError otherwise);
    multiplier in [0, 2**31 - 1] (Q0.31: the saturating case of SaturatingRoundingDoublingHighMul needs
    M = -2**31, excluded here), shift in [-31, 30].
    """
    channels = _Channels(acc, channel_axis)
    total = channels.biased(bias)
    m = channels.param("multiplier", multiplier, *bit_range(TFLITE_MULTIPLIER_BITS, signed=False))
    s = channels.param("shift", shift, -TFLITE_MULTIPLIER_BITS, TFLITE_MULTIPLIER_BITS - 1)
    _require_int32("requantize_tflite: acc + bias", total)
    _require_int32("requantize_tflite: (acc + bias) << shift", total << np.maximum(s, 0))
    return _output_stage(tflite_requant(total, m, s), out_zero_point, qmin, qmax, out_dtype, return_saturated)


def _require_int32(what: str, values: np.ndarray) -> None:
    if values.size and (values.min() < _TFLITE_INT_MIN or values.max() > _TFLITE_INT_MAX):
        worst = int(values.min() if -values.min() > values.max() else values.max())
        raise OverflowError(f"{what} = {worst} does not fit in int{_TFLITE_INT_BITS}")


def _require_positive_finite(scale: np.ndarray, name: str = "scale") -> None:
    """Every scale (float32 or float64) > 0 and finite: within [its type's smallest subnormal, its largest]."""
    bad = first_outside(scale.ravel(), *_positive_finite_range(scale.dtype))
    if bad >= 0:
        raise ValueError(f"{name}={float(scale.flat[bad])!r} must be finite and positive")


@functools.lru_cache(maxsize=None)
def _positive_finite_range(dtype: np.dtype) -> tuple[float, float]:
    info = np.finfo(dtype)
    return float(info.smallest_subnormal), float(info.max)


def _check_scales(scale, name: str = "scale") -> np.ndarray:
    arr = np.asarray(scale, dtype=np.float64)
    if arr.ndim > 1:
        raise ValueError(f"{name} must be a scalar or 1-D, got shape {arr.shape}")
    _require_positive_finite(arr, name)
    return arr


def quantize_multiplier(scale, *, shared_shift: bool = False):
    """(M, N) with M / 2**N ~ scale, M <= 2**MULTIPLIER_BITS - 1, 0 <= N <= SHIFT_MAX.

    N is the largest shift for which M = round_half_away(scale * 2**N) still fits, so for
    2**(-SHIFT_MAX + MULTIPLIER_BITS - 1) <= scale the relative error |M/2**N - scale| / scale is
    at most 1 / (2**MULTIPLIER_BITS - 1) (docs/arithmetic.md §4.4). ``shared_shift`` gives every
    channel the smallest per-channel N (one shift per layer). Scalars in, ints out; 1-D in, arrays out.
    Raises ValueError if scale >= 2**MULTIPLIER_BITS - 0.5 (it needs a left shift).
    """
    scales = _check_scales(scale)
    _, exponent = np.frexp(scales)                    # scale = f * 2**exponent, f in [0.5, 1)
    n = MULTIPLIER_BITS - exponent.astype(np.int64)   # puts scale * 2**n in [2**15, 2**16)
    m = round_half_away(np.ldexp(scales, n))
    n = np.where(m > MULTIPLIER_MAX, n - 1, n)        # rounding reached 2**16: one bit less
    if np.any(n < 0):
        raise ValueError(f"scale={float(scales[n < 0].flat[0]) if scales.ndim else float(scales)!r} is too "
                         f"large for a {MULTIPLIER_BITS}-bit multiplier with a right shift")
    n = np.minimum(n, SHIFT_MAX)
    if shared_shift and n.ndim:
        n = np.full_like(n, n.min())
    m = round_half_away(np.ldexp(scales, n))
    if scales.ndim == 0:
        return int(m), int(n)
    return m, n


def leaky_relu_multipliers(scale, slope) -> dict:
    """Requantizer parameters for a fused Leaky ReLU / PReLU (docs/arithmetic.md §4.2, D11).

    Positive side M/2**N ~ scale; negative side M-/2**N- ~ scale * slope, so the slope is folded in
    offline and the negative side is rounded once. ``slope`` is a positive float or one per channel.
    """
    slopes = _check_scales(slope, "slope")
    m, n = quantize_multiplier(scale)
    m_neg, n_neg = quantize_multiplier(_check_scales(scale) * slopes)
    return {"multiplier": m, "shift": n, "negative_multiplier": m_neg, "negative_shift": n_neg}


def quantize_multiplier_tflite(scale):
    """TFLite's QuantizeMultiplier: (M in [2**30, 2**31), shift) with scale ~ M * 2**(shift - 31)."""
    scales = _check_scales(scale)
    fraction, exponent = np.frexp(scales)
    m = round_half_away(np.ldexp(fraction, TFLITE_MULTIPLIER_BITS))
    carry = m == 2 ** TFLITE_MULTIPLIER_BITS          # fraction rounded up to 1.0
    m = np.where(carry, m // 2, m)
    shift = exponent.astype(np.int64) + carry
    underflow = shift < -31
    m, shift = np.where(underflow, 0, m), np.where(underflow, 0, shift)
    if np.any(shift > 30):
        raise ValueError(f"scale={float(np.max(scales))!r} is too large for the TFLite requant (shift > 30)")
    if scales.ndim == 0:
        return int(m), int(shift)
    return m, shift
