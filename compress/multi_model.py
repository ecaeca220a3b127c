"""Multi-model compression of T/AI 115.1-2021 §7.1, its decompression of §8.1 and the update rules of §9.3
(docs/multimodel.md, decisions MM-1 .. MM-17).

Several models of one topology keep part of their weights in common. Intra-layer weight sharing (M_Method 2,
§7.1.3) splits each layer's weights along ``axe`` at ``slice_indicator``: the part before it is stored once
(W_share), the rest once per model (W_specific). Residual quantization (M_Method 3, §7.1.4) keeps a frozen base
model and, per target model and weight layer, the difference dW = W - W_base as 2^n k-means centres (W_share)
and one centre index per weight (W_specific).

The functions named after the standard's pseudo-code (``multilayer_weight_regroup``, ``decompress_all`` ...)
return its outputs with its Error codes, the defects of §10 A13 corrected; ``regroup`` and ``df_quantize`` are
the same raising :class:`InputError` on an Error, and give the records a file stores:
:class:`DecompressMultimodel` (Table 217's inputs) and :class:`DFQuantization` (Table 165's outputs).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

import numpy as np

from aipu.codec.quantize import lloyd_1d
from aipu.sim.machine.errors import InputError

OK, COUNT_MISMATCH, SHAPE_MISMATCH = 0, 1, 2      # Tables 164, 220: Error
MAX_BITS = 8                                      # n of Tables 165-166: at most 256 centres (uint8 indices)
LLOYD_ITERATIONS = 100


class MMethod(IntEnum):
    """Tables 162 and 218 (M_Method; Table 162's heading says Q_Method, MM-7)."""

    UNDEFINED = 1
    WEIGHT_SHARING = 2            # §7.1.3 / §8.1.2
    RESIDUAL_QUANTIZATION = 3     # §7.1.4 / §8.1.3


def _slice(t: np.ndarray, axe: int, start: int, stop: int | None = None) -> np.ndarray:
    """Table 164's slice(t, axe, start, end): ``stop`` None is the text's -1, "to the end" (MM-4)."""
    index = [slice(None)] * t.ndim
    index[axe] = slice(start, stop)
    return t[tuple(index)]


def _concate(a: np.ndarray, b: np.ndarray, axe: int) -> np.ndarray:
    return np.concatenate([a, b], axis=axe)


# ------------------------------------------------------------------------------ §7.1.3, intra-layer sharing
def multilayer_weight_regroup(weights_list, bias_list, axe: int, slice_indicator: int):
    """Table 164: (W_share, W_specific, B_share, B_specific, Error). Error 1: the lists differ in length;
    2: a weight or bias shape differs (or ``axe``/``slice_indicator`` lie outside the weights, MM-3). Axis
    ``axe`` 0 is the output channels of an OIHW (or Gemm [out, in]) weight: state 1, the biases split too;
    any other ``axe``: state 2, B_specific = Bias_list whole and B_share empty (MM-6)."""
    weights_list, bias_list = [np.asarray(w) for w in weights_list], [np.asarray(b) for b in bias_list]
    if len(weights_list) != len(bias_list) or not weights_list:
        return None, None, None, None, COUNT_MISMATCH
    for i in range(len(weights_list) - 1):
        if weights_list[i].shape != weights_list[i + 1].shape or bias_list[i].shape != bias_list[i + 1].shape:
            return None, None, None, None, SHAPE_MISMATCH
    shape = weights_list[0].shape
    if not 0 <= axe < len(shape) or not 0 <= slice_indicator <= shape[axe] or (
            axe == 0 and bias_list[0].shape != (shape[0],)):
        return None, None, None, None, SHAPE_MISMATCH
    # here Error is 0: the text tests `Error==1` (MM-1)
    w_share = _slice(weights_list[0], axe, 0, slice_indicator)
    w_specific = [_slice(w, axe, slice_indicator) for w in weights_list]      # the text's [0] is [i] (MM-2)
    if axe == 0:
        b_share = _slice(bias_list[0], 0, 0, slice_indicator)               # the text's "A" is C (MM-5)
        b_specific = [_slice(b, 0, slice_indicator) for b in bias_list]
    else:
        b_share, b_specific = bias_list[0][:0], list(bias_list)
    return w_share, w_specific, b_share, b_specific, OK


@dataclass(frozen=True, eq=False)
class DecompressMultimodel:
    """One layer of N models under M_Method 2: Table 217's inputs W_share, B_share, W_specific, B_specific and
    the attribute ``axe``. Model m's weights are Concate(W_share, W_specific[m], axe)."""

    w_share: np.ndarray
    b_share: np.ndarray
    w_specific: tuple[np.ndarray, ...]
    b_specific: tuple[np.ndarray, ...]
    axe: int = 0
    m_method: ClassVar[MMethod] = MMethod.WEIGHT_SHARING

    def __post_init__(self) -> None:
        for name in ("w_specific", "b_specific"):
            object.__setattr__(self, name, tuple(np.asarray(t) for t in getattr(self, name)))
        object.__setattr__(self, "w_share", np.asarray(self.w_share))
        object.__setattr__(self, "b_share", np.asarray(self.b_share))
        _, _, error = decompress_all(self.w_share, self.b_share, self.w_specific, self.b_specific, self.axe)[1:]
        if error:
            raise InputError("DecompressMultimodel", "W_specific / B_specific" if error == COUNT_MISMATCH else
                             "shapes", f"Error {error}: {_ERRORS[error]}")

    @property
    def models(self) -> int:
        return len(self.w_specific)

    @property
    def slice_indicator(self) -> int:
        return self.w_share.shape[self.axe]

    def shared_bytes(self) -> int:
        return self.w_share.nbytes + self.b_share.nbytes

    def specific_bytes(self, model: int) -> int:
        """What switching to ``model`` replaces (§8.1.2.4)."""
        return self.w_specific[model].nbytes + self.b_specific[model].nbytes


_ERRORS = {COUNT_MISMATCH: "as many W_specific as B_specific", SHAPE_MISMATCH: "every model's slice of one shape, "
           "W_share and W_specific equal but for axe"}


def regroup(weights_list, bias_list, axe: int = 0, slice_indicator: int = 0) -> DecompressMultimodel:
    """:func:`multilayer_weight_regroup` as a record; InputError naming the Error."""
    w_share, w_specific, b_share, b_specific, error = multilayer_weight_regroup(weights_list, bias_list, axe,
                                                                               slice_indicator)
    if error:
        raise InputError("Weights_list / Bias_list", f"Error {error}", "as many weights as biases, each model's of "
                         f"one shape, axe and slice_indicator inside it (Table 164; axe {axe}, slice_indicator "
                         f"{slice_indicator})")
    return DecompressMultimodel(w_share, b_share, tuple(w_specific), tuple(b_specific), axe)


def decompress_all(w_share, b_share, w_specific, b_specific, axe: int):
    """Table 220: (Weights_list, Bias_list, slice_indicator, Error). Error 1: the two lists differ in length
    (checked for every ``axe``, MM-12); 2: a specific part whose shape does not continue W_share's along
    ``axe``, or biases that do not."""
    w_share, b_share = np.asarray(w_share), np.asarray(b_share)
    w_specific, b_specific = [np.asarray(w) for w in w_specific], [np.asarray(b) for b in b_specific]
    if len(w_specific) != len(b_specific) or not w_specific:
        return None, None, None, COUNT_MISMATCH
    if not 0 <= axe < w_share.ndim:
        return None, None, None, SHAPE_MISMATCH
    rest = [s for i, s in enumerate(w_share.shape) if i != axe]
    for w, b in zip(w_specific, b_specific):
        bias_good = (b_share.shape == (w_share.shape[0],) and b.shape == (w.shape[0],) if axe == 0 else
                     b_share.size == 0 and b.shape == (w_share.shape[0],))
        if (w.ndim != w_share.ndim or [s for i, s in enumerate(w.shape) if i != axe] != rest or not bias_good
                or w.shape != w_specific[0].shape or b.shape != b_specific[0].shape):
            return None, None, None, SHAPE_MISMATCH
    weights = [_concate(w_share, w.astype(w_share.dtype, copy=False), axe) for w in w_specific]
    biases = [_concate(b_share, b.astype(b_share.dtype, copy=False), 0) for b in b_specific]
    return weights, biases, w_share.shape[axe], OK


def decompress_one(record: DecompressMultimodel, unit_indicator: int):
    """Table 222: (Weights, Bias) of the model ``unit_indicator``: the shared part and its specific part only."""
    w_spec, b_spec = get_indicated_layer_weight_specific_idx(record, unit_indicator)
    return _concate(record.w_share, w_spec, record.axe), _concate(record.b_share, b_spec, 0)


def get_indicated_layer_weight_specific_idx(record: DecompressMultimodel, unit_indicator: int):
    """Table 224: (W_specific_idx, B_specific_idx), the specific part of model ``unit_indicator``."""
    if not 0 <= unit_indicator < record.models:
        raise InputError("Unit_indicator", unit_indicator, f"a model index 0 .. {record.models - 1}")
    return record.w_specific[unit_indicator], record.b_specific[unit_indicator]


def replace_indicated_layer_weight_specific_idx(weights: np.ndarray, bias: np.ndarray, w_specific_idx, b_specific_idx,
                                                axe: int) -> None:
    """Table 226, in place: the loaded model's weights and bias from ``slice_indicator`` to the end along
    ``axe`` become the new model's specific part; the shared part is not touched (the text's
    ``Weights[len(W_specific_idx):-1]``, MM-8)."""
    start = weights.shape[axe] - np.shape(w_specific_idx)[axe]
    _slice(weights, axe, start)[...] = w_specific_idx
    bias[bias.shape[0] - np.shape(b_specific_idx)[0]:] = b_specific_idx


def switch(weights: np.ndarray, bias: np.ndarray, record: DecompressMultimodel, unit_indicator: int) -> int:
    """§8.1.2.4: the layer as loaded (any model's) becomes model ``unit_indicator``'s; returns the bytes written
    (the specific part only)."""
    w_spec, b_spec = get_indicated_layer_weight_specific_idx(record, unit_indicator)
    replace_indicated_layer_weight_specific_idx(weights, bias, w_spec, b_spec, record.axe)
    return w_spec.nbytes + b_spec.nbytes


# ----------------------------------------------------------------------- §7.1.4, residual quantization
def kmeans(values: np.ndarray, k: int) -> np.ndarray:
    """At most ``k`` sorted centres of 1-D ``values``, Deep Compression's way (MM-13): centres start evenly
    spaced over [min, max], then Lloyd's iteration (each value to its nearest centre, each centre to its
    members' mean; an empty cell keeps its centre) until none moves. Fewer distinct values than k give them."""
    data = np.sort(np.asarray(values, np.float64).ravel())
    distinct = np.unique(data)
    if distinct.size <= k:
        return distinct
    centres = np.linspace(data[0], data[-1], k)
    return np.unique(lloyd_1d(data, centres, LLOYD_ITERATIONS))


def nearest(values: np.ndarray, centres: np.ndarray) -> np.ndarray:
    """The index of each value's nearest centre, the lowest on a tie (the rule of derived vector D10)."""
    values = np.asarray(values, np.float64)
    return np.abs(values[..., None] - np.asarray(centres, np.float64)).argmin(axis=-1)


def cluster(df: np.ndarray, n: int):
    """Table 166: (W_share, W_specific, Error): the 2^n k-means centres of one layer's difference weights
    (float32) and each weight's centre index (uint8, the layer's shape). Error 1: n outside 1 .. 8 or a
    non-finite difference."""
    df = np.asarray(df)
    if not isinstance(n, (int, np.integer)) or not 1 <= n <= MAX_BITS or df.size == 0 or not np.isfinite(df).all():
        return None, None, 1
    centres = kmeans(df, 1 << int(n)).astype(np.float32)
    return centres, nearest(df, centres).astype(np.uint8), OK


@dataclass(frozen=True, eq=False)
class DFQuantization:
    """Table 165's outputs for one target model: per weight layer the centres (W_share) and the indices
    (W_specific) of its difference to the base model; ``n`` bits. Biases are not quantized (§7.1.4)."""

    n: int
    w_share: tuple[np.ndarray, ...]
    w_specific: tuple[np.ndarray, ...]
    m_method: ClassVar[MMethod] = MMethod.RESIDUAL_QUANTIZATION

    def __post_init__(self) -> None:
        if not isinstance(self.n, (int, np.integer)) or not 1 <= self.n <= MAX_BITS:
            raise InputError("n", self.n, f"bits 1 .. {MAX_BITS} (2^n centres)")
        object.__setattr__(self, "w_share", tuple(np.asarray(c, np.float32) for c in self.w_share))
        object.__setattr__(self, "w_specific", tuple(np.asarray(i) for i in self.w_specific))
        if len(self.w_share) != len(self.w_specific):
            raise InputError("W_share / W_specific", (len(self.w_share), len(self.w_specific)), "one each per layer")
        for layer, (centres, indices) in enumerate(zip(self.w_share, self.w_specific)):
            if (centres.ndim != 1 or not 1 <= centres.size <= 1 << self.n or not np.isfinite(centres).all()
                    or indices.dtype.kind not in "iu" or (indices.size and (indices.min() < 0
                                                                           or indices.max() >= centres.size))):
                raise InputError(f"layer {layer} W_share / W_specific", f"{centres.size} centres",
                                 f"1 .. {1 << self.n} finite centres and indices below their count")

    def index_bytes(self) -> int:
        """The indices at n bits each, whole bytes per layer: what the code storage takes."""
        return sum(-(-i.size * self.n // 8) for i in self.w_specific)

    def centre_bytes(self) -> int:
        return sum(c.nbytes for c in self.w_share)

    def residuals(self) -> list[np.ndarray]:
        """Per layer the quantized difference W_share[W_specific]."""
        return [c[i] for c, i in zip(self.w_share, self.w_specific)]


def df_quantization(base_model, df_model, n: int):
    """Table 167 without its training step: (W_share, W_specific, Error) over every layer (the text's loop stops
    one layer short, MM-9). Error 1: no difference model, a layer count other than the base's, a layer of
    another shape, or a Cluster error (the text's ``if (Error=1)`` tests Cluster's Error_1, MM-11)."""
    if df_model is None or len(df_model) == 0 or len(df_model) != len(base_model):
        return None, None, 1
    w_share, w_specific = [], []
    for base, df in zip(base_model, df_model):
        if np.shape(base) != np.shape(df):
            return None, None, 1
        centres, indices, error = cluster(df, n)
        if error:
            return None, None, error
        w_share.append(centres)
        w_specific.append(indices)
    return w_share, w_specific, OK


def df_quantize(base_model, weights_list, n: int) -> DFQuantization:
    """The record of a target model ``weights_list`` against ``base_model`` (both one array per layer):
    :func:`df_quantization` of the difference; InputError naming the Error."""
    df_model = [np.asarray(w, np.float64) - np.asarray(b, np.float64) for w, b in zip(weights_list, base_model)] \
        if len(weights_list) == len(base_model) else None
    w_share, w_specific, error = df_quantization(base_model, df_model, n)
    if error:
        raise InputError("DF_model", f"Error {error}", f"one finite difference per base layer, same shapes, n 1 .. "
                         f"{MAX_BITS} (Table 167; n {n})")
    return DFQuantization(int(n), tuple(w_share), tuple(w_specific))


def residual_decompress(w_share, w_specific, base_model):
    """Table 228: (Weights_target, Error): every layer's base weights plus its looked-up difference (the
    text's loop stops one layer short, MM-9), float32. Error 1: not one (centres, indices) per base layer."""
    if len(w_share) != len(base_model) or len(w_specific) != len(base_model):
        return None, 1
    targets = []
    for base, centres, indices in zip(base_model, w_share, w_specific):
        base = np.asarray(base, np.float32)
        if np.shape(indices) != base.shape:
            return None, 1
        targets.append(base + np.asarray(centres, np.float32)[np.asarray(indices)])
    return targets, OK


def df_weight_update(w_share, gradients, w_specific, lr: float = 1e-4) -> list[np.ndarray]:
    """Table 281 (DFQuantization_weight_update): each layer's centres minus ``lr`` times their cluster-mean
    gradients (:func:`cluster_mean_gradient`); the base stays frozen (§9.3.2)."""
    return [(c - lr * cluster_mean_gradient(g, i, c.size)).astype(np.float32)
            for c, g, i in zip(w_share, gradients, w_specific)]


# ------------------------------------------------------------------------- §9.3, multi-model data generation
def cluster_mean_gradient(gradient: np.ndarray, indices: np.ndarray, k: int) -> np.ndarray:
    """§9.3.2: the gradient of each of ``k`` centres, the mean of its members' weight gradients (the text's
    "sum of the class means" read as the mean, MM-10); an empty cluster's is 0."""
    flat = np.asarray(indices).ravel()
    sums = np.bincount(flat, weights=np.asarray(gradient, np.float64).ravel(), minlength=k)
    return sums / np.maximum(np.bincount(flat, minlength=k), 1)


def split_gradient(gradient: np.ndarray, axe: int, slice_indicator: int) -> tuple[np.ndarray, np.ndarray]:
    """Table 278: a model's gradient split along ``axe`` at W_share.shape(axe): (shared part, specific part)."""
    return _slice(gradient, axe, 0, slice_indicator), _slice(gradient, axe, slice_indicator)


def task_filter(channels: int, perc: float, models: int, unit_indicator: int) -> np.ndarray:
    """Table 279 (Method 2): the 0/1 filter over a layer holding every model's outputs that passes the shared
    outputs [0, share_end) and model ``unit_indicator``'s [share_end + idx·len, share_end + (idx+1)·len), with
    share_end = perc·C_out and len = (1 - perc)·C_out / models (rounded down)."""
    share_end = int(perc * channels)
    length = (channels - share_end) // models
    keep = np.zeros(channels, np.uint8)
    keep[:share_end] = 1
    keep[share_end + unit_indicator * length:share_end + (unit_indicator + 1) * length] = 1
    return keep
