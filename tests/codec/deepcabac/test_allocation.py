"""The RD quantizer's per-layer steps: candidates, their true bits, Lagrangian choices that trade bits for
distortion monotonically, relevance that buys a layer finer steps, and every allocation reached between
breakpoints."""
from __future__ import annotations

import math

import numpy as np
import pytest

from aipu.codec.deepcabac import decode_layer, encode_layer
from aipu.codec.deepcabac.allocation import (COARSEST_LEVEL, FINEST_LEVEL, STEP_BITS, StepChoice, allocate,
                                             breakpoints, candidate_steps, step_choices)


def layers(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"a": rng.laplace(0.0, 1.0, (8, 36)), "b": rng.laplace(0.0, 0.2, (16, 18)), "c": rng.normal(0, 1, 40)}


@pytest.fixture(scope="module")
def choices():
    return {name: step_choices(weights) for name, weights in layers().items()}


def test_candidate_steps_span_the_levels_geometrically():
    steps = candidate_steps(np.array([0.5, -4.0, 1.0]))
    assert math.isclose(steps[0], 4.0 / COARSEST_LEVEL) and math.isclose(steps[-1], 4.0 / FINEST_LEVEL)
    ratios = np.array(steps[:-1]) / np.array(steps[1:])
    assert np.allclose(ratios, ratios[0]) and ratios[0] > 1
    assert candidate_steps(np.zeros(5)) == [1.0]


def test_a_choice_counts_the_bits_the_coder_writes_and_the_levels_it_decodes(choices):
    weights = layers()["a"]
    for choice in choices["a"][::8]:
        payload = encode_layer(choice.levels)
        assert choice.bits == 8 * len(payload) + STEP_BITS
        assert np.array_equal(decode_layer(payload, weights.shape), choice.levels)
        assert math.isclose(choice.distortion, float(np.sum((weights - choice.levels * choice.step) ** 2)))


def test_a_larger_lambda_never_buys_more_bits_or_less_distortion(choices):
    totals = []
    for lam in [0.0, *np.geomspace(1e-4, 10.0, 25)]:
        chosen = allocate(choices, float(lam))
        totals.append((sum(c.bits for c in chosen.values()), sum(c.distortion for c in chosen.values())))
    bits, distortion = zip(*totals)
    assert list(bits) == sorted(bits, reverse=True) and list(distortion) == sorted(distortion)
    assert bits[0] > 2 * bits[-1]


def test_lambda_zero_takes_each_layers_least_distortion(choices):
    chosen = allocate(choices, 0.0)
    for name, options in choices.items():
        assert chosen[name].distortion == min(choice.distortion for choice in options)


def test_a_more_relevant_layer_gets_more_bits():
    weights = layers(3)
    lam = 0.05
    plain = allocate({name: step_choices(values) for name, values in weights.items()}, lam)
    sigma = {name: np.full(values.shape, 0.25 if name == "b" else 1.0) for name, values in weights.items()}
    relevant = allocate({name: step_choices(values, sigma[name]) for name, values in weights.items()}, lam)
    assert relevant["b"].bits > plain["b"].bits
    assert all(relevant[name].step == plain[name].step for name in ("a", "c"))


def test_every_allocation_lies_between_two_breakpoints(choices):
    slopes = breakpoints(choices)
    assert slopes == sorted(slopes) and all(slope > 0 for slope in slopes)
    probes = [slopes[0] / 2, *np.sqrt(np.multiply(slopes[:-1], slopes[1:])), slopes[-1] * 2]
    between = {tuple(c.step for c in allocate(choices, float(lam)).values()) for lam in probes}
    dense = {tuple(c.step for c in allocate(choices, float(lam)).values()) for lam in np.geomspace(
        slopes[0] / 4, slopes[-1] * 4, 4000)}
    assert dense <= between and len(between) == len(probes)


def test_the_hull_skips_dominated_and_concave_candidates():
    levels = np.zeros(1, np.int32)
    options = [StepChoice(1.0, levels, bits, distortion)
               for bits, distortion in ((10, 100.0), (20, 60.0), (30, 10.0), (40, 9.0), (50, 9.5))]
    assert breakpoints({"x": options}) == [pytest.approx(0.1), pytest.approx(4.5)]


def test_bad_arguments_are_refused_in_one_line():
    with pytest.raises(ValueError, match="sigma has shape"):
        step_choices(np.ones((2, 3)), np.ones(6))
    with pytest.raises(ValueError, match="sigma must be finite and > 0"):
        step_choices(np.ones(3), np.array([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="lambda"):
        allocate({}, -1.0)
    with pytest.raises(ValueError, match="lambda"):
        allocate({}, math.inf)
