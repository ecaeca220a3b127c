"""RDOQ: rounding at λ = 0, fewer bits as λ grows, distortion moved to low-relevance weights, levels the
unchanged coder round-trips, and a rate counter that follows the real encoder."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aipu.codec.deepcabac import DeepCabacOptions, decode_layer, encode_layer
from aipu.codec.deepcabac.rdoq import RateCounter, candidate_levels, layer_step, rdoq_layer, uniform_levels
from aipu.codec.deepcabac.reference.layer_coder import Neighbourhood, code_level

QUICK = settings(max_examples=25, derandomize=True, deadline=None, database=None)
WEIGHTS = hnp.arrays(np.float64, st.tuples(st.integers(1, 4), st.integers(1, 12)),
                     elements=st.floats(-4, 4, allow_nan=False, width=32))
TERMINATION_BITS = 24       # the flush, the stop bit and the padding to a byte


def laplace_layer(seed: int, shape=(12, 40)) -> np.ndarray:
    return np.random.default_rng(seed).laplace(0.0, 1.0, shape)


@QUICK
@given(WEIGHTS, st.floats(0.05, 2.0), st.booleans())
def test_lambda_zero_is_plain_rounding(weights, step, weighted):
    sigma = np.linspace(0.1, 3.0, weights.size).reshape(weights.shape) if weighted else None
    result = rdoq_layer(weights, step, 0.0, sigma)
    assert np.array_equal(result.levels, uniform_levels(weights, step))


def test_candidates_are_the_nearest_level_its_other_neighbour_and_zero():
    assert candidate_levels(2.3) == [2, 3, 0]
    assert candidate_levels(2.7) == [3, 2, 0]
    assert candidate_levels(-1.6) == [-2, -1, 0]
    assert candidate_levels(0.4) == [0, 1]
    assert candidate_levels(3.0) == [3, 0]


@pytest.mark.parametrize("seed", range(3))
def test_a_larger_lambda_never_makes_the_payload_larger(seed):
    weights = laplace_layer(seed)
    step = layer_step(weights, 6)
    sizes = [len(encode_layer(rdoq_layer(weights, step, alpha * step * step).levels))
             for alpha in (0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)]
    assert sizes == sorted(sizes, reverse=True) and sizes[-1] < sizes[0] / 2


def test_sigma_moves_the_error_to_the_less_relevant_weights():
    weights = laplace_layer(7)
    step = layer_step(weights, 4)
    relevant = np.zeros(weights.shape, bool)
    relevant[:, ::2] = True                     # every other column: σ = 0.3, the others σ = 3 (plain: σ = 1)
    sigma = np.where(relevant, 0.3, 3.0)
    lam = 0.3 * step * step
    plain = rdoq_layer(weights, step, lam)
    weighted = rdoq_layer(weights, step, lam, sigma)

    def squared_error(result, where):
        return float(np.square(weights - result.levels * step)[where].sum())

    assert squared_error(weighted, relevant) < squared_error(plain, relevant)
    assert squared_error(weighted, ~relevant) > squared_error(plain, ~relevant)
    assert squared_error(weighted, relevant) < squared_error(weighted, ~relevant) / 4


OPTION_SETS = [DeepCabacOptions(), DeepCabacOptions(sig_context="template", sign_context="previous"),
               DeepCabacOptions(sig_context="distance", estimator="hevc", greater_above="shared", greater_split=3),
               DeepCabacOptions(estimator="dual_rate", greater_above="bypass", greater_split=2)]


@pytest.mark.parametrize("options", OPTION_SETS, ids=["default", "template", "distance-hevc", "dual-rate"])
def test_the_coder_decodes_exactly_the_rdoq_levels_in_about_the_estimated_bits(options):
    weights = laplace_layer(3, (6, 30))
    step = layer_step(weights, 8)
    result = rdoq_layer(weights, step, 0.1 * step * step, options=options)
    payload = encode_layer(result.levels, options)
    assert np.array_equal(decode_layer(payload, weights.shape, options), result.levels)
    assert 0 <= 8 * len(payload) - result.estimated_bits <= TERMINATION_BITS


@QUICK
@given(WEIGHTS, st.floats(0.05, 1.0), st.floats(0.0, 2.0))
def test_rdoq_levels_round_trip_for_any_layer(weights, step, alpha):
    result = rdoq_layer(weights, step, alpha * step * step)
    assert np.array_equal(decode_layer(encode_layer(result.levels), weights.shape), result.levels)
    assert np.all(np.abs(result.levels - weights / step) < 1 + 1e-9) or alpha > 0


@QUICK
@given(WEIGHTS, st.floats(0.05, 1.0), st.floats(0.0, 5.0))
def test_within_sigma_keeps_every_moved_level_inside_one_sigma(weights, step, alpha):
    sigma = np.full(weights.shape, 0.7 * step)
    result = rdoq_layer(weights, step, alpha * step * step, sigma, max_distortion=1.0)
    moved = result.levels != uniform_levels(weights, step)
    assert np.all(np.abs(weights - result.levels * step)[moved] <= sigma[moved] + 1e-12)


def test_a_trial_leaves_the_counter_as_it_was():
    counter = RateCounter.fresh(DeepCabacOptions())
    levels = [3, -1, 0, 0, 7, 2]
    around = Neighbourhood(levels, 6)
    for index, level in enumerate(levels[:4]):
        around.column, around.previous = index, level
        code_level(counter, DeepCabacOptions(), around, level)
    state = (counter.bits, counter.range)
    around.column = 4
    first = counter.trial()
    code_level(first, DeepCabacOptions(), around, 7)
    second = counter.trial()
    code_level(second, DeepCabacOptions(), around, 7)
    assert (counter.bits, counter.range) == state and first.bits == second.bits > 0


def test_bad_arguments_are_refused():
    weights = np.ones((2, 3))
    with pytest.raises(ValueError, match="sigma has shape"):
        rdoq_layer(weights, 0.5, 1.0, np.ones(6))
    with pytest.raises(ValueError, match="step must be finite"):
        rdoq_layer(weights, 0.0, 1.0)
    with pytest.raises(ValueError, match="lambda >= 0"):
        rdoq_layer(weights, 0.5, -1.0)
    with pytest.raises(ValueError, match="max_level"):
        layer_step(weights, 0)
