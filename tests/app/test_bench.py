"""The benchmarks' helpers (app/bench/): the weight sets they time and the statistics they print."""
from __future__ import annotations

import numpy as np

from aipu.app.bench.codec import SHAPES, order0_entropy_bits, trained_like_weights


def test_benchmark_helpers():
    assert order0_entropy_bits(np.array([0, 0, 1, 1])) == 4.0
    weights = trained_like_weights()
    assert {name: w.shape for name, w in weights.items()} == SHAPES
    assert all((np.abs(w).reshape(w.shape[0], -1).max(axis=1) == 0).any() for w in weights.values())
