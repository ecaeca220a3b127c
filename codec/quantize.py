"""Quantisation of float weights to the integer levels chapter 10 codes, and their reconstruction.

The decoder's step size is fixed by two header fields (Table 324, A13): for weights
``step = (sublayer_cmaxw / 256) / (2**bitdepth - 1)`` and for 1-D arrays
``step = sublayer_cmaxw / (2**array1d_depth - 1)``, both in float32. So the quantiser chooses
``sublayer_cmaxw`` (an unsigned 32-bit integer) and the bit depth, computes the very same float32 step
and rounds ``w / step`` to the nearest level (half away from zero). ``reconstruct`` is dequantw.

``kmeans_levels`` is the codebook quantiser: a 1-D k-means (Lloyd, vectorised with sorted midpoints) on
a fine uniform grid, so a layer uses at most k distinct levels and the per-CU codebooks capture them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .reference.elements import element_spec
from .reference.headers import dequantw, step_size

MAX_BITDEPTH = (1 << element_spec("sublayer_bitdepth").fixed_length) - 1      # 31
MAX_CMAXW = (1 << element_spec("sublayer_cmaxw").fixed_length) - 1


@dataclass(frozen=True)
class Quantized:
    """Integer levels and the header fields that reproduce their step size."""

    levels: np.ndarray        # int64, same shape as the input
    cmaxw: int
    bitdepth: int
    step: np.float32


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.int64)


def _check_bitdepth(bitdepth: int) -> None:
    if not 1 <= bitdepth <= MAX_BITDEPTH:
        raise ValueError(f"bit depth must be in 1..{MAX_BITDEPTH}, got {bitdepth}")


def quantize_uniform(weights: np.ndarray, *, bitdepth: int | None = None, step: float | None = None,
                     one_d: bool = False) -> Quantized:
    """Uniform quantisation with a given bit depth (step from the max |w|) or a given step size."""
    w = np.asarray(weights, dtype=np.float64)
    if not np.all(np.isfinite(w)):
        raise ValueError("weights contain NaN or infinity")
    peak = float(np.max(np.abs(w))) if w.size else 0.0
    scale = 1.0 if one_d else 256.0
    if (bitdepth is None) == (step is None):
        raise ValueError("give exactly one of bitdepth and step")
    if step is not None:
        if not step > 0:
            raise ValueError(f"step must be positive, got {step}")
        bitdepth = max(1, int(np.ceil(np.log2(peak / step + 1)))) if peak else 1
        _check_bitdepth(bitdepth)
        cmaxw = int(round(step * scale * ((1 << bitdepth) - 1)))
        if cmaxw == 0:
            raise ValueError(f"step {step} is below the resolution of sublayer_cmaxw "
                             f"(1/{scale:g} per 2**bitdepth - 1 levels)")
    else:
        _check_bitdepth(bitdepth)
        if peak * scale > MAX_CMAXW:          # checked as a float: ceil(inf) has no int
            raise ValueError(f"sublayer_cmaxw {peak * scale:.6g} does not fit in 32 bits (weights up to {peak:g})")
        cmaxw = int(np.ceil(peak * scale))
    if cmaxw > MAX_CMAXW:
        raise ValueError(f"sublayer_cmaxw {cmaxw} does not fit in 32 bits (weights up to {peak:g})")
    if cmaxw == 0:
        return Quantized(np.zeros(w.shape, dtype=np.int64), 0, bitdepth, np.float32(0.0))
    q_step = step_size(cmaxw, bitdepth, 0, one_d)
    limit = (1 << bitdepth) - 1
    levels = np.clip(_round_half_away(w / np.float64(q_step)), -limit, limit)
    return Quantized(levels, cmaxw, bitdepth, q_step)


def kmeans_1d(values: np.ndarray, clusters: int, iterations: int = 30) -> np.ndarray:
    """Sorted centroids of a 1-D k-means (quantile start, Lloyd steps)."""
    x = np.sort(np.asarray(values, dtype=np.float64).reshape(-1))
    if x.size == 0:
        return np.zeros(0)
    centroids = np.unique(np.quantile(x, (np.arange(clusters) + 0.5) / clusters))
    for _ in range(iterations):
        edges = np.searchsorted(x, (centroids[1:] + centroids[:-1]) / 2)
        bounds = np.concatenate(([0], edges, [x.size]))
        sums = np.add.reduceat(x, bounds[:-1]) if x.size else np.zeros(0)
        counts = np.diff(bounds)
        keep = counts > 0
        updated = np.unique(sums[keep] / counts[keep])
        if updated.shape == centroids.shape and np.allclose(updated, centroids):
            break
        centroids = updated
    return centroids


def lloyd_1d(data: np.ndarray, centres: np.ndarray, iterations: int) -> np.ndarray:
    """Lloyd's iteration on sorted 1-D ``data`` from sorted ``centres``: each value to its nearest centre (the cells
    split at the midpoints), each centre to its cell's mean (an empty cell keeps its centre), until no centre moves
    or ``iterations`` have run. The k-means of quant.codebook and compress.multi_model, which differ in their start."""
    sums = np.concatenate([[0.0], np.cumsum(data)])
    for _ in range(iterations):
        edges = np.concatenate([[0], np.searchsorted(data, (centres[1:] + centres[:-1]) / 2), [data.size]])
        counts = np.diff(edges)
        means = np.where(counts > 0, np.diff(sums[edges]) / np.maximum(counts, 1), centres)
        if np.array_equal(means, centres):
            break
        centres = means
    return centres


def kmeans_levels(weights: np.ndarray, clusters: int, fine_bitdepth: int = 16) -> Quantized:
    """Codebook quantisation: at most ``clusters`` distinct levels on a ``fine_bitdepth`` uniform grid."""
    if not 1 <= clusters:
        raise ValueError(f"clusters must be >= 1, got {clusters}")
    fine = quantize_uniform(weights, bitdepth=fine_bitdepth)
    if fine.cmaxw == 0:
        return fine
    centroids = np.unique(_round_half_away(kmeans_1d(fine.levels, clusters)))
    flat = fine.levels.reshape(-1)
    edges = (centroids[1:] + centroids[:-1]) / 2
    nearest = centroids[np.searchsorted(edges, flat)]
    return Quantized(nearest.reshape(fine.levels.shape), fine.cmaxw, fine.bitdepth, fine.step)


def integer_levels(array: np.ndarray) -> Quantized:
    """Already-quantised tensors: coded losslessly with integer_input = 1 (step 1.0).

    The range is checked on the values as they are, before the cast to int64: a uint64 of 2**63 or more
    would wrap to a negative level, and |int64 min| to itself.
    """
    values = np.asarray(array)
    low, high = (int(values.min()), int(values.max())) if values.size else (0, 0)
    peak = max(-low, high)
    if peak > MAX_CMAXW:
        raise ValueError(f"integer value {low if -low > high else high} exceeds 2**32 - 1 in magnitude, "
                         "the largest level the codec carries")
    return Quantized(values.astype(np.int64), peak, min(MAX_BITDEPTH, max(1, peak.bit_length())), np.float32(1.0))


def reconstruct(levels: np.ndarray, step: np.float32) -> np.ndarray:
    """dequantw (Table 321) of every level."""
    return dequantw(levels, step)
