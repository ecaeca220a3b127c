"""Quantize -> dequantize within each method's documented bound, codes inside their range, at every granularity
the method has (docs/quantization.md, the method table)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from aipu.quant import (Granularity, Int4QuantizeParameter, TrainableAlphaQuantization, codebook_dequantize,
                        codebook_parameters, codebook_quantize, fix_dequantize_activation, fix_quantize_activation,
                        fix_quantize_parameter, fix_dequantize_parameter, get_params_double_grid,
                        int4_activation_parameters, int4_quantize_activation, int4_quantize_parameter,
                        int4_recon_quantized_activation, int4_recon_quantized_parameter, linear_dequantize,
                        linear_parameters, linear_quantize, nonlinear_parameters, nonlinear_quantize,
                        partition, trainable_alpha_dequantize, trainable_alpha_quantize)
from aipu.quant.nonlinear import _mapped, mapped_dequantize

values = st.floats(-100, 100, allow_subnormal=False)
tensors = st.lists(arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 5)), elements=values),
                   min_size=1, max_size=3)
granularities = st.sampled_from([1, 2, 3, 4])
fast = settings(max_examples=40, deadline=None)


def _labels(x, granularity, data):
    if granularity != 4:
        return None
    return [data.draw(arrays(np.int64, t.shape, elements=st.integers(0, 3))) for t in x]


@fast
@given(tensors, granularities, st.integers(2, 12), st.booleans(), st.data())
def test_linear_round_trip_within_half_a_step(x, granularity, n, signed, data):
    labels = _labels(x, granularity, data)
    params = linear_parameters(x, n, granularity, signed, labels)
    codes = linear_quantize(x, params, labels)
    lo, hi = params.code_range
    units = partition(x, granularity, labels)
    error = np.abs(units.flatten(x) - units.flatten(linear_dequantize(codes, params, labels)))
    assert all(lo <= c.min() and c.max() <= hi for c in codes)
    assert np.all(error <= 0.5 / units.spread(params.x_scale) * (1 + 1e-9))


@fast
@given(tensors, granularities, st.integers(1, 8), st.data())
def test_codebook_reconstruction_is_a_nearest_centre(x, granularity, k, data):
    labels = _labels(x, granularity, data)
    params = codebook_parameters(x, k, granularity, labels)
    indices = codebook_quantize(x, params, labels)
    units = partition(x, granularity, labels)
    flat, rebuilt = units.flatten(x), units.flatten(codebook_dequantize(indices, params, labels))
    nearest = np.nanmin(np.abs(flat[:, None] - params.table()[units.unit]), axis=1)
    assert np.array_equal(np.abs(flat - rebuilt), nearest)


@fast
@given(tensors, granularities, st.integers(1, 8), st.sampled_from([1, 2, 3]), st.data())
def test_non_linear_within_half_a_step_in_the_mapped_domain(x, granularity, n, function, data):
    labels = _labels(x, granularity, data)
    x = [t / 50 for t in x]             # tanh(alpha * x) keeps its resolution
    params = nonlinear_parameters(x, n, function, granularity, 1.5, labels)
    codes, sign = nonlinear_quantize(x, params, labels)
    units, value = mapped_dequantize(codes, params, labels)
    mapped, used = _mapped(units.flatten(x), params.function, params.alpha)
    assert all(0 <= c.min() and c.max() <= 2 ** n - 1 for c in codes)
    bound = units.spread(params.w_scale) / 2 * (1 + 1e-9) + 1e-12
    assert np.all(np.abs(mapped - value)[used] <= bound[used])


@fast
@given(arrays(np.float64, st.integers(1, 30), elements=values), st.sampled_from([0, 1]), st.integers(2, 16))
def test_fixed_point_unsaturated_within_half_a_step(t, method, n):
    w_q, b_q, record = fix_quantize_parameter(t, t[::-1], method, n)
    w, b = fix_dequantize_parameter(w_q, b_q, record)
    lo, hi = -2 ** (n - 1), 2 ** (n - 1) - 1
    assert lo <= w_q.min() and w_q.max() <= hi and lo <= b_q.min() and b_q.max() <= hi
    assert record.b_p == record.w_p or method == 1      # the reversed bias has the same extremes
    inside = (w_q > lo) & (w_q < hi)
    assert np.all(np.abs(w - t)[inside] <= 2.0 ** (-record.w_p - 1))
    if method == 0:
        assert np.all(np.abs(w - t) <= 2.0 ** (-record.w_p - 1))     # non-overflow never saturates


@fast
@given(st.lists(arrays(np.float64, 6, elements=values), min_size=1, max_size=5), st.sampled_from(["mode", "max"]))
def test_fixed_point_activation_position_is_one_of_the_batches(batches, selection):
    codes, record = fix_quantize_activation(batches[0], batches, 0, 8, selection)
    assert record.x_p in {fix_quantize_activation(b, [b])[1].x_p for b in batches}
    assert np.all(np.abs(fix_dequantize_activation(codes, record)) <= 128 * 2.0 ** -record.x_p)


@fast
@given(arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
              elements=values), st.booleans())
def test_int4_dual_error_at_most_single_error(w, offset_w):
    k = w.shape[0]
    steps = np.maximum(np.abs(w).reshape(k, -1).max(axis=1) * 2 / 15, 1e-3)
    single, _, single_record = int4_quantize_parameter(w, [[s] for s in steps], offset_w)
    dual, _, dual_record = int4_quantize_parameter(w, [[s, s / 16] for s in steps], offset_w)
    lo, hi = single_record.code_range
    assert lo <= dual.min() and dual.max() <= hi and dual.shape[0] == 2
    single_error = np.abs(int4_recon_quantized_parameter(single, single_record)[0] - w)
    dual_error = np.abs(int4_recon_quantized_parameter(dual, dual_record)[0] - w)
    assert np.all(dual_error <= single_error + 1e-12)


@fast
@given(arrays(np.float64, st.integers(1, 40), elements=values), st.booleans(), st.booleans())
def test_int4_activation_planes_within_their_range_and_dual_no_worse(x, dual, offset_act):
    params = int4_activation_parameters(x, dual, offset_act)
    planes = int4_quantize_activation(x, params)
    for plane, (_, _, (lo, hi)) in zip(planes, params.planes()):
        assert lo <= plane.min() and plane.max() <= hi
    first = type(params)(params.sf_act_list[:1], params.offset_act_list[:1])
    first_error = np.sum((int4_recon_quantized_activation(planes[:1], first) - x) ** 2)
    assert np.sum((int4_recon_quantized_activation(planes, params) - x) ** 2) <= first_error + 1e-9


@fast
@given(tensors, granularities, st.integers(2, 12), st.data())
def test_trained_clipping_within_half_a_step_inside_alpha(x, granularity, n, data):
    labels = _labels(x, granularity, data)
    units = partition(x, granularity, labels)
    alpha = data.draw(st.lists(st.floats(0.5, 200), min_size=units.count, max_size=units.count))
    params = TrainableAlphaQuantization(tuple(alpha), Granularity(granularity), n)
    codes = units.flatten(trainable_alpha_quantize(x, params, labels))
    flat, step = units.flatten(x), units.spread(alpha) / (2 ** (n - 1) - 1)
    rebuilt = codes * step
    assert np.allclose(rebuilt, units.flatten(trainable_alpha_dequantize(units.join(codes), params, labels)),
                       rtol=1e-12, atol=0)
    inside = np.abs(flat) <= units.spread(alpha)
    assert np.abs(codes).max() <= 2 ** (n - 1) - 1
    assert np.all(np.abs(rebuilt - flat)[inside] <= step[inside] / 2 * (1 + 1e-9))


def test_double_grid_picks_the_lowest_first_code_on_a_tie():
    # 0.5 = a * 0.5 + (2 - 2a) * 0.25 exactly for every a in [-2, 5]: the lowest, a = -2, wins
    q1, q2 = get_params_double_grid(np.array([0.5]), 0.5, 0.25, -8, 7)
    assert (q1[0], q2[0]) == (-2, 6)


def test_int4_record_checks_its_steps():
    with pytest.raises(ValueError, match="sf_w_list"):
        Int4QuantizeParameter(((0.1, 0.2, 0.3),))
