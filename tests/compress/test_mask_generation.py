"""Mask generation of T/AI 115.1-2021 §9.5 on weight matrices: magnitude masks, eq. (50) and the ADMM steps,
the incremental regularisation's ranks, Reg_func, update and Offer_mask (docs/pruning.md)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from aipu.compress import (PruneGranularity, admm_converged, admm_penalty_gradient, admm_update, averaged_ranks,
                           column_ranks, group_soft_threshold, magnitude_mask, offer_mask, reg_func,
                           regularisation_gradient, row_mask, sparsity, update_regularisation)
from aipu.compress.mask_generation import pruned_count
from aipu.sim.machine.errors import InputError

fast = settings(max_examples=60, deadline=None)
matrices = arrays(np.float64, st.tuples(st.integers(1, 6), st.integers(1, 6)), elements=st.floats(-10, 10))


@fast
@given(matrices, st.floats(0, 5))
def test_group_soft_threshold_shrinks_each_row_by_lambda_along_itself(u, lam):
    """Eq. (50): a row of norm n becomes the same direction with norm max(n - lambda, 0)."""
    f = group_soft_threshold(u, lam)
    norms, new = np.linalg.norm(u, axis=1), np.linalg.norm(f, axis=1)
    assert np.allclose(new, np.maximum(norms - lam, 0), atol=1e-9)
    assert np.allclose(f * norms[:, None], u * new[:, None], atol=1e-6)
    assert np.array_equal(row_mask(f), (new > 0).astype(np.uint8))


def test_group_soft_threshold_example():
    """A (3, 4)-(4, 3) row of norm 5 at lambda 2 keeps 3/5 of itself; a row of norm 1 vanishes."""
    f = group_soft_threshold(np.array([[3.0, 4.0], [0.6, 0.8], [0.0, 0.0]]), 2.0)
    assert np.allclose(f, [[1.8, 2.4], [0, 0], [0, 0]])


def test_admm_steps():
    """Steps c) to g): T = F - K/2 gives the penalty gradient W - T; U = W + K/2 is thresholded into F, then
    K = K + W - F; and the stopping test."""
    w, k = np.array([[3.0, 4.0], [0.3, 0.4]]), np.array([[0.2, 0.0], [0.0, 0.2]])
    f, k_new = admm_update(w, k, 1.0)
    assert np.allclose(f, group_soft_threshold(w + 0.5 * k, 1.0)) and np.allclose(k_new, k + w - f)
    assert np.allclose(admm_penalty_gradient(w, f, k), w - f + 0.5 * k)
    assert np.array_equal(row_mask(f), [1, 0])
    assert admm_converged(w, f, f, 0.0) and not admm_converged(w, f, f + 1, 1e-3)


@fast
@given(matrices, st.floats(0, 0.95), st.sampled_from(["l1", "l2"]), st.sampled_from([2, 3]))
def test_magnitude_mask_removes_the_weakest_groups(w, ratio, criterion, granularity):
    mask = magnitude_mask(w, ratio, granularity, criterion=criterion)
    axis = 1 if granularity == 2 else 0
    norms = np.abs(w).sum(axis=axis) if criterion == "l1" else np.linalg.norm(w, axis=axis)
    assert mask.size - mask.sum() == pruned_count(mask.size, ratio) and mask.sum() >= 1
    if 0 < mask.sum() < mask.size:
        assert norms[mask == 0].max() <= norms[mask == 1].min()


def test_magnitude_mask_example_and_ties():
    w = np.array([[1.0, -1.0], [0.5, 0.5], [3.0, 0.0], [0.0, 1.0]])    # L1 norms 2, 1, 3, 1
    assert np.array_equal(magnitude_mask(w, 0.5, PruneGranularity.ROW), [1, 0, 1, 0])
    assert np.array_equal(magnitude_mask(w, 0.25, PruneGranularity.ROW), [1, 0, 1, 1])   # tie: lower index
    assert np.array_equal(magnitude_mask(w, 0.5, PruneGranularity.COLUMN), [1, 0])


def test_column_ranks_and_their_average():
    """Step 4.2: rank 0 is the smallest L1 column; the average over iterations is ranked again."""
    first = np.array([[1.0, 5.0, 2.0]])
    second = np.array([[3.0, 5.0, 2.0]])
    assert np.array_equal(column_ranks(first), [0, 2, 1]) and np.array_equal(column_ranks(second), [1, 2, 0])
    assert np.array_equal(averaged_ranks([column_ranks(first), column_ranks(second)]), [0, 2, 1])


def test_reg_func_gives_the_least_important_columns_the_largest_increments():
    increments = reg_func(np.arange(40), 0.5, 1.0)
    assert increments[0] == 1.0 and np.all(np.diff(increments) <= 0) and np.all(np.diff(increments[20:]) < 0)
    assert np.all(increments[:20] >= 0.1) and np.isclose(increments[19], 0.1) and np.isclose(increments[17], 0.15)
    assert np.all(increments[20:] <= 0) and np.isclose(increments[-1], -0.25)


def test_update_regularisation_masks_a_column_at_the_target_and_freezes_it():
    reg, mask = update_regularisation(np.array([0.9, 0.1, 0.0]), np.array([0.2, -0.5, 0.3]), [1, 1, 1], 1.0)
    assert np.allclose(reg, [1.1, 0.0, 0.3]) and np.array_equal(mask, [0, 1, 1])
    reg, mask = update_regularisation(reg, np.array([5.0, 5.0, 0.0]), mask, 1.0)
    assert np.allclose(reg, [1.1, 5.0, 0.3]) and np.array_equal(mask, [0, 0, 1])
    assert sparsity(mask) == pytest.approx(2 / 3)
    assert np.allclose(regularisation_gradient(np.array([[1.0, 2.0, 3.0]]), reg), [[1.1, 10.0, 0.9]])


def test_offer_mask():
    a, b = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([5.0, 6.0])
    sparse_a, sparse_b = offer_mask(a, np.array([0, 1]), b, np.array([1, 0]))
    assert np.array_equal(sparse_a, [[0, 2], [0, 4]]) and np.array_equal(sparse_b, [5, 0])
    with pytest.raises(InputError):
        offer_mask(a, np.ones(3))


@pytest.mark.parametrize("call", [lambda: magnitude_mask(np.ones((2, 2)), 1.0),
                                  lambda: magnitude_mask(np.ones((2, 2)), 0.5, criterion="l3"),
                                  lambda: magnitude_mask(np.ones((2, 2)), 0.5, 4),
                                  lambda: group_soft_threshold(np.ones((2, 2)), -1.0),
                                  lambda: reg_func(np.arange(3), 1.0, 1.0)])
def test_bad_arguments_are_refused(call):
    with pytest.raises(InputError):
        call()
