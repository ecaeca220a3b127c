"""The requantizer's fused kernels (sim/golden/fast/requant.py) against the definition in sim/golden/requant.py
(docs/arithmetic.md §4): every rounding, Leaky, per-channel and scalar parameters, every channel axis and output
type, clamps, saturation counts, extreme accumulators, biases and float32 scales, and the switch to the wide
float32 kernel."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.sim.golden import requant_stage, requantize, requantize_float32, requantize_records
from aipu.sim.golden.fast.requant import ROUNDING_CODES, channels_last_blocks, native_requant_channels_last
from aipu.sim.golden.requant import float32_requant, native_requant, output_stage
from aipu.sim.golden.rounding import ROUNDING_MODES, rounding_shift_right
from aipu.sim.machine.arch import ACC_BITS, BIAS_BITS, MULTIPLIER_MAX, PARAM_DTYPE, SHIFT_MAX, bit_range

OUT_DTYPES = (np.int8, np.uint8, np.int16)


def _broadcast(param, ndim: int, axis: int):
    param = np.asarray(param)
    if param.ndim == 0:
        return param
    shape = [1] * ndim
    shape[axis] = param.size
    return param.reshape(shape)


def native_reference(acc, bias, m, n, neg, rounding, zp, qmin, qmax, dtype, axis):
    """The definition of the native mode on acc with its parameters along ``axis``: (out, saturated count)."""
    total = acc.astype(np.int64) + _broadcast(bias, acc.ndim, axis)
    m, n = _broadcast(m, acc.ndim, axis), _broadcast(n, acc.ndim, axis)
    negative = () if neg is None else (_broadcast(neg[0], acc.ndim, axis), _broadcast(neg[1], acc.ndim, axis))
    return output_stage(native_requant(total, m, n, rounding, *negative), zp, qmin, qmax, dtype)


def float32_reference(acc, bias, scale, zp, qmin, qmax, dtype, axis):
    """The definition of the float32 mode: (out, saturated count)."""
    total = acc.astype(np.int64) + _broadcast(bias, acc.ndim, axis)
    return output_stage(float32_requant(total, _broadcast(scale, acc.ndim, axis)), zp, qmin, qmax, dtype)


@st.composite
def cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=4)))
    axis = draw(st.integers(0, len(shape) - 1)) if shape else 0
    channels = shape[axis] if shape else None
    low, high = bit_range(ACC_BITS, signed=True)
    acc = np.where(rng.random(shape) < 0.1, rng.choice([low, high, 0, -1], shape),
                   rng.integers(-(1 << rng.integers(4, 32)), 1 << 30, shape)).astype(np.int32)

    def param(lo, hi, extremes):
        size = None if channels is None or draw(st.booleans()) else channels
        values = rng.integers(lo, hi, size, endpoint=True)
        return np.where(rng.random(size) < 0.3, rng.choice(extremes, size), values)

    dtype = draw(st.sampled_from(OUT_DTYPES))
    info = np.iinfo(dtype)
    qmin, qmax = sorted(int(q) for q in rng.integers(info.min, info.max, 2, endpoint=True))
    if draw(st.booleans()):
        qmin, qmax = int(info.min), int(info.max)
    bias_low, bias_high = bit_range(BIAS_BITS, signed=True)
    return dict(acc=acc, axis=axis, dtype=dtype, qmin=qmin, qmax=qmax, zp=int(rng.integers(info.min, info.max)),
                bias=param(bias_low, bias_high, [bias_low, bias_high, 0]) if draw(st.booleans()) else None,
                m=param(0, MULTIPLIER_MAX, [0, 1, MULTIPLIER_MAX]), n=param(0, SHIFT_MAX, [0, 1, SHIFT_MAX]),
                neg=(param(0, MULTIPLIER_MAX, [0, MULTIPLIER_MAX]), param(0, SHIFT_MAX, [0, SHIFT_MAX]))
                if draw(st.booleans()) else None,
                scale=np.ldexp(1 + rng.random(), int(rng.choice([-149, -126, -40, -20, -8, 0, 20, 127]))
                               ).astype(np.float32) if channels is None or draw(st.booleans())
                else np.ldexp(1 + rng.random(channels), rng.integers(-30, 10, channels)).astype(np.float32))


@settings(max_examples=150, deadline=None)
@given(cases(), st.sampled_from(ROUNDING_MODES))
def test_native_kernel_equals_the_definition(case, rounding):
    """With the count of clamped values and without it (the kernel's loop without the count)."""
    arguments = dict(bias=case["bias"], multiplier=case["m"], shift=case["n"], out_zero_point=case["zp"],
                     qmin=case["qmin"], qmax=case["qmax"], rounding=rounding, channel_axis=case["axis"],
                     out_dtype=case["dtype"],
                     **(dict(negative_multiplier=case["neg"][0], negative_shift=case["neg"][1]) if case["neg"] else {}))
    got = requantize(case["acc"], return_saturated=True, **arguments)
    want = native_reference(case["acc"], 0 if case["bias"] is None else case["bias"], case["m"], case["n"],
                            case["neg"], rounding, case["zp"], case["qmin"], case["qmax"], case["dtype"], case["axis"])
    assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
    assert np.array_equal(got[0], want[0]) and got[1] == want[1]
    assert np.array_equal(requantize(case["acc"], **arguments), want[0])


@settings(max_examples=150, deadline=None)
@given(cases())
def test_float32_kernel_equals_the_definition(case):
    """With the count of clamped values and without it (the kernel's loop without the count)."""
    arguments = dict(bias=case["bias"], scale=case["scale"], out_zero_point=case["zp"], qmin=case["qmin"],
                     qmax=case["qmax"], channel_axis=case["axis"], out_dtype=case["dtype"])
    got = requantize_float32(case["acc"], return_saturated=True, **arguments)
    want = float32_reference(case["acc"], 0 if case["bias"] is None else case["bias"], case["scale"], case["zp"],
                             case["qmin"], case["qmax"], case["dtype"], case["axis"])
    assert np.array_equal(got[0], want[0]) and got[1] == want[1]
    assert np.array_equal(requantize_float32(case["acc"], **arguments), want[0])


@pytest.mark.parametrize("value", [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, -127.5])
def test_float32_ties_round_to_even(value):
    """acc * 0.5 lands exactly on the tie: the kernel's floor-and-fraction rounding is round half to even."""
    acc = np.array([int(value * 2)], np.int32)
    out = requantize_float32(acc, scale=np.float32(0.5), channel_axis=0)
    assert int(out[0]) == int(np.rint(value))


def test_float32_sums_beyond_int32_take_the_wide_kernel():
    """acc + bias outside int32 (one bit wider, REQUANT_SUM_BITS) voids the 32-bit kernel's result; the wide one
    gives the exact answer, here a sum of 2**31 whose float32 is exact and lands on 1 << 20 after scaling."""
    low, high = bit_range(ACC_BITS, signed=True)
    acc = np.array([[high, low, 5]], np.int32)
    bias = np.array([1], np.int64)
    scale = np.float32(2.0 ** -11)
    got, saturated = requantize_float32(acc, bias=bias, scale=scale, out_zero_point=0, out_dtype=np.int16,
                                        channel_axis=0, return_saturated=True)
    want = float32_reference(acc, bias[:, None], scale, 0, -32768, 32767, np.int16, 0)
    assert got.tolist() == want[0].tolist() == [[32767, -32768, 0]] and saturated == want[1] == 2


def test_float32_counts_saturation_over_runs_longer_than_one_float_sum():
    """More values in one channel than the kernel counts in one float32 sum: the count stays exact."""
    acc = np.full((1, (1 << 22) + 3), 1000, np.int32)
    acc[0, ::7] = -1000
    got, saturated = requantize_float32(acc, scale=np.float32(1.0), channel_axis=0, return_saturated=True)
    assert saturated == acc.size and got.min() == -128 and got.max() == 127


@pytest.mark.parametrize("leaky", [False, True])
@pytest.mark.parametrize("rounding", ROUNDING_MODES)
def test_native_kernel_places_every_tie_of_small_shifts(rounding, leaky):
    """Every remainder of every shift up to 6, ties included, positive and negative: the kernel's branch-free
    bump against rounding_shift_right, in each of its (leaky, rounding) loops (Leaky: the negative sums times
    3, their shifts one more)."""
    acc = np.arange(-300, 301, dtype=np.int32)[:, None].repeat(7, axis=1)     # [values, shift 0..6]
    shifts = np.arange(7)
    negative = dict(negative_multiplier=3, negative_shift=shifts + 1) if leaky else {}
    out = requantize(acc, multiplier=1, shift=shifts, rounding=rounding, out_dtype=np.int16, **negative)
    values = acc.astype(np.int64)
    if leaky:
        expected = np.where(values < 0, rounding_shift_right(values * 3, shifts[None, :] + 1, rounding),
                            rounding_shift_right(values, shifts[None, :], rounding))
    else:
        expected = rounding_shift_right(values, shifts[None, :], rounding)
    assert np.array_equal(out, expected)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), float32_scale=st.booleans(), leaky=st.booleans(),
       rounding=st.sampled_from(ROUNDING_MODES), dtype=st.sampled_from(OUT_DTYPES))
def test_records_entry_equals_the_keyword_entries(seed, float32_scale, leaky, rounding, dtype):
    """requantize_records (the interpreter's REQUANT: parameter records, a stage checked once) against
    requantize / requantize_float32 given the same parameters as keywords."""
    rng = np.random.default_rng(seed)
    pixels, channels = int(rng.integers(1, 40)), int(rng.integers(1, 9))
    acc = rng.integers(-(1 << 24), 1 << 24, (pixels, channels)).astype(np.int32)
    records = np.zeros(channels, PARAM_DTYPE)
    records["bias"] = rng.integers(-(1 << 20), 1 << 20, channels)
    records["multiplier"] = rng.integers(0, MULTIPLIER_MAX + 1, channels)
    records["shift"] = rng.integers(0, SHIFT_MAX + 1, channels)
    records["negative_multiplier"] = rng.integers(0, MULTIPLIER_MAX + 1, channels)
    records["negative_shift"] = rng.integers(0, SHIFT_MAX + 1, channels)
    records["scale"] = np.ldexp(1 + rng.random(channels), rng.integers(-30, 0, channels)).astype(np.float32)
    leaky = leaky and not float32_scale
    info = np.iinfo(dtype)
    common = dict(out_zero_point=int(rng.integers(info.min, info.max)), qmin=int(info.min), qmax=int(info.max),
                  out_dtype=dtype)
    stage = requant_stage(float32_scale=float32_scale, leaky=leaky, rounding=rounding, **common)
    out, saturated = requantize_records(acc, records, stage)
    bias = records["bias"].astype(np.int64)
    if float32_scale:
        expected = requantize_float32(acc, bias=bias, scale=records["scale"].copy(), return_saturated=True, **common)
    else:
        negative = (dict(negative_multiplier=records["negative_multiplier"].astype(np.int64),
                         negative_shift=records["negative_shift"].astype(np.int64)) if leaky else {})
        expected = requantize(acc, bias=bias, multiplier=records["multiplier"].astype(np.int64),
                              shift=records["shift"].astype(np.int64), rounding=rounding, return_saturated=True,
                              **negative, **common)
    np.testing.assert_array_equal(out, expected[0])
    assert saturated == expected[1]


def test_records_entry_refuses_a_shift_its_field_type_allows_but_the_contract_does_not():
    records = np.zeros(2, PARAM_DTYPE)
    records["shift"] = [3, SHIFT_MAX + 1]
    with pytest.raises(ValueError, match=rf"shift={SHIFT_MAX + 1} is outside \[0, {SHIFT_MAX}\]"):
        requantize_records(np.zeros((4, 2), np.int32), records, requant_stage(float32_scale=False))


@pytest.mark.parametrize("pixels, channels", [(1, 1), (7, 3), (33, 16), (5, 100), (3, 300)])
def test_channels_last_kernel_equals_the_definition_for_every_block_length(pixels, channels):
    """native_requant_channels_last reads its parameters as channels_last_blocks repeats them: blocks of whole
    pixels, one pixel from 256 channels, the last block of a tile shorter; blocks of another length are
    refused, not read out of step."""
    rng = np.random.default_rng(pixels * channels)
    acc = rng.integers(-(1 << 24), 1 << 24, (pixels, channels), dtype=np.int32)
    bias = rng.integers(-5000, 5000, channels).astype(np.int64)
    m, n = rng.integers(0, MULTIPLIER_MAX + 1, channels), rng.integers(0, 40, channels)
    out = np.empty((pixels, channels), np.int8)
    count = native_requant_channels_last(acc, *channels_last_blocks(bias, m, n, 3), 1, 3, -128, 127, out)
    expected, saturated = native_reference(acc, bias, m, n, None, "half_up", 3, -128, 127, np.int8, 1)
    np.testing.assert_array_equal(out, expected)
    assert count == saturated
    other = 2 * channels + 1      # blocks of a length no tile of ``channels`` takes
    with pytest.raises(ValueError, match="channel count"):
        native_requant_channels_last(acc, *channels_last_blocks(bias[:1].repeat(other), m[:1].repeat(other),
                                                                n[:1].repeat(other), 3), 1, 3, -128, 127, out)
    with pytest.raises(ValueError, match="another zero point"):     # its offsets hold the zero point
        native_requant_channels_last(acc, *channels_last_blocks(bias, m, n, 2), 1, 3, -128, 127, out)


@pytest.mark.parametrize("rounding", ROUNDING_MODES)
@pytest.mark.parametrize("zero_point", [-(1 << 15), -1, 0, (1 << 15) - 1])
def test_channels_last_kernel_is_exact_at_the_int64_bound(rounding, zero_point):
    """The zero point folded into the channels-last kernel's offsets (zp * 2**N, up to 2**62) with the extreme
    accumulators, biases, multipliers and shifts the NPU's fields allow: int16 outputs equal the definition
    (int64 steps, zero point added after the shift) in every rounding mode, each clamp counted."""
    rng = np.random.default_rng(zero_point & 0xFFFF)
    channels = 24
    acc = rng.choice(np.array([-(1 << 31), (1 << 31) - 1, -1, 0, 1], np.int32), (40, channels))
    acc[::3] = rng.integers(-(1 << 31), 1 << 31, (len(acc[::3]), channels), dtype=np.int64).astype(np.int32)
    bias = rng.choice(np.array([-(1 << 31), (1 << 31) - 1, 0, 7], np.int64), channels)
    m = rng.choice(np.array([0, 1, MULTIPLIER_MAX, 40503], np.int64), channels)
    n = rng.choice(np.array([0, 1, 16, SHIFT_MAX], np.int64), channels)
    out = np.empty(acc.shape, np.int16)
    count = native_requant_channels_last(acc, *channels_last_blocks(bias, m, n, zero_point),
                                         ROUNDING_CODES[rounding], zero_point, -(1 << 15), (1 << 15) - 1, out)
    expected, saturated = native_reference(acc, bias, m, n, None, rounding, zero_point, -(1 << 15), (1 << 15) - 1,
                                           np.int16, 1)
    np.testing.assert_array_equal(out, expected)
    assert count == saturated


@pytest.mark.parametrize("multiplier", [-(1 << 31), -1, (1 << 31) - 1, (1 << 30) + 12345])
def test_channels_last_kernel_multiplies_any_int32_multiplier(multiplier):
    """The loop reads each multiplier as the int32 in its lane's low half: at int32's extremes, negative too,
    the products of extreme accumulators are exact (half up and floor, the modes that read it so)."""
    acc = np.array([[-(1 << 31), (1 << 31) - 1, 12345, -7]], np.int32).repeat(3, axis=0)
    bias, m, n = np.full(4, 5, np.int64), np.full(4, multiplier, np.int64), np.array([40, 45, 47, 31], np.int64)
    for rounding, code in (("floor", 0), ("half_up", 1)):
        out = np.empty(acc.shape, np.int16)
        count = native_requant_channels_last(acc, *channels_last_blocks(bias, m, n, 9), code, 9, -(1 << 15),
                                             (1 << 15) - 1, out)
        expected, saturated = native_reference(acc, bias, m, n, None, rounding, 9, -(1 << 15), (1 << 15) - 1,
                                               np.int16, 1)
        np.testing.assert_array_equal(out, expected)
        assert count == saturated


def test_channels_last_blocks_refuse_parameters_their_loop_cannot_hold():
    """A multiplier outside int32 (the loop multiplies 32-bit halves) or a zero point whose 2**N multiple could
    leave int64 is refused, not wrapped."""
    ones = np.ones(3, np.int64)
    with pytest.raises(ValueError, match="multiplier outside int32"):
        channels_last_blocks(ones, ones << 31, ones, 0)
    with pytest.raises(ValueError, match="could leave int64"):
        channels_last_blocks(ones, ones, ones * 62, 2)
