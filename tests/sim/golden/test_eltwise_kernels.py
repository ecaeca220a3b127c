"""The elementwise and concat kernels (sim/golden/fast/eltwise.py) against the definitions in
sim/golden/eltwise.py (docs/arithmetic.md §8): every op and rounding mode, int8/uint8 operands, every output type
and clamp, multipliers and shifts at their extremes (where the 32-bit kernels cap shifts or split the multiplier),
every broadcast layout (and the switch to mul_per_run at its shortest run), saturation counts."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.sim.golden import ELTWISE_OPS, concat, eltwise
from aipu.sim.golden.eltwise import MAX_ALIGN, eltwise_value, rescale_value
from aipu.sim.golden.fast import kernels
from aipu.sim.golden.requant import output_stage
from aipu.sim.golden.rounding import ROUNDING_MODES
from aipu.sim.machine.arch import MULTIPLIER_MAX, SHIFT_MAX

BYTES = (np.int8, np.uint8)
OUT_DTYPES = (np.int8, np.uint8, np.int16)
# [N, C, H, W] against: itself, a value per channel, a value per image, one value, a row, a general broadcast,
# an empty output, a vector; a value per channel without the batch axis, of one image and of two
LAYOUTS = [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (2, 3, 1, 1)), ((2, 3, 1, 1), (2, 3, 4, 5)),
           ((2, 3, 4, 5), (2, 1, 1, 1)), ((2, 3, 4, 5), (1,)), ((2, 3, 4, 5), (5,)), ((1, 3, 1, 5), (2, 1, 4, 1)),
           ((2, 0, 3), (2, 1, 3)), ((7,), (7,)), ((1, 3, 4, 5), (3, 1, 1)), ((2, 3, 4, 5), (3, 1, 1))]


def eltwise_reference(a, b, op, multiplier, shift, za, zb, zp, qmin, qmax, dtype, rounding):
    """The definition: (out, saturated count)."""
    return output_stage(eltwise_value(a, b, op, multiplier, shift, za, zb, rounding), zp, qmin, qmax, dtype)


def values(rng, shape, dtype):
    info = np.iinfo(dtype)
    drawn = rng.integers(info.min, info.max, shape, endpoint=True)
    return np.where(rng.random(shape) < 0.2, rng.choice([info.min, info.max], shape), drawn).astype(dtype)


@st.composite
def multipliers_and_shifts(draw, op):
    multiplier = st.one_of(st.sampled_from([0, 1, 255, 256, MULTIPLIER_MAX]), st.integers(0, MULTIPLIER_MAX))
    shift = st.one_of(st.sampled_from([0, 1, 2, 7, 8, 9, 23, 24, 25, 26, 27, SHIFT_MAX]), st.integers(0, SHIFT_MAX))
    if op == "mul":
        return draw(multiplier), draw(shift)
    na = draw(shift)
    nb = draw(st.integers(max(0, na - MAX_ALIGN), min(SHIFT_MAX, na + MAX_ALIGN)))
    return (draw(multiplier), draw(multiplier)), (na, nb)


@st.composite
def eltwise_cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    op = draw(st.sampled_from(ELTWISE_OPS))
    multiplier, shift = draw(multipliers_and_shifts(op))
    a_shape, b_shape = draw(st.sampled_from(LAYOUTS))
    a, b = values(rng, a_shape, draw(st.sampled_from(BYTES))), values(rng, b_shape, draw(st.sampled_from(BYTES)))
    dtype = draw(st.sampled_from(OUT_DTYPES))
    if draw(st.booleans()):
        a, b = b, a
    if draw(st.booleans()):     # eltwise copies it rather than have numba compile for read-only arrays
        a.flags.writeable = False
    info = np.iinfo(dtype)
    qmin, qmax = sorted(int(q) for q in rng.integers(info.min, info.max, 2, endpoint=True))
    if draw(st.booleans()):
        qmin, qmax = int(info.min), int(info.max)

    def zero_point(dtype):
        return int(draw(st.sampled_from([np.iinfo(dtype).min, np.iinfo(dtype).max, 0, int(rng.integers(0, 100))])))
    case = dict(a=a, b=b, op=op, multiplier=multiplier, shift=shift, za=zero_point(a.dtype), zb=zero_point(b.dtype),
                zp=zero_point(dtype), qmin=qmin, qmax=qmax, dtype=dtype, rounding=draw(st.sampled_from(ROUNDING_MODES)))
    if draw(st.booleans()):     # numpy scalars: eltwise checks them afresh instead of caching its plan
        case.update({name: np.int64(case[name]) for name in ("za", "zb", "zp")},
                    multiplier=tuple(map(np.int64, np.atleast_1d(multiplier))) if op != "mul" else np.int64(multiplier))
    return case


@settings(max_examples=400, deadline=None)
@given(eltwise_cases())
def test_eltwise_kernels_equal_the_definition(c):
    got, saturated = eltwise(c["a"], c["b"], c["op"], multiplier=c["multiplier"], shift=c["shift"],
                             a_zero_point=c["za"], b_zero_point=c["zb"], out_zero_point=c["zp"], qmin=c["qmin"],
                             qmax=c["qmax"], out_dtype=c["dtype"], rounding=c["rounding"], return_saturated=True)
    want, want_saturated = eltwise_reference(c["a"], c["b"], c["op"], c["multiplier"], c["shift"], c["za"], c["zb"],
                                             c["zp"], c["qmin"], c["qmax"], c["dtype"], c["rounding"])
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want) and saturated == want_saturated
    uncounted = eltwise(c["a"], c["b"], c["op"], multiplier=c["multiplier"], shift=c["shift"], a_zero_point=c["za"],
                        b_zero_point=c["zb"], out_zero_point=c["zp"], qmin=c["qmin"], qmax=c["qmax"],
                        out_dtype=c["dtype"], rounding=c["rounding"])     # clamped by the type's range if it is that
    assert uncounted.dtype == want.dtype and np.array_equal(uncounted, want)


def test_eltwise_ties_in_every_mode():
    """Every (d_a, d_b) with shifts that make many exact halves, including the kernels' split of the shift."""
    a = np.repeat(np.arange(-128, 128, dtype=np.int8), 256)
    b = np.tile(np.arange(-128, 128, dtype=np.int8), 256)
    for op, multiplier, shift in [("add", (3, 1), (1, 4)), ("sub", (1, 5), (9, 2)), ("max", (1, 3), (1, 2)),
                                  ("min", (5, 1), (3, 0)), ("mul", 3, 1), ("mul", 1, 10), ("mul", 65535, 0)]:
        for rounding in ROUNDING_MODES:
            got, saturated = eltwise(a, b, op, multiplier=multiplier, shift=shift, out_dtype=np.int16,
                                     rounding=rounding, return_saturated=True)
            want, want_saturated = eltwise_reference(a, b, op, multiplier, shift, 0, 0, 0, -32768, 32767, np.int16,
                                                     rounding)
            assert np.array_equal(got, want) and saturated == want_saturated, (op, rounding)


def test_mul_without_shift_saturates_where_the_product_is_capped():
    """N = 0: products past 2**17 / M are capped in the kernel; with any zero point they still saturate."""
    a = np.repeat(np.arange(-128, 128, dtype=np.int8), 256)
    b = np.tile(np.arange(-128, 128, dtype=np.int8), 256)
    for multiplier in (1, 2, 3, 255, 4097, 65535):
        for zp in (-32768, 0, 32767):
            for za, zb in ((127, -128), (-128, -128)):      # products down to -255**2, up to 255**2
                got, saturated = eltwise(a, b, "mul", multiplier=multiplier, shift=0, a_zero_point=za,
                                         b_zero_point=zb, out_zero_point=zp, out_dtype=np.int16, return_saturated=True)
                want, want_saturated = eltwise_reference(a, b, "mul", multiplier, 0, za, zb, zp, -32768, 32767,
                                                         np.int16, "half_up")
                assert np.array_equal(got, want) and saturated == want_saturated, (multiplier, zp, za, zb)


@pytest.mark.parametrize("runs, repeat", [(4, 15), (3, 16), (5, 17), (2, 31), (4, 196), (2, 1000)])
@pytest.mark.parametrize("rounding", ROUNDING_MODES)
def test_mul_by_a_value_per_run_equals_the_definition(runs, repeat, rounding):
    """mul_per_run's blocks of 16 values, the last one moved back within its run, on either operand; every
    output type, with and without the type's own clamp. Runs shorter than 16 take mul on a repeated copy."""
    rng = np.random.default_rng(repeat)
    full = values(rng, (runs, repeat), np.uint8)
    per_run = values(rng, (runs, 1), np.int8)
    for dtype, (qmin, qmax) in [(np.int8, (None, None)), (np.uint8, (3, 250)), (np.int16, (-30000, 20000))]:
        info = np.iinfo(dtype)
        zp = 9 if dtype == np.uint8 else -5
        for a, b, za, zb in ((full, per_run, 7, -3), (per_run, full, -128, 255)):
            got = eltwise(a, b, "mul", multiplier=40000, shift=17, a_zero_point=za, b_zero_point=zb, out_zero_point=zp,
                          qmin=qmin, qmax=qmax, out_dtype=dtype, rounding=rounding)
            want, _ = eltwise_reference(a, b, "mul", 40000, 17, za, zb, zp, info.min if qmin is None else qmin,
                                        info.max if qmax is None else qmax, dtype, rounding)
            assert got.shape == want.shape and np.array_equal(got, want), (dtype, za)


def test_mul_per_run_refuses_runs_shorter_than_its_block():
    """Its last block moves back within the run: a shorter run would be written past, so it raises instead."""
    module = kernels("eltwise")
    parameters = np.zeros(12, np.int32)
    for size, values in ((30, 2), (32, 3)):     # runs of 15; 32 values not a multiple of 3
        with pytest.raises(ValueError, match="mul_per_run"):
            module.mul_per_run(np.zeros(size, np.int8), np.zeros(values, np.int8), parameters, 0,
                               np.zeros(size, np.int8))


def test_cached_checks_still_reject_what_equals_a_valid_argument():
    """True and 1.0 compare equal to 1: a plan cached for 1 must not let them through."""
    a = np.zeros(3, np.int8)
    for name in ("multiplier", "shift", "out_zero_point"):
        arguments = dict(multiplier=1, shift=1, out_zero_point=1)
        eltwise(a, a, "mul", **arguments)
        for wrong in (True, 1.0):
            with pytest.raises(TypeError, match=f"{name} must be an integer"):
                eltwise(a, a, "mul", **{**arguments, name: wrong})


def test_eltwise_of_scalars_is_0d():
    out = eltwise(np.array(3, np.int8), np.array(-4, np.int8), "add", multiplier=(3, 5), shift=(2, 4))
    assert out.shape == () and out.item() == round((3 * 3 * 4 - 4 * 5) / 16)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from(OUT_DTYPES), st.sampled_from(ROUNDING_MODES),
       multipliers_and_shifts("add"), st.booleans())
def test_concat_kernel_equals_the_definition(seed, dtype, rounding, parameters, per_channel):
    rng = np.random.default_rng(seed)
    inputs = [values(rng, (3, 2, 4), np.int8), values(rng, (3, 5, 4), np.uint8)]
    zero_points = [int(rng.integers(-128, 128)), int(rng.integers(0, 256))]
    multipliers, shifts = parameters
    if per_channel:     # one (M, N) per entry of axis 0, which only requantize takes
        multipliers, shifts = [np.full(3, m) for m in multipliers], [np.full(3, n) for n in shifts]
    info = np.iinfo(dtype)
    zp = int(rng.integers(info.min, info.max, endpoint=True))
    got = concat(inputs, axis=1, zero_points=zero_points, multipliers=multipliers, shifts=shifts, out_zero_point=zp,
                 out_dtype=dtype, rounding=rounding)
    parts = [output_stage(rescale_value(x, z, np.reshape(m, (-1, 1, 1)), np.reshape(n, (-1, 1, 1)), rounding), zp,
                          info.min, info.max, dtype)[0]
             for x, z, m, n in zip(inputs, zero_points, multipliers, shifts)]
    assert got.dtype == np.dtype(dtype) and np.array_equal(got, np.concatenate(parts, axis=1))


def test_concat_copies_an_input_of_the_output_quantization():
    """M = 2**N and the output's zero point and type: the unified-scale copy, unless the clamp is narrower."""
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, 2, 128)
    for multiplier, shift, qmin, out_dtype in ((1, 0, None, np.int8), (1 << 15, 15, None, np.int8),
                                               (1 << 15, 15, -100, np.int8), (4, 2, None, np.int16)):
        got = concat([x], zero_points=[3], multipliers=[multiplier], shifts=[shift], out_zero_point=3, qmin=qmin,
                     out_dtype=out_dtype)
        want = np.clip(x.astype(np.int64), -128 if qmin is None else qmin, 127).astype(out_dtype)
        assert got.dtype == np.dtype(out_dtype) and np.array_equal(got, want)
