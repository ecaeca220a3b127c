"""Quantisation (codec/quantize.py): integer tensors are checked before they are cast to the levels' int64."""
from __future__ import annotations

import numpy as np
import pytest

from aipu import codec
from aipu.codec.quantize import integer_levels


def test_integer_values_beyond_32_bits_are_refused_not_wrapped():
    """uint64 values of 2**63 and more used to wrap to negative levels; |int64 min| stayed negative."""
    for values, shown in ((np.array([1, 2**63], dtype=np.uint64), 2**63),
                          (np.array([2**64 - 1], dtype=np.uint64), 2**64 - 1),
                          (np.array([0, -2**63], dtype=np.int64), -2**63),
                          (np.array([2**32], dtype=np.uint64), 2**32)):
        with pytest.raises(ValueError, match=f"integer value {shown} exceeds 2\\*\\*32 - 1"):
            integer_levels(values)
    top = integer_levels(np.array([0, 2**32 - 1], dtype=np.uint64))
    assert top.levels.tolist() == [0, 2**32 - 1] and top.cmaxw == 2**32 - 1


def test_the_encoder_names_the_tensor_it_refuses():
    with pytest.raises(ValueError, match=r"tensor 'big': integer value 18446744073709551615 exceeds"):
        codec.encode({"fine": np.arange(4, dtype=np.uint64), "big": np.array([3, 2**64 - 1], dtype=np.uint64)})
    with pytest.raises(ValueError, match=r"tensor 'w': weights contain NaN"):
        codec.encode({"w": np.array([[0.5, np.nan]], dtype=np.float32)})


@pytest.mark.parametrize("peak", [1e36, 1e308, np.finfo(np.float64).max])
def test_float_weights_too_large_for_cmaxw_are_refused_by_name(peak):
    """max|w|·256 beyond 32 bits (float64 near its maximum overflows to infinity) is a named ValueError."""
    with pytest.raises(ValueError, match=r"tensor 'w': sublayer_cmaxw \S+ does not fit in 32 bits"):
        codec.encode({"w": np.array([[peak, -1.0]], dtype=np.float64)}, codec.CodecOptions(bitdepth=7))
