"""Input validation shared by the golden units: every bad parameter raises naming the field and value."""
from __future__ import annotations

import functools
import numbers

import numpy as np

from aipu.sim.machine.arch import ACC_BITS, DTYPE_NUMPY, bit_range
from aipu.sim.golden.fast import kernels

#: Activation / weight storage types the NPU reads and writes (arch.DType).
QUANT_DTYPES = tuple(DTYPE_NUMPY.values())
#: The one-byte types: MAC, eltwise and lut8 inputs (their value - zero point is a MAC_OPERAND_BITS operand).
BYTE_DTYPES = tuple(dtype for dtype in QUANT_DTYPES if dtype.itemsize == 1)


@functools.lru_cache(maxsize=None)
def _integer_range(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def dtype_range(dtype) -> tuple[int, int]:
    return _integer_range(np.dtype(dtype))


@functools.lru_cache(maxsize=None)
def _dtypes(dtypes: tuple) -> tuple[np.dtype, ...]:
    return tuple(np.dtype(d) for d in dtypes)


def check_array(name: str, value, dtypes) -> np.ndarray:
    """Return ``value`` as an ndarray; raise TypeError unless its dtype is one of ``dtypes``."""
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(value).__name__}")
    allowed = _dtypes(tuple(dtypes))
    if value.dtype not in allowed:
        names = ", ".join(d.name for d in allowed)
        raise TypeError(f"{name} must have dtype in ({names}), got {value.dtype.name}")
    return value


def check_out_dtype(name: str, dtype, allowed=QUANT_DTYPES) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{name} must be a numpy integer dtype, got {dtype!r}") from exc
    if dt not in _dtypes(tuple(allowed)):
        raise TypeError(f"{name} must be one of {[np.dtype(d).name for d in allowed]}, got {dt.name}")
    return dt


def check_int(name: str, value, lo: int | None = None, hi: int | None = None) -> int:
    """A Python/numpy integer scalar within [lo, hi]."""
    if type(value) is int:      # the common case, without the slow abstract-class checks below
        pass
    elif isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        if isinstance(value, np.ndarray) and value.ndim == 0 and np.issubdtype(value.dtype, np.integer):
            value = value.item()
        else:
            raise TypeError(f"{name} must be an integer, got {value!r}")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name}={value} is outside [{lo}, {hi}]")
    return value


_INT_TYPE = {int}


def check_int_tuple(name: str, value, length: int, lo: int) -> tuple[int, ...]:
    if type(value) is tuple and len(value) == length and set(map(type, value)) == _INT_TYPE and min(value) >= lo:
        return value    # the common case (a tuple of Python ints), in a third of the time of the checks below
    if isinstance(value, (int, np.integer)):
        value = (value,) * length
    value = tuple(value)
    if len(value) != length:
        raise ValueError(f"{name} must have {length} entries, got {value!r}")
    return tuple(check_int(f"{name}[{i}]", v, lo) for i, v in enumerate(value))


def check_int_param(name: str, value, lo: int, hi: int, channels: int | None) -> np.ndarray:
    """A scalar or a per-channel 1-D integer parameter within [lo, hi], returned as int64.

    ``channels`` is the required length of a 1-D parameter (None: scalar only).
    """
    if type(value) is int:      # the common case, checked without numpy's reductions
        if not lo <= value <= hi:
            raise ValueError(f"{name}={value} is outside [{lo}, {hi}]")
        return np.asarray(value, np.int64)
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":      # not bool, float, object, ...
        raise TypeError(f"{name} must be an integer or an integer array, got dtype {arr.dtype.name}")
    if arr.ndim > 1 or (arr.ndim == 1 and channels is None):
        raise ValueError(f"{name} must be a scalar{'' if channels is None else ' or 1-D'}, got shape {arr.shape}")
    if arr.ndim == 1 and arr.shape[0] != channels:
        raise ValueError(f"{name} has {arr.shape[0]} entries, expected {channels} (one per channel)")
    type_lo, type_hi = _integer_range(arr.dtype)
    arr = arr.astype(np.int64, copy=False)      # read only by the callers: an int64 array is not copied
    if arr.size and (type_lo < lo or type_hi > hi):     # no pass if the type fits
        bad = first_outside(arr.ravel(), lo, hi)
        if bad >= 0:
            raise ValueError(f"{name}={int(arr.flat[bad])} is outside [{lo}, {hi}]")
    return arr


def first_outside(values: np.ndarray, lo, hi) -> int:
    """The flat index of the first of ``values`` (1-D) not within [lo, hi] (NaN is not), or -1."""
    return int(kernels("checks").first_outside(values, lo, hi))


_PLAIN_TYPES = frozenset({int, type(None)})


def plain_scalars(values) -> bool:
    """Whether every value is an int (not a bool or a numpy scalar), None, or a tuple of those: arguments
    whose equal values are equally valid, so that checks remembered for one hold for the other (True == 1.0
    == 1, but only 1 passes them). A loop: a set of the types took a tenth of a 14x14x256 add."""
    for value in values:
        for v in (value if type(value) is tuple else (value,)):
            if type(v) not in _PLAIN_TYPES:
                return False
    return True


def per_channel(param: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """Reshape a scalar or 1-D parameter so it broadcasts along ``axis`` of an ``ndim`` array."""
    if param.ndim == 0:
        return param
    shape = [1] * ndim
    shape[axis] = param.shape[0]
    return param.reshape(shape)


def check_axis(name: str, axis, ndim: int) -> int:
    axis = check_int(name, axis, -ndim, ndim - 1) if ndim else check_int(name, axis)
    return axis % ndim if ndim else 0


def check_clamp(qmin, qmax, out_dtype, bounds: tuple[int, int] | None = None) -> tuple[int, int]:
    """qmin <= qmax, both within ``bounds`` (default: ``out_dtype``'s range)."""
    lo, hi = bounds or dtype_range(out_dtype)
    qmin = check_int("qmin", qmin, lo, hi)
    qmax = check_int("qmax", qmax, lo, hi)
    if qmin > qmax:
        raise ValueError(f"qmin={qmin} is greater than qmax={qmax}")
    return qmin, qmax


def check_accumulator(op: str, low, high) -> None:
    """OverflowError naming the value farthest out where the smallest or largest sum (``low``, ``high``) leaves
    the ACC_BITS accumulator (docs/arithmetic.md §3.3)."""
    acc_min, acc_max = bit_range(ACC_BITS, signed=True)
    if low < acc_min or high > acc_max:
        worst = int(low if -low > high else high)
        raise OverflowError(f"{op}: accumulator value {worst} does not fit in int{ACC_BITS} [{acc_min}, {acc_max}]")
