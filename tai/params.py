"""The separate parameter storage of T/AI 115.1-2021 §6.1.2: each parameter keyed by its layer (node) name and
parameter name, stored as {data type, number of dimensions, size of each dimension, stride of each dimension,
data}.

One record, little-endian, byte by byte (docs/tai.md, "Parameter section"):

    u16 layer name length L, L bytes of UTF-8 | u16 key length K, K bytes of UTF-8 | u8 ValueType code
    u8 ndim | ndim x u64 sizes | ndim x u64 strides (in elements) | u64 data length D | D bytes of data

An element at index (i0, ..., i[n-1]) lies at element ``sum(i_k * stride_k)`` of the data, as §6.1.2 locates
it "from the index, the data type and the strides". The reader checks every count and size against the
bytes that remain before it allocates, and refuses a stride that reaches past the data or an array with
more elements than its data holds (so a stride of 0 cannot blow a few bytes up into gigabytes).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from aipu.sim.machine.errors import InputError

from .schema import CODE, NAME, NUMPY, RANGES, numpy_dtype

MAX_NAME_BYTES = 1024
MAX_DIMS = 16
MAX_ELEMENTS = 1 << 31                    # as the ONNX front end: no CNN tensor comes near
_U16, _U64 = struct.Struct("<H"), struct.Struct("<Q")


@dataclass(frozen=True)
class Parameter:
    """One stored array: its layer and key, its ValueType name (Table 14) and its values (``array`` in the
    numpy dtype ``schema.NUMPY`` gives that ValueType)."""

    layer: str
    key: str
    value_type: str
    array: np.ndarray


def check_name(what: str, name: object) -> str:
    """``name`` if it can key a parameter or name a record: a non-empty str of at most MAX_NAME_BYTES UTF-8."""
    if not isinstance(name, str) or not name or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise InputError(what, name, f"a name of 1 .. {MAX_NAME_BYTES} bytes of UTF-8")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(what, name, "valid UTF-8") from None
    return name


def check_values(what: str, value_type: str, array: np.ndarray) -> np.ndarray:
    """``array`` in its ValueType's storage dtype, its values inside the type's range (INT4 within -8..7, ...)."""
    if value_type not in NUMPY:
        raise InputError(f"{what} data type", value_type, f"one of {', '.join(NUMPY)}")
    dtype = numpy_dtype(value_type)
    if value_type in RANGES:
        low, high = RANGES[value_type]
        if array.size and (np.asarray(array).min() < low or np.asarray(array).max() > high):
            raise InputError(f"{what} values", f"{array.min()} .. {array.max()}", f"{value_type}: {low} .. {high}")
    if np.asarray(array).dtype.kind != dtype.kind and not (value_type in ("BOOL", "BINARY") or value_type in RANGES):
        raise InputError(f"{what} dtype", str(np.asarray(array).dtype), f"{value_type} ({dtype})")
    return np.array(array, dtype=dtype, order="C")      # (ascontiguousarray would make a 0-d array 1-d)


def pack(parameters: list[Parameter]) -> bytes:
    """The parameter section: the records of ``parameters`` back to back, each contiguous in C order."""
    out = bytearray()
    for parameter in parameters:
        array = check_values(f"parameter {parameter.layer}/{parameter.key}", parameter.value_type, parameter.array)
        if array.ndim > MAX_DIMS:
            raise InputError(f"parameter {parameter.layer}/{parameter.key} dimensions", array.ndim,
                             f"at most {MAX_DIMS}")
        for name in (parameter.layer, parameter.key):
            encoded = check_name("parameter name", name).encode()
            out += _U16.pack(len(encoded)) + encoded
        strides = [stride // array.itemsize for stride in array.strides] if array.size else [0] * array.ndim
        out += bytes((CODE[parameter.value_type], array.ndim))
        out += b"".join(_U64.pack(value) for value in (*array.shape, *strides))
        data = array.tobytes()
        out += _U64.pack(len(data)) + data
    return bytes(out)


class _Cursor:
    """Reads a section front to back, refusing any field that would run past its end."""

    def __init__(self, data: bytes, where: str):
        self.data, self.offset, self.where = memoryview(data), 0, where

    def take(self, count: int, field: str) -> memoryview:
        if count > len(self.data) - self.offset:
            raise InputError(f"{self.where} {field}", f"{count} bytes at offset {self.offset}",
                             f"at most the {len(self.data) - self.offset} bytes that remain")
        start, self.offset = self.offset, self.offset + count
        return self.data[start:self.offset]

    def u16(self, field: str) -> int:
        return _U16.unpack(self.take(2, field))[0]

    def u64(self, field: str) -> int:
        return _U64.unpack(self.take(8, field))[0]

    def name(self, field: str) -> str:
        raw = bytes(self.take(self.u16(f"{field} length"), field))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{self.where} {field}", raw, "valid UTF-8") from None
        return check_name(f"{self.where} {field}", text)


def unpack(section: bytes, count: int) -> list[Parameter]:
    """The ``count`` records of a parameter section that must hold exactly them; InputError on anything else."""
    cursor, parameters, seen = _Cursor(section, "parameter section"), [], set()
    for index in range(count):
        cursor.where = f"parameter {index}"
        layer, key = cursor.name("layer name"), cursor.name("key")
        cursor.where = f"parameter {layer}/{key}"
        if (layer, key) in seen:
            raise InputError(cursor.where, "a second record", "each (layer, key) stored once")
        seen.add((layer, key))
        parameters.append(Parameter(layer, key, *_array(cursor)))
    if cursor.offset != len(section):
        raise InputError("parameter section", f"{len(section) - cursor.offset} bytes after the last record",
                         "no trailing bytes")
    return parameters


def _array(cursor: _Cursor) -> tuple[str, np.ndarray]:
    """One record's {data type, ndim, sizes, strides, data}, every size checked before anything is allocated."""
    code, ndim = cursor.take(2, "data type and ndim")
    if code not in NAME or NAME[code] not in NUMPY:
        raise InputError(f"{cursor.where} data type", code,
                         f"a ValueType code of Table 14 with fixed-size elements ({_codes()})")
    if ndim > MAX_DIMS:
        raise InputError(f"{cursor.where} ndim", ndim, f"0 .. {MAX_DIMS}")
    value_type, dtype = NAME[code], numpy_dtype(NAME[code])
    cursor.take(16 * ndim, "sizes and strides")        # both present before either is believed
    cursor.offset -= 16 * ndim
    sizes = [cursor.u64("size") for _ in range(ndim)]
    strides = [cursor.u64("stride") for _ in range(ndim)]
    length = cursor.u64("data length")
    if length % dtype.itemsize:
        raise InputError(f"{cursor.where} data length", length, f"a multiple of {dtype.itemsize} ({value_type})")
    stored = length // dtype.itemsize
    elements = math.prod(sizes)
    if max(sizes, default=0) > MAX_ELEMENTS or elements > min(stored, MAX_ELEMENTS) or (elements and max(
            sum((size - 1) * stride for size, stride in zip(sizes, strides)), 0) >= stored):
        raise InputError(f"{cursor.where} sizes {sizes} strides", strides,
                         f"every element inside the {stored} stored elements, and at most that many elements")
    data = np.frombuffer(cursor.take(length, "data"), dtype)
    if elements == 0:
        return value_type, check_values(cursor.where, value_type, np.zeros(sizes, dtype))
    view = np.lib.stride_tricks.as_strided(data, shape=sizes, strides=[stride * dtype.itemsize if size > 1 else 0
                                                    for size, stride in zip(sizes, strides)],
                                           writeable=False)
    return value_type, check_values(cursor.where, value_type, np.array(view, dtype.newbyteorder("=")))


def _codes() -> str:
    return ", ".join(f"{CODE[name]} {name}" for name in NUMPY)
