"""The compiled NNC payload against the reference: the same bytes, parameter sets, levels and errors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aipu.codec.deepcabac.compiled import kernels
from aipu.codec.deepcabac.compiled import nnc_coder as fast
from aipu.codec.deepcabac.reference import nnc as reference
from aipu.codec.errors import CodecError
from tests.codec.source_imports import imported_closure

QUICK = settings(max_examples=40, derandomize=True, deadline=None, database=None)
LEVELS = hnp.arrays(np.int32, hnp.array_shapes(max_dims=3, max_side=12),
                    elements=st.one_of(st.integers(-4, 4), st.integers(-300, 300),
                                       st.sampled_from([2**31 - 1, -(2**31 - 1), 2**30, -12, 13])))


@QUICK
@given(levels=LEVELS, unary_length=st.sampled_from([1, 3, 11, 60]), choose=st.booleans())
def test_same_bytes_and_levels_as_the_reference(levels, unary_length, choose):
    data = reference.encode_nnc_layer(levels, unary_length, choose)
    assert fast.encode_nnc_layer(levels, unary_length, choose) == data
    assert np.array_equal(fast.decode_nnc_layer(data, levels.shape, unary_length), levels)


def test_same_parameter_sets_as_the_reference():
    rng = np.random.default_rng(5)
    levels = np.round(rng.laplace(0, 2, (30, 50)) * (rng.random((30, 50)) < 0.3)).astype(np.int64)
    chosen = reference.choose_parameter_sets(reference.nnc_options(), levels.ravel().tolist(), 50)
    keys = reference.signalled_contexts(11)
    assert chosen and fast.choose_parameter_sets(levels.ravel(), 11).tolist() == [chosen.get(key, 0)
                                                                                  for key in keys] + [0]


def test_a_large_layer_grows_the_output_buffer_and_a_carry_crosses_whole_bytes():
    """Random 31-bit remainders: with seed 0 one carry settles 21 waiting bits (the reference encoder's
    outstanding count), so it runs back through at least two written bytes of the compiled encoder."""
    levels = np.random.default_rng(0).integers(-(2**31 - 1), 2**31 - 1, 4000)
    data = fast.encode_nnc_layer(levels, choose_parameters=False)
    assert len(data) > fast.FIRST_OUTPUT_BYTES + levels.size // 2
    assert data == reference.encode_nnc_layer(levels, choose_parameters=False)


def _outcome(decode, data, shape):
    try:
        return ("levels", decode(data, shape).tolist())
    except CodecError as error:
        return ("error", str(error), error.bit_position, error.element, error.context)


@pytest.mark.parametrize("case", ["truncated", "extended", "flipped", "corrupt_limit", "noise"])
def test_same_errors_as_the_reference(case):
    rng = np.random.default_rng(len(case))
    levels = rng.integers(-90, 90, (6, 20)).astype(np.int32)
    data = bytearray(reference.encode_nnc_layer(levels))
    if case == "truncated":
        data = data[: len(data) // 3]
    elif case == "extended":
        data += b"\0\0"
    elif case == "flipped":
        data[len(data) // 2] ^= 0x10
    elif case == "corrupt_limit":        # one-only payload: every flag says "greater", up to the limit
        data = bytearray(b"\xff" * 400)
    else:
        data = bytearray(rng.integers(0, 256, 60, dtype=np.uint8).tobytes())
    expected = _outcome(reference.decode_nnc_layer, bytes(data), levels.shape)
    assert _outcome(fast.decode_nnc_layer, bytes(data), levels.shape) == expected
    assert expected[0] == "error" or case == "flipped"


def test_the_kernel_cache_key_covers_what_the_kernels_read():
    """An edit to a module the kernels import (tables, constants) must start a fresh numba cache."""
    sources = set(kernels.jit.source_files())
    kernel_modules = [path for path in sources if "@jit" in path.read_text()]
    root = Path(kernels.__file__).resolve().parent.parent
    reached = {path for path in imported_closure(kernel_modules) if path.is_relative_to(root)}
    assert Path(kernels.__file__).resolve() in kernel_modules and reached <= sources
