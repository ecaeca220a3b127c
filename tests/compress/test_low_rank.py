"""Low-rank weights (T/AI 115.1-2021 §7.4.3, §8.4.3, §9.6.3.2): the ranks of eqs. (51)-(52), SVD and BTD
factors and their reconstructions, exactness at full rank, and the gradients the fine-tuning takes."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.compress import low_rank

QUICK = settings(max_examples=30, derandomize=True, deadline=None, database=None)


@QUICK
@given(st.integers(1, 64), st.integers(1, 64), st.floats(0.05, 1.0))
def test_eq52_core_size_keeps_at_most_the_ratio(outputs, inputs, ratio):
    core = low_rank.core_size_for_ratio(outputs, inputs, ratio)
    kept = core * (outputs + inputs)
    assert core == 1 or kept <= ratio * outputs * inputs
    assert (core + 1) * (outputs + inputs) > ratio * outputs * inputs


@QUICK
@given(st.integers(4, 64), st.integers(4, 64), st.sampled_from([1, 9, 25]), st.floats(0.1, 1.0),
       st.sampled_from([1, 2, 4]))
def test_eq51_ranks_are_multiples_of_groups_and_keep_at_most_the_ratio(out_channels, in_channels, taps, ratio, groups):
    rank_in, rank_out = low_rank.ranks_for_ratio(out_channels, in_channels, taps, ratio, groups)
    assert rank_in % groups == 0 and rank_out % groups == 0 and rank_in >= groups and rank_out >= groups
    kept = rank_in * in_channels + rank_out * (rank_in // groups) * taps + out_channels * rank_out
    if rank_in > groups and rank_out > groups:
        assert kept <= ratio * out_channels * in_channels * taps * (1 + 1e-9)


def test_svd_keeps_the_leading_singular_values():
    rng = np.random.default_rng(0)
    matrix = rng.normal(size=(12, 20))
    w1, w2 = low_rank.svd_process(matrix, 5)
    assert w1.shape == (5, 20) and w2.shape == (12, 5)
    sigma = np.linalg.svd(matrix, compute_uv=False)
    error = np.linalg.norm(matrix - low_rank.svd_decompression(w1, w2))
    assert math.isclose(error, math.sqrt(np.sum(sigma[5:] ** 2)), rel_tol=1e-9)      # Eckart-Young
    assert np.allclose(low_rank.svd_decompression(*low_rank.svd_process(matrix, 12)), matrix)


def test_btd_recovers_a_tensor_of_its_ranks_and_reconstructs_what_it_reports():
    rng = np.random.default_rng(1)
    a, core, b = rng.normal(size=(16, 3)), rng.normal(size=(3, 4, 9)), rng.normal(size=(8, 4))
    weight = np.einsum("oa,abs,cb->ocs", a, core, b).reshape(16, 8, 3, 3)
    terms = low_rank.btd_process(weight, (4, 3), 1)
    assert terms.first.shape == (4, 8, 1, 1) and terms.middle.shape == (3, 4, 3, 3) and terms.last.shape == (16, 3, 1, 1)
    assert terms.relative_error < 1e-9 and np.allclose(low_rank.btd_decompression(terms), weight)


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_btd_error_is_the_reconstructions_and_falls_with_more_rank(groups):
    weight = np.random.default_rng(2).normal(size=(16, 8, 3, 3))
    errors = []
    for ranks in ((4, 8), (8, 16)):
        terms = low_rank.btd_process(weight, ranks, groups)
        rebuilt = low_rank.btd_decompression(terms)
        assert math.isclose(terms.relative_error, np.linalg.norm(weight - rebuilt) / np.linalg.norm(weight),
                            rel_tol=1e-9)
        errors.append(terms.relative_error)
    assert errors[1] < errors[0] and terms.iterations <= low_rank.MAX_ITERATIONS
    full = low_rank.btd_process(weight, (8, 16), 1)
    assert full.relative_error < 1e-9


def _directional(function, arrays, directions, step=1e-6):
    plus = function(*[a + step * d for a, d in zip(arrays, directions)])
    minus = function(*[a - step * d for a, d in zip(arrays, directions)])
    return (plus - minus) / (2 * step)


def test_the_factor_gradients_are_the_chain_rule_through_the_reconstruction():
    rng = np.random.default_rng(3)
    upstream = rng.normal(size=(6, 10))
    w1, w2 = rng.normal(size=(3, 10)), rng.normal(size=(6, 3))
    grads = low_rank.svd_gradients(w1, w2, upstream)
    directions = [rng.normal(size=w1.shape), rng.normal(size=w2.shape)]
    expected = _directional(lambda p, q: np.sum(upstream * low_rank.svd_decompression(p, q)), [w1, w2], directions)
    assert math.isclose(sum(np.sum(g * d) for g, d in zip(grads, directions)), expected, rel_tol=1e-6)

    terms = low_rank.btd_process(rng.normal(size=(8, 6, 3, 3)), (4, 4), 2)
    upstream = rng.normal(size=(8, 6, 3, 3))
    grads = low_rank.btd_gradients(terms, upstream)
    arrays = [terms.first, terms.middle, terms.last]
    directions = [rng.normal(size=array.shape) for array in arrays]

    def loss(first, middle, last):
        return np.sum(upstream * low_rank.btd_decompression(low_rank.BlockTerms(first, middle, last, 2, 0.0, 0)))

    assert math.isclose(sum(np.sum(g * d) for g, d in zip(grads, directions)),
                        _directional(loss, arrays, directions), rel_tol=1e-6)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="ratio"):
        low_rank.core_size_for_ratio(4, 4, 0.0)
    with pytest.raises(ValueError, match="core_size 5"):
        low_rank.svd_process(np.ones((4, 4)), 5)
    with pytest.raises(ValueError, match="multiples of groups"):
        low_rank.btd_process(np.ones((4, 4, 3, 3)), (3, 4), 2)
    with pytest.raises(ValueError, match="must not exceed"):
        low_rank.btd_process(np.ones((4, 4, 3, 3)), (8, 4), 1)
