"""Non-linear mapping quantization (T/AI 115.1-2021 §7.2.3.1, eqs. 11-12, Tables 175-177) and its inverse
(§8.2.3.1, eq. 29, Tables 236-238).

W~ = f(W) with f linear, log or tanh (Table 176); S = (max W~ - min W~) / (2**n - 1), Z = -min W~ / S per unit;
Q = clip(round(W~ / S + Z), 0, 2**n - 1) (S is a step here, A0-3); W' = f^-1(S * (Q - Z)). Log is log2|W| with
the sign kept in a separate plane (-1, 0, +1) and exact zeros left out of the statistics and kept zero; its
inverse is sign * 2**v. Tanh is tanh(alpha * W), inverse atanh(v) / alpha (A0-4).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

import numpy as np

from aipu.quant._checks import (check_bits, check_choice, check_codes, check_count, check_finite, check_positive,
                                code_range, round_clip)
from aipu.quant.granularity import Granularity, partition
from aipu.quant.methods import DMethod, QMethod

_TANH_LIMIT = np.nextafter(1.0, 0.0)     # atanh is finite inside (-1, 1)


class MappingFunction(IntEnum):
    """Tables 176 and 237 (4, "other", is not a function)."""
    LINEAR = 1
    LOG = 2
    TANH = 3


@dataclass(frozen=True)
class NonLinearQuantization:
    """Table 175/236's parameters: per-unit step W_scale (S) and offset W_offset (Z), the function, n bits, and
    tanh's alpha (A0-4)."""
    w_scale: tuple[float, ...]
    w_offset: tuple[float, ...]
    granularity: Granularity
    function: MappingFunction
    n: int
    alpha: float = 1.0
    q_method: ClassVar[QMethod] = QMethod.NON_LINEAR
    d_method: ClassVar[DMethod] = DMethod.NON_LINEAR

    def __post_init__(self):
        check_bits("n", self.n)
        check_choice("function", self.function, tuple(MappingFunction))
        check_positive("w_scale", self.w_scale)
        check_finite("w_offset", self.w_offset)
        check_count("w_offset", self.w_offset, len(self.w_scale))
        check_positive("alpha", self.alpha)


def _mapped(flat: np.ndarray, function: MappingFunction, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """(W~, mask of the elements the statistics and codes use: all but exact zeros under log)."""
    if function == MappingFunction.LOG:
        used = flat != 0
        return np.log2(np.where(used, np.abs(flat), 1.0)), used
    if function == MappingFunction.TANH:
        return np.tanh(alpha * flat), np.ones(flat.shape, bool)
    return flat, np.ones(flat.shape, bool)


def nonlinear_parameters(w, n: int, function=MappingFunction.LINEAR, granularity=Granularity.LAYER,
                         alpha: float = 1.0, labels=None) -> NonLinearQuantization:
    """Eqs. (11), (12) on each unit's mapped values; a unit of one mapped value (or only zeros) gets S = 1."""
    function = MappingFunction(check_choice("function", function, tuple(MappingFunction)))
    alpha = float(check_positive("alpha", alpha))
    hi = code_range(n, signed=False)[1]
    units = partition(w, granularity, labels)
    mapped, used = _mapped(units.flatten(w, "w"), function, alpha)
    low = units.reduce(np.where(used, mapped, np.inf), np.minimum)
    high = units.reduce(np.where(used, mapped, -np.inf), np.maximum)
    empty = ~np.isfinite(low)
    low, high = np.where(empty, 0.0, low), np.where(empty, 0.0, high)
    scale = np.where(high > low, (high - low) / hi, 1.0)
    return NonLinearQuantization(tuple(scale.tolist()), tuple((-low / scale).tolist()), Granularity(granularity),
                                 function, n, alpha)


def nonlinear_quantize(w, params: NonLinearQuantization, labels=None):
    """(Q, sign): Q = clip(round(W~ / S + Z), 0, 2**n - 1); ``sign`` is the LOG function's sign plane (int8,
    0 where W = 0, whose Q is 0) and None for the others."""
    units = partition(w, params.granularity, labels)
    check_count("w_scale", params.w_scale, units.count)
    flat = units.flatten(w, "w")
    mapped, used = _mapped(flat, params.function, params.alpha)
    codes = round_clip(mapped / units.spread(params.w_scale) + units.spread(params.w_offset),
                       *code_range(params.n, signed=False))
    if params.function != MappingFunction.LOG:
        return units.join(codes), None
    return units.join(np.where(used, codes, 0)), units.join(np.sign(flat).astype(np.int8))


def mapped_dequantize(q, params: NonLinearQuantization, labels=None):
    """S * (Q - Z): the dequantized value in the mapped domain, before f^-1."""
    units = partition(q, params.granularity, labels)
    check_count("w_scale", params.w_scale, units.count)
    codes = check_codes("q", units.flatten(q, "q"), *code_range(params.n, signed=False))
    return units, units.spread(params.w_scale) * (codes - units.spread(params.w_offset))


def nonlinear_dequantize(q, params: NonLinearQuantization, sign=None, labels=None):
    """Eq. (29): W' = f^-1(S * (Q - Z)); LOG needs the sign plane ``sign`` from :func:`nonlinear_quantize`."""
    units, value = mapped_dequantize(q, params, labels)
    if params.function == MappingFunction.LINEAR:
        return units.join(value)
    if params.function == MappingFunction.TANH:
        return units.join(np.arctanh(np.clip(value, -_TANH_LIMIT, _TANH_LIMIT)) / params.alpha)
    if sign is None:
        raise ValueError("sign=None: the LOG function's dequantization needs the sign plane of its quantization")
    signs = check_codes("sign", units.flatten(sign, "sign"), -1, 1)
    return units.join(signs * np.exp2(value))
