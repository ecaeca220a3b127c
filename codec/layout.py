"""Tensor layouts: framework tensors <-> the standard's sublayers.

Chapter 10 codes a weight tensor as [R][S][C][K] reshaped to [RS][C][K] (T/AI 115.1-2021 10.1). The
frameworks store weights output-channel first:

* conv ``[K][C][R][S]`` (ONNX/PyTorch)  -> shape (R, S, C, K), dim 4, levels[r*S + s][c][k] = w[k][c][r][s]
* conv1d ``[K][C][S]``                  -> shape (1, S, C, K), dim 3
* conv3d and higher ``[K][C][...]``     -> the kernel axes flattened into S, dim 3
* fully connected ``[K][C]`` (Gemm transB / PyTorch Linear) -> shape (1, 1, C, K), dim 2
* 1-D (bias, BN vectors, scalars)       -> shape (1, 1, 1, K), dim 1

``[RS]`` is row-major (``zs = r*S + s``, A36). The inverse restores the original array exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .reference.elements import element_spec
from .reference.headers import DEFAULT_LIMITS

MAX_AXIS = (1 << element_spec("sublayer_shape").fixed_length) - 1
MAX_TENSOR_AXES = 32


@dataclass(frozen=True)
class Placement:
    """How one framework tensor sits in a sublayer."""

    original_shape: tuple[int, ...]
    dim: int
    shape: tuple[int, int, int, int]      # sublayer_shape (R, S, C, K)


def placement(shape: tuple[int, ...]) -> Placement:
    """The sublayer shape of a framework tensor of ``shape``; raises ValueError if it cannot be coded.

    An axis of length 0 cannot be coded: the decoder refuses a zero sublayer_shape (docs/codec.md §2).
    """
    shape = tuple(int(n) for n in shape)
    if len(shape) > MAX_TENSOR_AXES:
        raise ValueError(f"tensor shape {shape}: more than {MAX_TENSOR_AXES} axes")
    if any(n <= 0 for n in shape):
        raise ValueError(f"tensor shape {shape}: an axis of length {min(shape)}, empty tensors cannot be coded")
    if len(shape) <= 1:
        dim, sub = 1, (1, 1, 1, shape[0] if shape else 1)
    elif len(shape) == 2:
        dim, sub = 2, (1, 1, shape[1], shape[0])
    elif len(shape) == 4:
        dim, sub = 4, (shape[2], shape[3], shape[1], shape[0])
    else:
        dim, sub = 3, (1, math.prod(shape[2:]), shape[1], shape[0])
    too_big = [n for n in sub if n > MAX_AXIS]
    if too_big:
        raise ValueError(f"tensor shape {shape}: axis length {too_big[0]} exceeds the 16-bit "
                         f"sublayer_shape field ({MAX_AXIS})")
    if sub[0] * sub[1] > DEFAULT_LIMITS.max_zdepth:
        raise ValueError(f"tensor shape {shape}: kernel size R*S = {sub[0] * sub[1]} exceeds the decoder "
                         f"limit {DEFAULT_LIMITS.max_zdepth}")
    if math.prod(sub) > DEFAULT_LIMITS.max_weights_per_sublayer:
        raise ValueError(f"tensor shape {shape}: more than {DEFAULT_LIMITS.max_weights_per_sublayer} weights, "
                         "the decoder limit per sublayer")
    return Placement(shape, dim, sub)


def to_standard(array: np.ndarray, place: Placement) -> np.ndarray:
    """Framework tensor -> levels in the standard's order ([K] or [RS][C][K])."""
    if place.dim == 1:
        return array.reshape(-1)
    r, s, c, k = place.shape
    kcz = array.reshape(k, c, r * s)
    return np.ascontiguousarray(kcz.transpose(2, 1, 0))


def from_standard(levels: np.ndarray, place: Placement) -> np.ndarray:
    """Inverse of ``to_standard``."""
    if place.dim == 1:
        return levels.reshape(place.original_shape)
    return np.ascontiguousarray(levels.transpose(2, 1, 0)).reshape(place.original_shape)
