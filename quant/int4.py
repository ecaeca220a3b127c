"""INT4 parameter quantization (T/AI 115.1-2021 §7.2.3.3, eq. 18, Tables 182-184) and reconstruction (§8.2.3.3,
Tables 241-242).

A conv weight (more than two axes) is quantized per output-channel kernel (axis 0), an FC weight as one unit.
Each unit has one step (single INT4: q = clip(round(w / sf))) or two (dual INT4: eq. 18's exact search, Table
184). With ``offset_w`` the codes are unsigned [0, 15] and the unit's minimum is subtracted first and returned in
``offset_w_list`` (A0-7); otherwise they are signed [-8, 7]. w ~ sf0 * q0 + sf1 * q1 + offset. Biases pass
through (the standard leaves them in float).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from aipu.quant._checks import (check_bits, check_codes, check_count, check_finite, check_positive, code_range,
                                round_clip)
from aipu.quant.granularity import Granularity, Partition, partition
from aipu.quant.methods import DMethod, QMethod
from aipu.sim.golden.rounding import round_half_away

INT4_BITS = 4
_CHUNK = 1 << 16        # elements searched at a time by the double grid (x 16 first codes)


@dataclass(frozen=True)
class Int4QuantizeParameter:
    """Table 182/241's parameters: sf_w_list (per unit: one step, or two for dual INT4), offset_w_list (per unit,
    None without offset_w), and the code width."""
    sf_w_list: tuple[tuple[float, ...], ...]
    offset_w_list: tuple[float, ...] | None = None
    bit_w: int = INT4_BITS
    q_method: ClassVar[QMethod] = QMethod.INT4_PARAMETER
    d_method: ClassVar[DMethod] = DMethod.INT4_PARAMETER

    def __post_init__(self):
        check_bits("bit_w", self.bit_w, 1, 16)
        for scales in self.sf_w_list:
            check_bits("len(sf_w_list[k])", len(scales), 1, 2)
            check_positive("sf_w_list", scales)
        if self.offset_w_list is not None:
            check_finite("offset_w_list", self.offset_w_list)
            check_count("offset_w_list", self.offset_w_list, len(self.sf_w_list))

    @property
    def offset_w(self) -> bool:
        return self.offset_w_list is not None

    @property
    def code_range(self) -> tuple[int, int]:
        """(range_min, range_max): unsigned with an offset, signed without."""
        return code_range(self.bit_w, signed=not self.offset_w)

    def steps(self) -> np.ndarray:
        """sf_w_list as [units, 2]: a single unit's second step is 0 (its second plane holds zeros)."""
        return np.array([tuple(scales) + (0.0,) * (2 - len(scales)) for scales in self.sf_w_list])


def weight_units(w) -> Partition:
    """Kernels (axis 0) of a conv weight, the whole weight of an FC layer (Table 183)."""
    return partition(w, Granularity.CHANNEL if np.ndim(w) > 2 else Granularity.LAYER)


def get_params_double_grid(t, sf0, sf1, range_min: int, range_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Table 184 (eq. 18) on flat ``t`` with per-element steps: every first code q1, the second the rounded,
    clipped residual; the pair with the least squared error, the lowest q1 on a tie. Exactly the standard's
    floating-point expressions, element blocks at a time."""
    t = check_finite("t", t).ravel()
    sf0, sf1 = np.broadcast_to(sf0, t.shape), np.broadcast_to(sf1, t.shape)
    first = np.arange(range_min, range_max + 1, dtype=np.float64)
    q1, q2 = np.empty(t.size, np.int64), np.empty(t.size, np.int64)
    for start in range(0, t.size, _CHUNK):
        part = slice(start, start + _CHUNK)
        column, s0, s1 = t[part, None], sf0[part, None], sf1[part, None]
        second = np.clip(round_half_away((column - first * s0) / s1), range_min, range_max)
        best = np.argmin((column - first * s0 - second * s1) ** 2, axis=1)
        rows = np.arange(best.size)
        q1[part], q2[part] = first[best].astype(np.int64), second[rows, best]
    return q1, q2


def shifted_by_minimum(w, units: Partition, offset_w: bool) -> tuple[np.ndarray, tuple[float, ...] | None]:
    """The flat weights less their unit's minimum (A0-7) and the minima, or the weights and None."""
    flat = units.flatten(w, "w")
    if not offset_w:
        return flat, None
    minimum = units.reduce(flat, np.minimum)
    return flat - units.spread(minimum), tuple(minimum.tolist())


def int4_quantize_parameter(w, sf_w_list, offset_w: bool = False, bit_w: int = INT4_BITS, b=None):
    """Table 183: (W_quantized [planes, *w.shape] int64, B, record). ``sf_w_list`` holds one entry per kernel
    (conv) or the layer's one or two steps (FC)."""
    units = weight_units(w)
    sf_w_list = (tuple(sf_w_list),) if units.count == 1 and np.ndim(sf_w_list[0]) == 0 else sf_w_list
    check_count("sf_w_list", sf_w_list, units.count)
    flat, offsets = shifted_by_minimum(w, units, offset_w)
    record = Int4QuantizeParameter(tuple(tuple(float(s) for s in np.atleast_1d(scales)) for scales in sf_w_list),
                                   offsets, bit_w)
    return quantize_planes(flat, units, record), b, record


def quantize_planes(flat: np.ndarray, units: Partition, record: Int4QuantizeParameter) -> np.ndarray:
    """The code planes of (offset-free) flat weights: single units by rounding, dual ones by the double grid."""
    steps, (lo, hi) = units.spread(record.steps()), record.code_range
    dual = steps[:, 1] > 0
    planes = np.zeros((2 if dual.any() else 1, flat.size), np.int64)
    planes[0, ~dual] = round_clip(flat[~dual] / steps[~dual, 0], lo, hi)
    if dual.any():
        planes[0, dual], planes[1, dual] = get_params_double_grid(flat[dual], steps[dual, 0], steps[dual, 1], lo, hi)
    return np.stack([units.join(plane) for plane in planes])


def int4_recon_quantized_parameter(w_quantized, record: Int4QuantizeParameter, b=None):
    """Table 242: (W_recon, B): sf0 * q0 (+ sf1 * q1) (+ the unit's offset)."""
    planes = np.asarray(w_quantized)
    units = weight_units(planes[0])
    check_count("sf_w_list", record.sf_w_list, units.count)
    steps = units.spread(record.steps())
    flats = [check_codes("w_quantized", units.flatten(plane, "w_quantized"), *record.code_range) for plane in planes]
    recon = sum(flat * steps[:, index] for index, flat in enumerate(flats))
    if record.offset_w:
        recon = recon + units.spread(record.offset_w_list)
    return units.join(recon), b
