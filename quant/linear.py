"""Linear quantization (T/AI 115.1-2021 §7.2.2.1, Tables 171-172) and dequantization (§8.2.2.1, Tables 232-233),
and the bounded-ReLU parameter quantizer (§7.2.3.4, Tables 185-186), which is the same operation.

q = clip(round(X_scale * x + X_offset)) with X_scale a multiplier, as the standard writes it; x' = (q - X_offset) /
X_scale. The standard never uses N (A0-2): the codes are clipped to the N-bit range, signed or unsigned as the
record says. The parameters come from each unit's minimum and maximum, mapped onto the code range's ends.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from aipu.quant._checks import check_bits, check_codes, check_count, check_positive, check_finite, code_range, round_clip
from aipu.quant.granularity import Granularity, partition
from aipu.quant.methods import DMethod, QMethod


@dataclass(frozen=True)
class LinearQuantization:
    """Table 171's fields: one X_scale (multiplier) and X_offset per unit, N bits; ``signed`` picks the code
    range (A0-2)."""
    x_scale: tuple[float, ...]
    x_offset: tuple[float, ...]
    n: int
    granularity: Granularity
    signed: bool = False
    q_method: ClassVar[QMethod] = QMethod.LINEAR
    d_method: ClassVar[DMethod] = DMethod.LINEAR

    def __post_init__(self):
        check_bits("n", self.n)
        check_positive("x_scale", self.x_scale)
        check_finite("x_offset", self.x_offset)
        check_count("x_offset", self.x_offset, len(self.x_scale))

    @property
    def code_range(self) -> tuple[int, int]:
        return code_range(self.n, self.signed)


@dataclass(frozen=True)
class BReluQuantizerParameter(LinearQuantization):
    """Table 185: bounded-ReLU parameter quantization has linear quantization's fields and operation (Table 186);
    its codes dequantize with D_Method 1."""
    q_method: ClassVar[QMethod] = QMethod.BRELU_PARAMETER


def linear_parameters(x, n: int, granularity=Granularity.LAYER, signed: bool = False, labels=None,
                      record=LinearQuantization) -> LinearQuantization:
    """Scale and offset mapping each unit's [min, max] onto the N-bit code range; a constant unit gets scale 1."""
    lo, hi = code_range(n, signed)
    units = partition(x, granularity, labels)
    flat = units.flatten(x)
    low, high = units.reduce(flat, np.minimum), units.reduce(flat, np.maximum)
    spread = high - low
    scale = np.where(spread > 0, (hi - lo) / np.where(spread > 0, spread, 1.0), 1.0)
    offset = lo - low * scale
    return record(tuple(scale.tolist()), tuple(offset.tolist()), n, Granularity(granularity), signed)


def linear_quantize(x, params: LinearQuantization, labels=None):
    """Table 172 with the N-bit clip: codes (int64) in the tensors' shapes."""
    units = partition(x, params.granularity, labels)
    check_count("x_scale", params.x_scale, units.count)
    flat = units.flatten(x)
    return units.join(round_clip(units.spread(params.x_scale) * flat + units.spread(params.x_offset),
                                 *params.code_range))


def linear_dequantize(q, params: LinearQuantization, labels=None):
    """Table 233: (q - X_offset) / X_scale per unit."""
    units = partition(q, params.granularity, labels)
    check_count("x_scale", params.x_scale, units.count)
    flat = check_codes("q", units.flatten(q, "q"), *params.code_range)
    return units.join((flat - units.spread(params.x_offset)) / units.spread(params.x_scale))
