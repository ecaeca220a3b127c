"""The layer file of `aipu run-layer --layer`: an .npz (numpy.savez) turned into a checked ConvLayer.

The file is hostile until validated: :func:`aipu.compiler.npz_file.read_npz` checks every member's .npy
header (name, dtype, shape) before its data is read, so no member can allocate more than the layer bounds
allow, and the layer is then checked as a whole (:func:`aipu.compiler.lowering.conv_layer.check_layer`).
Every problem is an :class:`~aipu.sim.machine.errors.InputError` naming the file, the array, its value and
what is allowed.
"""
from __future__ import annotations

import math

import numpy as np

from aipu.compiler.lowering.conv_layer import (MAX_LAYER_ELEMENTS, TENSOR_DTYPES, ConvLayer, check_layer, dtype_names,
                                               enum_names)
from aipu.compiler.npz_file import read_npz
from aipu.sim.machine.arch import DType
from aipu.sim.machine.errors import ArrayHeader, InputError
from aipu.sim.machine.isa import Rounding

LAYER_ARRAYS = ("x", "w", "bias", "multiplier", "shift")             # required integer arrays
LAYER_SCALARS = ("x_zero_point", "w_zero_point", "out_zero_point", "groups")
LAYER_TUPLES = ("stride", "padding", "dilation")
LAYER_ENUMS = {"out_type": DType, "rounding": Rounding, "w_type": DType}  # given by name, e.g. "half_up"
_KNOWN = (*LAYER_ARRAYS, *LAYER_SCALARS, *LAYER_TUPLES, *LAYER_ENUMS)
_MAX_ITEM_BYTES = 64      # the widest integer is 8 bytes, the longest name 19 characters of 4 bytes


def read_layer(path) -> ConvLayer:
    """The layer stored in the .npz ``path``: arrays x, w, bias, multiplier, shift; optional integer
    scalars (zero points, groups), integer vectors (stride, padding, dilation) and names (out_type,
    rounding)."""
    try:
        arrays = _read_members(path)
        layer = ConvLayer(**{name: arrays[name] for name in LAYER_ARRAYS},
                          **{name: int(arrays[name]) for name in LAYER_SCALARS if name in arrays},
                          **{name: tuple(int(v) for v in arrays[name]) for name in LAYER_TUPLES if name in arrays},
                          **{name: _member_by_name(name, arrays[name]) for name in LAYER_ENUMS if name in arrays})
        check_layer(layer)
    except InputError as exc:
        raise exc.within(path) from None
    return layer


def _read_members(path) -> dict[str, np.ndarray]:
    arrays = read_npz(path, _check_header)
    for name in LAYER_ARRAYS:
        if name not in arrays:
            raise InputError(name, "missing", f"a layer file needs {', '.join(LAYER_ARRAYS)}")
    return arrays


def _check_header(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    """The kind and rank each name needs, and the size bound, from the header alone."""
    if name not in _KNOWN:
        raise InputError("array", name, f"unknown; a layer file holds {', '.join(_KNOWN)}")
    kinds, ndim, what = (("US", 0, "a name: " + enum_names(LAYER_ENUMS[name])) if name in LAYER_ENUMS else
                         ("iu", 0, "an integer scalar (any integer dtype, shape [])") if name in LAYER_SCALARS else
                         ("iu", 1, "a vector of integers (any integer dtype)") if name in LAYER_TUPLES else
                         ("iu", len(shape), "an integer dtype (int8 .. int64, uint8 .. uint64)"))
    described = ArrayHeader(dtype, shape)
    if name in TENSOR_DTYPES and dtype not in TENSOR_DTYPES[name]:
        raise InputError(name, described, f"expected dtype {dtype_names(TENSOR_DTYPES[name])}")
    if dtype.kind not in kinds or len(shape) != ndim or dtype.itemsize > _MAX_ITEM_BYTES:
        raise InputError(name, described, f"expected {what}")
    if min(shape, default=0) < 0 or math.prod(shape) > MAX_LAYER_ELEMENTS:
        raise InputError(name, described, f"at most {MAX_LAYER_ELEMENTS} elements")


def _member_by_name(name: str, value: np.ndarray):
    text = value.item()
    text = text.decode(errors="replace") if isinstance(text, bytes) else text
    enum = LAYER_ENUMS[name]
    if text.upper() not in enum.__members__:
        raise InputError(name, text, f"expected one of {enum_names(enum)}")
    return enum[text.upper()]
