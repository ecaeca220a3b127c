"""INT4 activation quantization with residual planes (T/AI 115.1-2021 §7.2.4.3, Tables 191-192), reconstruction
(§8.2.4.3, Tables 247-248) and the step search of §9.4.2.1 (eqs. 46-47, Tables 294-296).

Plane i quantizes what the planes before it left over: q_i = clip(round((r_i - o_i) / sf_i)) with r_0 = x,
r_(i+1) = r_i - (sf_i * q_i + o_i); a plane with an offset o_i is unsigned [0, 15], one without (None) signed
[-8, 7]. The reconstruction is the sum of sf_i * q_i + o_i (Table 248). The parameters chosen here (A0-9): with
``offset_act`` the first plane is unsigned with the calibration minimum as offset and a residual plane is signed
without one, since a residual has both signs. Each step is eq. 46's least squared error over a positive grid.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from aipu.quant._checks import check_bits, check_codes, check_count, check_finite, check_positive, code_range, round_clip
from aipu.quant.int4 import INT4_BITS
from aipu.quant.methods import DMethod, QMethod

N_POINTS = 100          # cal_sf's grid size (Table 296 leaves it to the caller)
OFFSET_GRID_START = 0.1  # Table 296: the unsigned grid runs from 0.1 to 1 times range / range_max
_BETA_CHUNK = 1 << 22


@dataclass(frozen=True)
class Int4QuantizeActivation:
    """Table 191's parameters: one step per plane (sf_act_list) and its offset (offset_act_list; None: signed)."""
    sf_act_list: tuple[float, ...]
    offset_act_list: tuple[float | None, ...]
    bit_w: int = INT4_BITS
    q_method: ClassVar[QMethod] = QMethod.INT4_ACTIVATION
    d_method: ClassVar[DMethod] = DMethod.INT4_ACTIVATION

    def __post_init__(self):
        check_bits("bit_w", self.bit_w, 1, 16)
        check_positive("sf_act_list", self.sf_act_list)
        check_count("offset_act_list", self.offset_act_list, len(self.sf_act_list))
        check_finite("offset_act_list", [o for o in self.offset_act_list if o is not None])

    def planes(self):
        """(step, offset or 0, code range) of each plane."""
        return [(step, offset or 0.0, code_range(self.bit_w, signed=offset is None))
                for step, offset in zip(self.sf_act_list, self.offset_act_list)]


def int4_quantize_activation(x, params: Int4QuantizeActivation) -> np.ndarray:
    """Table 192's recursion: the planes [len(sf_act_list), *x.shape] (int64)."""
    residual, planes = check_finite("x", x), []
    for step, offset, (lo, hi) in params.planes():
        codes = round_clip((residual - offset) / step, lo, hi)
        residual = residual - (step * codes + offset)
        planes.append(codes)
    return np.stack(planes)


def int4_recon_quantized_activation(planes, params: Int4QuantizeActivation) -> np.ndarray:
    """Table 248: the sum over planes of sf_i * q_i + o_i."""
    planes = np.asarray(planes)
    if len(planes) != len(params.sf_act_list):
        raise ValueError(f"planes has {len(planes)} planes, expected {len(params.sf_act_list)} (one per step)")
    return sum(step * check_codes("planes", plane, lo, hi) + offset
               for plane, (step, offset, (lo, hi)) in zip(planes, params.planes()))


def cal_sf(x, offset: float | None = None, bit_w: int = INT4_BITS, n_points: int = N_POINTS) -> float:
    """Eq. (46), Table 296 with its residual read as sum((beta * clip(round((x - o) / beta)) - (x - o))**2)
    (A0-9): the first step of the grid with the least error. Unsigned (with ``offset``): 0.1 to 1 times
    range / 15; signed: the positive half, n_points steps up to max|x| / 7. A constant x gives the step 1."""
    check_bits("n_points", n_points, 1, 1 << 20)
    values = check_finite("x", x).ravel() - (offset or 0.0)
    lo, hi = code_range(bit_w, signed=offset is None)
    reach = float(values.max() - values.min()) if offset is not None else float(np.abs(values).max())
    end = reach / hi
    if end == 0:
        return 1.0
    start = OFFSET_GRID_START * end if offset is not None else end / n_points
    grid = np.linspace(start, end, n_points)
    errors = np.empty(grid.size)
    step = max(1, _BETA_CHUNK // values.size)
    for first in range(0, grid.size, step):
        betas = grid[first:first + step, None]
        errors[first:first + step] = np.sum((betas * round_clip(values / betas, lo, hi) - values) ** 2, axis=1)
    return float(grid[np.argmin(errors)])


def int4_activation_parameters(calibration, dual: bool = False, offset_act: bool = False,
                               bit_w: int = INT4_BITS, n_points: int = N_POINTS) -> Int4QuantizeActivation:
    """Table 295 for one layer over its calibration activations: the first plane's step (eq. 46; offset = the
    minimum with ``offset_act``), and for a dual layer the residual plane's (eq. 47), signed without offset."""
    values = check_finite("calibration", calibration)
    offset = float(values.min()) if offset_act else None
    params = Int4QuantizeActivation((cal_sf(values, offset, bit_w, n_points),), (offset,), bit_w)
    if not dual:
        return params
    residual = values - int4_recon_quantized_activation(int4_quantize_activation(values, params), params)
    return Int4QuantizeActivation(params.sf_act_list + (cal_sf(residual, None, bit_w, n_points),),
                                  (offset, None), bit_w)
