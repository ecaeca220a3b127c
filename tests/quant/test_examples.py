"""The standard's own examples (T/AI 115.1-2021 Table 180, §7.2.3.2's p = 1, Table 195, §9.4.1.4's centres) and
the derived vectors D1-D4, D6-D8, D10-D13 of the digest, each computed by hand from the pinned conventions."""
import numpy as np
import pytest

from aipu.quant import (BRelu, CodebookQuantization, Int4QuantizeActivation, TrainableAlphaQuantization,
                        brelu_infer, codebook_dequantize, codebook_quantize, fix_dequantize_parameter,
                        fix_quantize_parameter, int4_quantize_activation, int4_quantize_parameter,
                        int4_recon_quantized_activation, int4_recon_quantized_parameter, mul_shift, mul_shift_f,
                        n_sigma_bound, nonlinear_dequantize, nonlinear_parameters, nonlinear_quantize,
                        quantize_tensor, scale_synchronization, scale_synchronization_parameters,
                        trainable_alpha_quantize)
from aipu.quant.brelu import N_SIGMA_PERCENTILE
from aipu.quant.fixed_point import calc_quantized_value
from aipu.sim.golden import rounding_shift_right


@pytest.mark.parametrize("p, scale, low, high", [(-2, 4, -512, 508), (-1, 2, -256, 254), (0, 1, -128, 127),
                                                 (1, 0.5, -64, 63.5), (2, 0.25, -32, 31.75), (3, 0.125, -16, 15.875),
                                                 (4, 0.0625, -8, 7.9375)])
def test_table_180_position_scale_and_range(p, scale, low, high):
    dequantized, codes = calc_quantized_value(np.array([-1e6, 1.0 * scale, 1e6]), p, 8)
    assert codes[1] == 1 and dequantized[1] == scale
    assert (dequantized[0], dequantized[2]) == (low, high)


def test_table_195_percentiles_and_n_sigma():
    assert N_SIGMA_PERCENTILE == {3.0: 0.99865, 3.2: 0.99921, 3.5: 0.99977}
    values = np.arange(100000.0)
    assert [n_sigma_bound(values, n) for n in (3, 3.2, 3.5)] == [99865.0, 99921.0, 99977.0]


def test_d1_non_overflow_and_min_diff_agree():
    t = np.array([0.9, -0.31, 0.02, 0.13, -0.07, 0.05])
    for method in (0, 1):
        w_q, _, record = fix_quantize_parameter(t, method=method)
        assert record.w_p == 7 and w_q.tolist() == [115, -40, 3, 17, -9, 6]
    assert fix_dequantize_parameter(w_q, None, record)[0].tolist() == [0.8984375, -0.3125, 0.0234375, 0.1328125,
                                                                        -0.0703125, 0.046875]


def test_d2_min_diff_with_the_clip_keeps_p_5_and_without_it_would_pick_p_8():
    t = np.array([3.7, -0.2, 0.11, 0.05, -0.04, 0.09, 0.01, -0.12])
    assert [quantize_tensor(t, method)[1] for method in (0, 1)] == [5, 5]
    assert quantize_tensor(t, 1)[0].tolist() == [118, -6, 4, 2, -1, 3, 0, -4]
    unclipped = {p: np.sum((t - np.round(t * 2.0 ** p) * 2.0 ** -p) ** 2) for p in range(5, 9)}
    assert min(unclipped, key=unclipped.get) == 8       # the literal (unsaturated) Table 181 choice
    assert np.abs(np.round(t * 2.0 ** 8)).max() > 127


def test_d3_d4_single_and_dual_int4():
    w = np.array([0.83, -0.41, 0.07, -0.95])
    assert int4_quantize_parameter(w, [0.12])[0][0].tolist() == [7, -3, 1, -8]
    planes, _, record = int4_quantize_parameter(w, [0.12, 0.013])
    assert planes.tolist() == [[7, -3, 1, -8], [-1, -4, -4, 1]]
    assert np.allclose(int4_recon_quantized_parameter(planes, record)[0], [0.827, -0.412, 0.068, -0.947])


def test_d6_brelu_mul_shift_and_stage_3():
    for bound_i, expected in [(200, (41, 6)), (1000, (263, 11)), (37, (111, 5)), (5000, (105, 12))]:
        mul, shift = mul_shift(bound_i)
        assert (mul, shift) == expected and (bound_i * mul) >> shift == 128
    params = BRelu(3.0, 1.0, 0.0, 200.0, 1, 200, 41, 6)
    x = np.array([-5, 0, 57, 199, 200, 450])
    assert brelu_infer(x, params).tolist() == [0, 0, 37, 127, 128, 128]
    assert ((200 + 32) * 41) >> 6 == 148                # the literal Table 196 order, which is wrong
    signed = BRelu(3.0, 1.0, 0.0, 200.0, 1, 200, 41, 6, signed_output=True)
    assert brelu_infer(x, signed).tolist() == [0, 0, 37, 127, 127, 127]


def test_brelu_stage_3_is_the_golden_requantizer_formula():
    params = BRelu(3.0, 1.0, 0.0, 1000.0, 1, 1000, 263, 11)
    x = np.arange(-50, 1200, dtype=np.int64)
    formula = (np.clip(x, 0, 1000) * 263 + 2 ** 10) >> 11
    assert np.array_equal(brelu_infer(x, params), formula)
    assert np.array_equal(formula, rounding_shift_right(np.clip(x, 0, 1000) * 263, 11, "half_up"))


def test_d7_mul_shift_f():
    assert [mul_shift_f(s) for s in (1.5, 0.37, 3.0, 0.8)] == [(21, 5), (11, 2), (21, 6), (5, 2)]


def test_d8_scale_alignment():
    record, aligned, folded = scale_synchronization_parameters([0.05, 0.08], w_scales=[0.5, 0.25])
    assert record.params == ((1, 0), (13, 3))
    assert aligned == [0.05, 0.08125] and np.isclose(folded[1], 0.25 * 0.08125 / 0.08)
    reference, other = scale_synchronization([np.array([3]), np.array([100, -100, 37, 1000])], record)
    assert reference.tolist() == [3] and other.tolist() == [163, -162, 60, 1625]


def test_d10_codebook_with_the_example_centres_and_an_exact_tie():
    params = CodebookQuantization(((-0.45, 0.0, 0.45),), 1)
    indices = codebook_quantize(np.array([0.3, -0.2, 0.225, -0.5, 0.1]), params)
    assert indices.tolist() == [2, 1, 1, 0, 1]
    assert codebook_dequantize(indices, params).tolist() == [0.45, 0.0, 0.0, -0.45, 0.0]


def test_d11_int4_activation_residual_planes():
    params = Int4QuantizeActivation((0.25, 0.02), (None, None))
    planes = int4_quantize_activation(np.array([1.93, -0.44, 0.71, -1.2]), params)
    assert planes.tolist() == [[7, -2, 3, -5], [7, 3, -2, 3]]
    assert np.allclose(int4_recon_quantized_activation(planes, params), [1.89, -0.44, 0.71, -1.19])


def test_d12_trained_clipping_stays_in_int8():
    codes = trainable_alpha_quantize(np.array([2.5, -3.0, 1.0]), TrainableAlphaQuantization((2.0,), 2, 8))
    assert codes.tolist() == [127, -127, 64]


def test_d13_non_linear_with_the_linear_map():
    w = np.array([-0.5, 0.1, 0.3, 0.7])
    params = nonlinear_parameters(w, 3)
    assert np.isclose(params.w_scale[0], 1.2 / 7) and np.isclose(params.w_offset[0], 2.9166666666666665)
    codes, sign = nonlinear_quantize(w, params)
    assert codes.tolist() == [0, 4, 5, 7] and sign is None
    assert np.allclose(nonlinear_dequantize(codes, params), [-0.5, 0.185714, 0.357143, 0.7], atol=1e-6)
