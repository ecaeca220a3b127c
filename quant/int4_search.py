"""The INT4 parameter searches of T/AI 115.1-2021 §9.4.1.1 (Tables 284-286), without training.

:func:`quantize` (Table 285) tries n_points steps per unit and keeps the one with the least L-infinity error (the
standard's criterion; MSE on request). :func:`dual_quantize` (Table 286) tries every pair of n_points steps with
eq. 18's double grid and keeps the pair with the least MSE. :func:`quantize_weights` (Table 284) quantizes every
layer single INT4 and redoes as dual the layers whose MSE exceeds mse_thresh. The signed step grid is positive
only (A0-8): a negative step is the positive one with the codes' range flipped to [-7, 8]. optimize_sf (Table
287, RMSprop on a calibration set) is training and out of scope.

The dual search is exact but does not run Table 184 for every pair. For a pair (s0, s1) the double grid finds,
for each element, the nearest point of S = {a*s0 + b*s1 : a, b codes} (for each a, rounding and clipping gives
the nearest b), so the pair's MSE is the mean squared distance to S. That is summed per Voronoi cell of the
sorted S from prefix sums of the sorted elements: O(|S| log n) per pair instead of O(16 n). Every pair within
a margin far above the floating-point error of both computations is then run through Table 184 and Table 286's
own MSE, and the first least of those wins, as Table 286's argmin would pick it
(tests/quant/test_int4_search.py checks the equality with the literal search bit for bit).
"""
from __future__ import annotations

import numpy as np

from aipu.quant._checks import check_bits, check_choice, check_finite, check_positive, code_range, round_clip
from aipu.quant.int4 import (INT4_BITS, Int4QuantizeParameter, get_params_double_grid, quantize_planes,
                             shifted_by_minimum, weight_units)

N_POINTS_SINGLE = 500       # Table 284's quantize(..., n_points=500)
N_POINTS_DUAL = 30          # Table 284's dual_quantize(..., n_points=30)
GRID_REACH = 1.1            # Table 285: the grid ends at 1.1 * the largest magnitude / range_max
OFFSET_GRID_START = 1e-16   # Table 285: the unsigned grid's first step
SCREEN_MARGIN = 1e-9        # relative to the unit's mean square: far above both MSEs' rounding errors
_ALPHA_CHUNK = 1 << 22      # step x element products formed at a time


def alpha_grid(w: np.ndarray, offset: bool, n_points: int, bit_w: int = INT4_BITS) -> np.ndarray:
    """The candidate steps of one unit (Table 285's ranges; the signed grid's positive half, A0-8). An all-zero
    unit has the one step 1."""
    _, range_max = code_range(bit_w, signed=not offset)
    reach = float(w.max() - w.min()) if offset else float(np.abs(w).max())
    end = GRID_REACH * reach / range_max
    if end == 0:
        return np.ones(1)
    return np.linspace(OFFSET_GRID_START, end, n_points) if offset else np.linspace(end / n_points, end, n_points)


def quantize(w, offset: bool = False, bit_w: int = INT4_BITS, n_points: int = N_POINTS_SINGLE,
             criterion: str = "max") -> tuple[np.ndarray, float]:
    """Table 285 on one unit (``w`` already less its minimum when ``offset``): (codes, step), the first step of
    the grid with the least max|w - step * q| (``criterion="max"``) or mean squared error (``"mse"``)."""
    check_choice("criterion", criterion, ("max", "mse"))
    check_bits("n_points", n_points, 1, 1 << 20)
    w = check_finite("w", w).ravel()
    lo, hi = code_range(bit_w, signed=not offset)
    grid = alpha_grid(w, offset, n_points, bit_w)
    errors = np.empty(grid.size)
    step = max(1, _ALPHA_CHUNK // max(w.size, 1))
    for start in range(0, grid.size, step):
        alphas = grid[start:start + step, None]
        residual = np.abs(w - round_clip(w / alphas, lo, hi) * alphas)
        errors[start:start + step] = residual.max(axis=1) if criterion == "max" else np.mean(residual ** 2, axis=1)
    alpha = float(grid[np.argmin(errors)])
    return round_clip(w / alpha, lo, hi), alpha


def _pair_mse_estimates(w: np.ndarray, pairs: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Each pair's mean squared distance from the elements to S = {a*s0 + b*s1}, by Voronoi cells."""
    data = np.sort(w)
    sums = np.concatenate([[0.0], np.cumsum(data)])
    squares = np.concatenate([[0.0], np.cumsum(data * data)])
    points = np.sort((pairs[:, 0, None, None] * codes[:, None] + pairs[:, 1, None, None] * codes[None, :])
                     .reshape(len(pairs), -1), axis=1)
    cuts = np.searchsorted(data, (points[:, 1:] + points[:, :-1]) / 2)
    edges = np.concatenate([np.zeros((len(pairs), 1), np.int64), cuts, np.full((len(pairs), 1), data.size)], axis=1)
    count = np.diff(edges, axis=1)
    first, second = np.diff(sums[edges], axis=1), np.diff(squares[edges], axis=1)
    return np.sum(second - 2 * points * first + count * points * points, axis=1) / data.size


def _literal_pair_mse(w: np.ndarray, pair, lo: int, hi: int) -> tuple[float, tuple[np.ndarray, np.ndarray]]:
    """Table 286's residual for one pair: the double grid's codes and mean((q0*f0 + q1*f1 - w)**2)."""
    q0, q1 = get_params_double_grid(w, pair[0], pair[1], lo, hi)
    return float(np.mean((q0 * pair[0] + q1 * pair[1] - w) ** 2)), (q0, q1)


def dual_quantize(w, offset: bool = False, bit_w: int = INT4_BITS, n_points: int = N_POINTS_DUAL):
    """Table 286 on one unit: ((q0, q1), (s0, s1)), the first pair (s0 major) of the grid with the least MSE of
    the double grid's reconstruction; the codes are those of that pair (Table 286's ``fct`` read as the best pair,
    A0-8)."""
    check_bits("n_points", n_points, 1, 1 << 12)
    w = check_finite("w", w).ravel()
    lo, hi = code_range(bit_w, signed=not offset)
    grid = alpha_grid(w, offset, n_points, bit_w)
    pairs = np.stack(np.meshgrid(grid, grid, indexing="ij"), axis=-1).reshape(-1, 2)
    estimates = _pair_mse_estimates(w, pairs, np.arange(lo, hi + 1, dtype=np.float64))
    margin = SCREEN_MARGIN * (float(np.mean(w * w)) + float(estimates.min()))
    best = None
    for index in np.flatnonzero(estimates <= estimates.min() + margin):
        mse, codes = _literal_pair_mse(w, pairs[index], lo, hi)
        if best is None or mse < best[0]:
            best = (mse, codes, (float(pairs[index][0]), float(pairs[index][1])))
    return best[1], best[2]


def quantize_weights(weights, mse_thresh: float, offset_w: bool = False, bit_w: int = INT4_BITS,
                     n_points: int = N_POINTS_SINGLE, dual_n_points: int = N_POINTS_DUAL, criterion: str = "max"):
    """Table 284 over a list of layers: (W_quantized planes, records, dual flags). Each layer is quantized single
    INT4 per unit (kernel or layer); a layer whose reconstruction MSE exceeds ``mse_thresh`` is redone dual."""
    check_positive("mse_thresh", mse_thresh)
    quantized, records, dual_list = [], [], []
    for w in weights:
        units = weight_units(w)
        flat, offsets = shifted_by_minimum(w, units, offset_w)
        single = [quantize(unit, offset_w, bit_w, n_points, criterion)[1] for unit in units.units(flat)]
        record = Int4QuantizeParameter(tuple((alpha,) for alpha in single), offsets, bit_w)
        planes = quantize_planes(flat, units, record)
        dual = float(np.mean((flat - units.flatten(planes[0]) * units.spread(single)) ** 2)) > mse_thresh
        if dual:
            pairs = [dual_quantize(unit, offset_w, bit_w, dual_n_points)[1] for unit in units.units(flat)]
            record = Int4QuantizeParameter(tuple(pairs), offsets, bit_w)
            planes = quantize_planes(flat, units, record)
        quantized.append(planes)
        records.append(record)
        dual_list.append(dual)
    return quantized, records, dual_list
