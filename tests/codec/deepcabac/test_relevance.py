"""Relevance: the user's μ and σ checked with one-line named refusals; the diagonal Fisher and the σ it gives."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aipu.codec.deepcabac.relevance import diagonal_fisher, fisher_relevance, user_relevance

QUICK = settings(max_examples=25, derandomize=True, deadline=None, database=None)
SHAPE = (4, 3)


@QUICK
@given(hnp.arrays(np.float32, SHAPE, elements=st.floats(-10, 10, width=32)),
       hnp.arrays(np.float64, SHAPE, elements=st.floats(1e-6, 1e6)))
def test_valid_user_relevance_is_kept_as_float64(mean, sigma):
    relevance = user_relevance("conv1.weight", mean, sigma, SHAPE)
    assert relevance.mean.dtype == relevance.sigma.dtype == np.float64
    assert np.array_equal(relevance.mean, mean) and np.array_equal(relevance.sigma, sigma)


def bad(field: str, value):
    arrays = {"mean": np.zeros(SHAPE), "sigma": np.ones(SHAPE), field: value}
    with pytest.raises(ValueError) as refusal:
        user_relevance("conv2.weight", arrays["mean"], arrays["sigma"], SHAPE)
    message = str(refusal.value)
    assert "\n" not in message and message.startswith("conv2.weight: ") and field in message
    return message


def with_value(value, position=(2, 1), base=1.0):
    array = np.full(SHAPE, base)
    array[position] = value
    return array


def test_invalid_user_relevance_is_refused_in_one_line_naming_tensor_and_field():
    assert bad("sigma", np.ones((3, 4))) == "conv2.weight: sigma has shape (3, 4), the weights (4, 3)"
    assert bad("mean", np.ones(12)) == "conv2.weight: mean has shape (12,), the weights (4, 3)"
    assert bad("sigma", with_value(0.0)) == "conv2.weight: sigma[2, 1] = 0.0 is not > 0"
    assert bad("sigma", with_value(-0.5, (0, 0))) == "conv2.weight: sigma[0, 0] = -0.5 is not > 0"
    assert bad("mean", with_value(np.nan, base=0.0)) == "conv2.weight: mean[2, 1] = nan is not finite"
    assert bad("sigma", with_value(np.inf)) == "conv2.weight: sigma[2, 1] = inf is not finite"
    assert "real numbers" in bad("sigma", np.full(SHAPE, "x"))


def test_without_a_shape_sigma_must_match_the_mean():
    with pytest.raises(ValueError, match=r"^fc: sigma has shape \(2,\), the weights \(3,\)$"):
        user_relevance("fc", np.zeros(3), np.ones(2))


def test_the_fisher_is_the_probability_weighted_mean_of_squared_gradients():
    samples = [(0.25, {"w": np.array([2.0, 0.0])}), (0.75, {"w": np.array([-1.0, 4.0])}),
               (0.0, {"w": np.array([100.0, 100.0])})]
    assert np.allclose(diagonal_fisher(samples)["w"], [0.25 * 4 + 0.75 * 1, 0.75 * 16])
    with pytest.raises(ValueError, match="no sample with a positive probability"):
        diagonal_fisher([(0.0, {"w": np.ones(2)})])
    with pytest.raises(ValueError, match=">= 0"):
        diagonal_fisher([(-0.1, {"w": np.ones(2)})])


def test_the_model_fisher_of_softmax_regression_matches_its_closed_form():
    """For logits W x, the model's Fisher of W[k, j] is the mean over x of p_k (1 - p_k) x_j²."""
    rng = np.random.default_rng(5)
    inputs, weights = rng.normal(size=(20, 4)), rng.normal(size=(3, 4))

    def samples():
        for x in inputs:
            p = np.exp(weights @ x)
            p /= p.sum()
            for label in range(3):
                yield p[label], {"W": np.outer(p - np.eye(3)[label], x)}

    probabilities = np.exp(inputs @ weights.T)
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    expected = np.mean((probabilities * (1 - probabilities))[:, :, None] * np.square(inputs)[:, None, :], axis=0)
    assert np.allclose(diagonal_fisher(samples())["W"], expected)


def test_fisher_sigma_shrinks_as_the_information_grows_and_stays_finite_at_zero():
    weights = {"a": np.array([0.1, -0.2, 0.3]), "b": np.array([[1.0, 2.0]])}
    fisher = {"a": np.array([0.0, 1.0, 4.0]), "b": np.array([[9.0, 1.0]])}
    relevance = fisher_relevance(weights, fisher, damping=0.1)
    epsilon = 0.1 * np.mean([0.0, 1.0, 4.0, 9.0, 1.0])
    assert np.allclose(relevance["a"].sigma, 1 / np.sqrt(fisher["a"] + epsilon))
    assert np.array_equal(relevance["b"].mean, weights["b"])
    assert relevance["a"].sigma[0] > relevance["a"].sigma[1] > relevance["a"].sigma[2]


def test_fisher_relevance_refuses_missing_negative_or_undamped_inputs():
    weights = {"a": np.zeros(2)}
    with pytest.raises(ValueError, match="^a: no Fisher information for this tensor$"):
        fisher_relevance(weights, {})
    with pytest.raises(ValueError, match="^a: fisher has a negative entry$"):
        fisher_relevance(weights, {"a": np.array([1.0, -1.0])})
    with pytest.raises(ValueError, match="^a: fisher has shape"):
        fisher_relevance(weights, {"a": np.ones(3)})
    with pytest.raises(ValueError, match="damping"):
        fisher_relevance(weights, {"a": np.ones(2)}, damping=0.0)
