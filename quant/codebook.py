"""Codebook quantization (T/AI 115.1-2021 §7.2.2.2, Tables 173-174) and dequantization (§8.2.2.2, Tables 234-235).

Each element becomes the index of its nearest centre in its unit's centre set, ties to the lowest index (A0-12);
dequantization looks the index up. Centres come from a 1-D k-means (the clustering step of §9.4.1.4; its
interval-shrink training is out of scope): Lloyd's iteration on the sorted values from quantile starting points,
so the result depends on the data only (A0-15).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from aipu.codec.quantize import lloyd_1d
from aipu.quant._checks import check_bits, check_codes, check_count, check_finite
from aipu.quant.granularity import Granularity, partition
from aipu.quant.methods import DMethod, QMethod

MAX_CENTRES = 256
LLOYD_ITERATIONS = 100
_CHUNK = 1 << 22        # element x centre distances formed at a time


@dataclass(frozen=True)
class CodebookQuantization:
    """Table 173's parameters: one centre set per unit (X_center)."""
    x_center: tuple[tuple[float, ...], ...]
    granularity: Granularity
    q_method: ClassVar[QMethod] = QMethod.CODEBOOK
    d_method: ClassVar[DMethod] = DMethod.CODEBOOK

    def __post_init__(self):
        for centres in self.x_center:
            check_bits("len(x_center[i])", len(centres), 1, MAX_CENTRES)
            check_finite("x_center", centres)

    def table(self) -> np.ndarray:
        """The centre sets as rows, shorter sets padded with +inf (never nearest)."""
        table = np.full((len(self.x_center), max(map(len, self.x_center))), np.inf)
        for row, centres in zip(table, self.x_center):
            row[:len(centres)] = centres
        return table


def kmeans_centres(values, k: int) -> np.ndarray:
    """At most ``k`` sorted centres of 1-D ``values`` by Lloyd's iteration: start at the quantiles (i + 1/2)/k of the
    sorted values, assign each value to the nearest centre (cells split at the midpoints), move each centre to
    its cell's mean (an empty cell keeps its centre), until no centre moves. Fewer distinct values than k give
    the distinct values."""
    k = check_bits("k", k, 1, MAX_CENTRES)
    data = np.sort(check_finite("values", values).ravel())
    distinct = np.unique(data)
    if distinct.size <= k:
        return distinct
    centres = data[((np.arange(k) + 0.5) * data.size / k).astype(np.int64)]
    return lloyd_1d(data, centres, LLOYD_ITERATIONS)


def codebook_parameters(x, k: int, granularity=Granularity.LAYER, labels=None) -> CodebookQuantization:
    """k-means centres for every unit."""
    units = partition(x, granularity, labels)
    centres = [tuple(kmeans_centres(unit, k).tolist()) for unit in units.units(units.flatten(x))]
    return CodebookQuantization(tuple(centres), Granularity(granularity))


def codebook_quantize(x, params: CodebookQuantization, labels=None):
    """Table 174: argmin_n |x - X_center[n]| in the element's unit, the lowest index on a tie (int64 indices)."""
    units = partition(x, params.granularity, labels)
    check_count("x_center", params.x_center, units.count)
    flat, table = units.flatten(x), params.table()
    indices = np.empty(flat.size, np.int64)
    step = max(1, _CHUNK // table.shape[1])
    for start in range(0, flat.size, step):
        part = slice(start, start + step)
        indices[part] = np.argmin(np.abs(flat[part, None] - table[units.unit[part]]), axis=1)
    return units.join(indices)


def codebook_dequantize(indices, params: CodebookQuantization, labels=None):
    """Table 235: each index replaced by its unit's centre."""
    units = partition(indices, params.granularity, labels)
    check_count("x_center", params.x_center, units.count)
    flat = units.flatten(indices, "indices")
    sizes = np.array([len(centres) for centres in params.x_center])
    codes = check_codes("indices", flat, 0, int(sizes.max()) - 1)
    if np.any(codes >= sizes[units.unit]):
        raise ValueError("indices holds an index past its unit's centre set")
    return units.join(params.table()[units.unit, codes])
