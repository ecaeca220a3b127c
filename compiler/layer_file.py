"""The layer file of `aipu run-layer --layer`: an .npz (numpy.savez) turned into a checked ConvLayer.

The file is hostile until validated: the archive is opened without pickles, every member's .npy header
(dtype, shape) is checked before its data is read, so no member can allocate more than the layer bounds
allow, and the layer is then checked as a whole (:func:`aipu.compiler.tiling.check_layer`). Every problem is
an :class:`~aipu.sim.machine.errors.InputError` naming the file, the array, its value and what is allowed.
"""
from __future__ import annotations

import math
import zipfile
import zlib

import numpy as np

from aipu.compiler.tiling import MAX_LAYER_ELEMENTS, TENSOR_DTYPES, ConvLayer, check_layer, dtype_names, enum_names
from aipu.sim.machine.arch import DType
from aipu.sim.machine.errors import ArrayHeader, InputError
from aipu.sim.machine.isa import Rounding

LAYER_ARRAYS = ("x", "w", "bias", "multiplier", "shift")             # required integer arrays
LAYER_SCALARS = ("x_zero_point", "w_zero_point", "out_zero_point", "groups")
LAYER_TUPLES = ("stride", "padding", "dilation")
LAYER_ENUMS = {"out_type": DType, "rounding": Rounding}                 # given by name, e.g. "half_up"
_KNOWN = (*LAYER_ARRAYS, *LAYER_SCALARS, *LAYER_TUPLES, *LAYER_ENUMS)
_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
# What zipfile, zlib and numpy's .npy header parser raise on corrupt data (seeks to bad offsets: OSError).
_CORRUPT = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError)
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
    with open(path, "rb") as handle:
        try:
            archive = zipfile.ZipFile(handle)
        except _CORRUPT:
            handle.seek(0)
            npy = handle.read(6) == b"\x93NUMPY"
            raise InputError("format", "a single .npy array" if npy else "not a complete zip archive",
                             "expected an .npz of named arrays, as numpy.savez writes") from None
        with archive:
            members = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
            for name in members:
                if name not in _KNOWN:
                    raise InputError("array", name, f"unknown; a layer file holds {', '.join(_KNOWN)}")
            for name in LAYER_ARRAYS:
                if name not in members:
                    raise InputError(name, "missing", f"a layer file needs {', '.join(LAYER_ARRAYS)}")
            return {name: _read_member(archive, name, info) for name, info in members.items()}


def _read_member(archive: zipfile.ZipFile, name: str, info: zipfile.ZipInfo) -> np.ndarray:
    """One array, its header checked (kind, dimensions, size) before its data is read."""
    if info.flag_bits & 1 or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise InputError(name, "encrypted or unusually compressed", "numpy.savez(_compressed) members only")
    try:
        with archive.open(info) as handle:
            version = np.lib.format.read_magic(handle)
            if version not in _NPY_HEADERS:
                raise InputError(name, f".npy format {version}", "formats 1.0 and 2.0 (numpy.save)")
            shape, fortran_order, dtype = _NPY_HEADERS[version](handle)
            _check_header(name, dtype, shape)
            nbytes = math.prod(shape) * dtype.itemsize
            data = handle.read(nbytes)
    except InputError:
        raise
    except _CORRUPT as exc:
        raise InputError(name, str(exc), "expected a readable .npy member (the archive is corrupt)") from None
    if len(data) != nbytes:
        raise InputError(name, f"{len(data)} bytes", f"truncated: shape {list(shape)} of {dtype} needs {nbytes}")
    return np.frombuffer(data, dtype).reshape(shape, order="F" if fortran_order else "C").copy()


def _check_header(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    """The kind and rank each name needs, and the size bound, from the header alone."""
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
