"""LUT unit: direct 8-bit tables, interpolated 16-bit tables, builders."""
import numpy as np
import pytest

from aipu.sim.golden import build_lut8, build_lut16, lut8, lut16


def test_lut8_raw_byte_index():
    table = np.arange(256, dtype=np.int16) * 2 - 300
    # int8 -1 is byte 0xFF = 255 -> 255*2 - 300 = 210; int8 -128 is byte 128 -> -44; 5 -> -290
    x = np.array([-1, -128, 5], dtype=np.int8)
    assert lut8(x, table).tolist() == [210, -44, -290]
    assert lut8(np.array([255, 0], np.uint8), table).tolist() == [210, -300]


def test_build_lut8_relu_like_and_rounding():
    # int8 input scale 0.5, zp -10 -> real = (x + 10) / 2; f = identity; out scale 1, zp 0, uint8.
    table = build_lut8(lambda v: v, in_scale=0.5, in_zero_point=-10, in_dtype=np.int8, out_scale=1.0,
                       out_zero_point=0, out_dtype=np.uint8)
    x = np.array([-11, -10, -9, -7, 127, -128], dtype=np.int8)
    # -0.5 -> -1 (away from zero) -> clamped 0; 0; 0.5 -> 1; 1.5 -> 2; 68.5 -> 69; -59 -> 0
    assert table.dtype == np.uint8 and lut8(x, table).tolist() == [0, 0, 1, 2, 69, 0]


def test_build_lut8_saturates_values_beyond_int64():
    """exp(127) / 0.01 exceeds int64: the entry saturates high, without numpy's warning of an invalid cast."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        table = build_lut8(np.exp, in_scale=1.0, in_zero_point=0, in_dtype=np.int8, out_scale=0.01,
                           out_zero_point=0, out_dtype=np.uint8)
    assert lut8(np.array([0, 1, 127], np.int8), table).tolist() == [100, 255, 255]


def test_lut16_interpolation_hand_worked():
    # k = 2 (5 entries), f = 3, input_min = -16: covers [-16, 16]; entries at -16, -8, 0, 8, 16
    table = np.array([0, 100, 101, -50, 7], dtype=np.int16)
    x = np.array([-16, -12, -11, -9, 3, 4, 16, 17, -17, 12], dtype=np.int16)
    # -12: u=4, i=0, r=4: 0 + round(100*4/8) = 50;  -11: r=5: 500/8 = 62.5 -> 63 (half up)
    # -9: r=7: 700/8 = 87.5 -> 88;  3: u=19, i=2, r=3: 101 + round(-151*3/8 = -56.625) = 101 - 57 = 44
    # 4: r=4: -604/8 = -75.5 -> half up -75 -> 26;  16: u=32 = top: entry 4 = 7;  17, -17: outside, ends
    # 12: u=28, i=3, r=4: -50 + round(57*4/8 = 28.5) = -50 + 29 = -21
    out, clipped = lut16(x, table, index_shift=3, input_min=-16, return_clipped=True)
    assert out.tolist() == [0, 50, 63, 88, 44, 26, 7, 7, 0, -21] and clipped == 2


def test_lut16_full_range_tanh_close_to_float():
    table = build_lut16(np.tanh, in_scale=1 / 4096, in_zero_point=0, out_scale=1 / 32767, out_zero_point=0,
                        index_bits=9)
    assert table.shape == (513,)
    x = np.arange(-32768, 32768, 97, dtype=np.int16)
    exact = np.tanh(x / 4096) * 32767
    got = lut16(x, table, index_shift=7).astype(np.float64)
    assert np.max(np.abs(got - exact)) < 40  # chord error of tanh on 128-step segments, in LSB
    out8 = lut16(x, table, index_shift=7, out_dtype=np.int8, qmin=-100, qmax=100)
    assert out8.dtype == np.int8 and out8.min() == -100 and out8.max() == 100


@pytest.mark.parametrize("call, error, match", [
    (lambda: lut8(np.zeros(3, np.int16), np.zeros(256, np.int8)), TypeError, "x must have dtype"),
    (lambda: lut8(np.zeros(3, np.int8), np.zeros(255, np.int8)), ValueError, r"shape \(256,\)"),
    (lambda: lut8(np.zeros(3, np.int8), np.zeros(256, np.int32)), TypeError, "table must have dtype"),
    (lambda: lut16(np.zeros(3, np.int16), np.zeros(6, np.int16), index_shift=3), ValueError, "2\\*\\*k \\+ 1"),
    (lambda: lut16(np.zeros(3, np.int16), np.zeros(2 ** 11 + 1, np.int16), index_shift=3), ValueError, "k in"),
    (lambda: lut16(np.zeros(3, np.int16), np.zeros(5, np.int16), index_shift=17), ValueError, "index_shift=17"),
    (lambda: lut16(np.zeros(3, np.int16), np.zeros(5, np.int16), index_shift=1, input_min=40000), ValueError,
     "input_min=40000"),
    (lambda: lut16(np.zeros(3, np.int8), np.zeros(5, np.int16), index_shift=1), TypeError, "x must have dtype"),
    (lambda: build_lut8(np.tanh, in_scale=0, in_zero_point=0, in_dtype=np.int8, out_scale=1, out_zero_point=0,
                        out_dtype=np.int8), ValueError, "in_scale=0"),
    (lambda: build_lut8(np.log, in_scale=1, in_zero_point=0, in_dtype=np.int8, out_scale=1, out_zero_point=0,
                        out_dtype=np.int8), ValueError, "finite"),
    (lambda: build_lut8(np.tanh, in_scale=1, in_zero_point=300, in_dtype=np.uint8, out_scale=1, out_zero_point=0,
                        out_dtype=np.int8), ValueError, "in_zero_point=300"),
    (lambda: build_lut16(np.tanh, in_scale=1, in_zero_point=0, out_scale=1, out_zero_point=0, index_bits=11),
     ValueError, "index_bits=11"),
])
def test_bad_lut_inputs(call, error, match):
    with pytest.raises(error, match=match):
        call()
