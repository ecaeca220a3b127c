"""The §9.4.1.1 searches: the screened dual search against a literal Table 184 / Table 286 written here, bit for
bit; the single search and quantize_weights' choice of dual layers."""
import numpy as np
import pytest

from aipu.quant import dual_quantize, int4_recon_quantized_parameter, quantize, quantize_weights
from aipu.quant.int4_search import alpha_grid
from aipu.sim.golden import round_half_away


def literal_double_grid(t, sf, lo, hi):
    """Table 184 as printed (t flattened to a column)."""
    t = t.reshape(-1, 1)
    w1 = np.tile(np.linspace(lo, hi, hi - lo + 1).reshape(1, -1), [len(t), 1])
    w2 = np.clip(round_half_away((t - (w1 * sf[0])) / sf[1]), lo, hi)
    index = np.argmin((t - w1 * sf[0] - w2 * sf[1]) ** 2, 1)
    rows = np.arange(len(t))
    return w1[rows, index], w2[rows, index]


def literal_dual_quantize(w, offset, n_points):
    """Table 286 as printed, every pair of the grid through Table 184, the best pair's codes at the end."""
    lo, hi = (0, 15) if offset else (-8, 7)
    grid = alpha_grid(w, offset, n_points)
    factors = [[first, second] for first in grid for second in grid]
    residuals = []
    for factor in factors:
        q = literal_double_grid(w, factor, lo, hi)
        residuals.append(np.mean((q[0] * factor[0] + q[1] * factor[1] - w) ** 2))
    best = factors[int(np.argmin(residuals))]
    return literal_double_grid(w, best, lo, hi), best


@pytest.mark.parametrize("seed", range(24))
def test_dual_search_equals_the_literal_search_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(rng.integers(1, 50)) * [1e-3, 1.0, 40.0][seed % 3]
    if seed % 4 == 0:
        w = np.round(w * 8) / 8                 # many equal values: exact ties between pairs and codes
    offset = bool(seed % 2)
    if offset:
        w = w - w.min()
    (q0, q1), steps = dual_quantize(w, offset, n_points=10)
    (l0, l1), literal_steps = literal_dual_quantize(w, offset, 10)
    assert steps == tuple(literal_steps)
    assert np.array_equal(q0, l0) and np.array_equal(q1, l1)


def test_single_search_is_the_first_least_error_of_the_grid():
    w = np.random.default_rng(5).laplace(size=300)
    codes, alpha = quantize(w, n_points=50)
    grid = alpha_grid(w, False, 50)
    errors = [np.abs(w - np.clip(round_half_away(w / a), -8, 7) * a).max() for a in grid]
    assert alpha == grid[int(np.argmin(errors))]
    assert np.array_equal(codes, np.clip(round_half_away(w / alpha), -8, 7))
    assert quantize(w, n_points=50, criterion="mse")[1] != alpha


def test_quantize_weights_flags_dual_layers_by_the_threshold():
    rng = np.random.default_rng(2)
    conv, fc = rng.standard_normal((3, 2, 3, 3)), rng.standard_normal((5, 4))
    planes, records, dual = quantize_weights([conv, fc], mse_thresh=1e-9, n_points=40, dual_n_points=8)
    assert dual == [True, True] and [len(r.sf_w_list) for r in records] == [3, 1]
    _, records_single, single = quantize_weights([conv, fc], mse_thresh=10.0, n_points=40)
    assert single == [False, False]
    for p, r, rs in zip(planes, records, records_single):
        assert p.shape[0] == 2 and all(len(s) == 2 for s in r.sf_w_list) and all(len(s) == 1 for s in rs.sf_w_list)
    error = np.mean((int4_recon_quantized_parameter(planes[0], records[0])[0] - conv) ** 2)
    assert error < 1e-2


def test_offset_weights_return_each_kernels_minimum():
    conv = np.random.default_rng(3).standard_normal((4, 2, 3, 3))
    planes, records, _ = quantize_weights([conv], mse_thresh=10.0, offset_w=True, n_points=30)
    assert records[0].offset_w_list == tuple(conv.reshape(4, -1).min(axis=1).tolist())
    assert planes[0].min() >= 0 and planes[0].max() <= 15
