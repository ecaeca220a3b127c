"""The LUT kernels (sim/golden/fast/lut.py) against the definitions in sim/golden/lut.py (docs/arithmetic.md §6):
lut8 on both of its paths (byte pairs and single bytes, either side of PAIRS_MIN_SIZE), lut16 over every table
size, fraction width, window start, output type and clamp."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.sim.golden import lut8, lut16
from aipu.sim.golden.fast.lut import PAIRS_MIN_SIZE
from aipu.sim.golden.lut import direct_lookup, interpolated_lookup

OUT_DTYPES = (np.int8, np.uint8, np.int16)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from([np.int8, np.uint8]), st.sampled_from(OUT_DTYPES),
       st.sampled_from([0, 1, 7, 1000, PAIRS_MIN_SIZE - 1, PAIRS_MIN_SIZE, PAIRS_MIN_SIZE + 1]),
       st.sampled_from(["contiguous", "strided", "odd address"]))
def test_lut8_equals_the_definition(seed, in_dtype, out_dtype, size, layout):
    rng = np.random.default_rng(seed)
    info = np.iinfo(out_dtype)
    table = rng.integers(info.min, info.max, 256, endpoint=True).astype(out_dtype)
    x = rng.integers(0, 256, 2 * size + 1).astype(np.uint8).view(in_dtype)
    x = {"contiguous": x[:size].reshape(1, size, 1), "strided": x[:2 * size:2], "odd address": x[1:size + 1]}[layout]
    got = lut8(x, table)
    assert got.dtype == table.dtype and np.array_equal(got, direct_lookup(x, table))


def test_lut8_of_a_scalar_is_a_scalar():
    table = np.arange(256).astype(np.uint8)[::-1].copy()
    assert lut8(np.array(-1, np.int8), table) == table[255] == 0 and np.ndim(lut8(np.array(3, np.uint8), table)) == 0


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 10), st.integers(0, 16), st.sampled_from(OUT_DTYPES),
       st.booleans(), st.booleans())
def test_lut16_equals_the_definition(seed, k, f, dtype, clamp, every_input):
    rng = np.random.default_rng(seed)
    table = rng.integers(-32768, 32768, 2 ** k + 1).astype(np.int16)
    input_min = int(rng.choice([-32768, 32767, 0, int(rng.integers(-32768, 32768))]))
    info = np.iinfo(dtype)
    qmin, qmax = (sorted(int(q) for q in rng.integers(info.min, info.max, 2, endpoint=True)) if clamp
                  else (int(info.min), int(info.max)))
    x = (np.arange(-32768, 32768) if every_input else rng.integers(-32768, 32768, (3, 50))).astype(np.int16)
    got, clipped = lut16(x, table, index_shift=f, input_min=input_min, out_dtype=dtype, qmin=qmin, qmax=qmax,
                         return_clipped=True)
    want, want_clipped = interpolated_lookup(x, table, f, input_min, qmin, qmax, dtype)
    assert got.dtype == want.dtype and np.array_equal(got, want) and clipped == want_clipped
    assert np.array_equal(lut16(x[..., ::-1], table, index_shift=f, input_min=input_min, out_dtype=dtype, qmin=qmin,
                                qmax=qmax), want[..., ::-1])


def test_lut16_of_a_scalar_is_a_scalar():
    table = np.array([0, 100, 200], np.int16)
    assert lut16(np.array(-32768 + 3, np.int16), table, index_shift=15) == 0
    assert np.ndim(lut16(np.array(5, np.int16), table, index_shift=15)) == 0
