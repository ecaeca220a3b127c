"""The parameter section of T/AI 115.1-2021 §6.1.2: {data type, ndim, sizes, strides, data} records."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.sim.machine.errors import InputError
from aipu.tai import params
from aipu.tai.params import Parameter
from aipu.tai.schema import CODE, NUMPY, RANGES

_NAMES = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


@st.composite
def parameters(draw):
    value_type = draw(st.sampled_from(sorted(NUMPY)))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    dtype = np.dtype(NUMPY[value_type])
    if value_type in RANGES:
        low, high = RANGES[value_type]
        values = draw(st.lists(st.integers(low, high), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    elif dtype.kind in "fc":
        values = draw(st.lists(st.floats(width=min(8 * dtype.itemsize, 64) if dtype.kind == "f" else 32),
                               min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    else:
        info = np.iinfo(dtype)
        values = draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=int(np.prod(shape)),
                               max_size=int(np.prod(shape))))
    return Parameter(draw(_NAMES), draw(_NAMES), value_type, np.array(values, dtype).reshape(shape))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(parameters(), max_size=4, unique_by=lambda p: (p.layer, p.key)))
def test_every_value_type_round_trips(stored):
    back = params.unpack(params.pack(stored), len(stored))
    for original, read in zip(stored, back):
        assert (read.layer, read.key, read.value_type) == (original.layer, original.key, original.value_type)
        assert read.array.shape == original.array.shape
        assert read.array.tobytes() == original.array.tobytes()       # bit for bit, NaN payloads included


def _record(code: int, sizes, strides, data: bytes, layer=b"L", key=b"k") -> bytes:
    head = struct.pack("<H", len(layer)) + layer + struct.pack("<H", len(key)) + key + bytes((code, len(sizes)))
    return head + b"".join(struct.pack("<Q", v) for v in (*sizes, *strides)) + struct.pack("<Q", len(data)) + data


def test_strides_locate_elements():
    """An element lies at sum(index * stride) of the data: a 2x3 array stored column by column."""
    data = np.arange(6, dtype="<i4")                        # column-major storage of [[0, 2, 4], [1, 3, 5]]
    (read,) = params.unpack(_record(CODE["INT32"], (2, 3), (1, 2), data.tobytes()), 1)
    assert read.array.tolist() == [[0, 2, 4], [1, 3, 5]]
    (read,) = params.unpack(_record(CODE["INT32"], (3,), (2,), data.tobytes()), 1)      # every other element
    assert read.array.tolist() == [0, 2, 4]


@pytest.mark.parametrize("record, field", [
    (_record(CODE["INT32"], (2, 3), (3, 2), bytes(24)), "strides"),            # element (1, 2) at 7 of 6
    (_record(CODE["INT8"], (1 << 20, 1 << 20), (0, 0), bytes(1)), "strides"),   # stride 0 blowing up one byte
    (_record(CODE["INT32"], (1,), (1,), bytes(3)), "data length"),
    (_record(CODE["INT32"], (4,), (1,), bytes(8)), "strides"),
    (_record(CODE["STRING"], (1,), (1,), bytes(1)), "data type"),
    (_record(CODE["UNDEFINED"], (1,), (1,), bytes(1)), "data type"),
    (_record(0, (1,), (1,), bytes(1)), "data type"),
    (_record(CODE["INT4"], (2,), (1,), bytes((7, 8))), "values"),
    (_record(CODE["INT8"], (1,), (1,), bytes(1), layer=b"\xff"), "layer name"),
    (_record(CODE["INT8"], (1,), (1,), bytes(1), key=b""), "key"),
    (_record(CODE["INT8"], (1,), (1,), bytes(1))[:-1], "data"),
    (_record(CODE["INT8"], (1,) * 17, (1,) * 17, bytes(1)), "ndim"),
    (_record(CODE["INT8"], (1,), (1,), bytes(1)) + b"\0", "trailing"),
])
def test_malformed_records_are_refused_by_field(record, field):
    with pytest.raises(InputError) as caught:
        params.unpack(record, 1)
    assert field in str(caught.value) and "\n" not in str(caught.value)


def test_a_huge_declared_data_length_is_refused_before_reading():
    record = _record(CODE["INT8"], (1,), (1,), b"")[:-8] + struct.pack("<Q", (1 << 64) - 1)
    with pytest.raises(InputError, match="data length|remain"):
        params.unpack(record, 1)


def test_duplicate_keys_and_bad_values_are_refused():
    one = Parameter("L", "k", "INT8", np.zeros(2, np.int8))
    with pytest.raises(InputError, match="stored once"):
        params.unpack(params.pack([one, one]), 2)
    with pytest.raises(InputError, match="UINT4"):
        params.pack([Parameter("L", "k", "UINT4", np.array([16]))])
