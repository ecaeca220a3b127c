"""Hypothesis strategies the fuzzers share: arrays of any dtype and shape, and damaged copies of valid bytes."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

_DTYPES = st.sampled_from(["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", ">i4", "f4", "f8", "?", "U8", "S4", "c8"])
_SHAPES = st.lists(st.integers(0, 5), max_size=5).map(tuple)


@st.composite
def random_array(draw):
    """An array of any dtype (integers either side of the int8 and uint16 ranges; floats with NaN, infinities
    and extremes; booleans, strings, complex) and of a small shape, empty ones included."""
    dtype = np.dtype(draw(_DTYPES))
    shape = draw(_SHAPES)
    size = int(np.prod(shape))
    if dtype.kind in "US":
        element = st.text(max_size=6) if dtype.kind == "U" else st.binary(max_size=4)
        return np.array(draw(st.lists(element, min_size=size, max_size=size)), dtype=dtype).reshape(shape)
    if dtype.kind == "f" and draw(st.booleans()):
        values = draw(st.lists(st.floats(width=8 * dtype.itemsize), min_size=size, max_size=size))
        return np.array(values, dtype=dtype).reshape(shape)
    values = draw(st.lists(st.integers(-300, 70000), min_size=size, max_size=size))
    return np.array(values).astype(dtype).reshape(shape)


@st.composite
def mangled_bytes(draw, data: bytes) -> bytes:
    """``data`` truncated, or with a few bytes overwritten, often in the first or last 120 bytes (where
    file headers, zip directories and checksums live)."""
    data = bytearray(data)
    if draw(st.booleans()):
        return bytes(data[:draw(st.integers(0, len(data)))])
    end = len(data) - 1
    positions = st.one_of(st.integers(0, min(119, end)), st.integers(max(0, end - 119), end), st.integers(0, end))
    for _ in range(draw(st.integers(1, 8))):
        data[draw(positions)] = draw(st.integers(0, 255))
    return bytes(data)
