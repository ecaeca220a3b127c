"""NNCodec's layer payload (ISO/IEC 15938-17 DeepCABAC as NNCodec 2.1.3 writes it), bit-exact.

The setting is the one NNCodec's own pipeline uses for an integer layer: profile 0, scan order 0, no
dependent quantisation, no codebook, ``cabac_unary_length`` N (NNCodec's default 11). Within it NNC is one
choice of the patent's method (docs/deepcabac.md §4):

* sig_flag and sign_flag contexts from the previous level in coding order, across row ends (3 + 3);
* the unary run has N flags at X = 1..N with two contexts by sign each, then flags at X = N+1, N+3, N+7, ...
  (k grows once X > N) with one context per position, then rem' in k bypass bins;
* every context is NNCodec's estimator with one of nine parameter sets, which the encoder chooses per context
  and sends first: in NNC's context order (3 sig, 3 sign, 2N by position and sign, 31 above N), a flag in
  a context of its own (1 = not the default set), then the set's index - 1 in 3 bypass bins.

The payload ends with the arithmetic coder's termination. :func:`encode_nnc_layer` chooses each context's
parameter set by the estimated cost of that context's bins under each set (our own rule; NNCodec estimates
with its rate table, so the two encoders may choose differently; any choice decodes).
"""
from __future__ import annotations

import math
from functools import cache

import numpy as np

from .binarization import LevelLaw
from .estimators import NncEstimator
from .layer_coder import (BinReader, BinWriter, ContextStore, DeepCabacOptions, code_levels, finish_stream,
                          integer_levels, matrix_shape)
from .tables import NNC_LPS_RANGE, NNC_PARAMETER_SETS

DEFAULT_UNARY_LENGTH = 11           # cabac_unary_length_minus1 = 10
MAX_UNARY_LENGTH = 256              # cabac_unary_length_minus1 is u(8)
CONTEXTS_ABOVE = 31                 # flags above N with contexts of their own
PARAMETER_FLAG = ("estimator_parameter_flag",)
PARAMETER_BITS = 3
PARAMETER_PENALTY = float(PARAMETER_BITS)   # bits a non-default set costs to send


def nnc_options(unary_length: int = DEFAULT_UNARY_LENGTH) -> DeepCabacOptions:
    """The patent's method with NNC's choices (module docstring)."""
    if not 1 <= unary_length <= MAX_UNARY_LENGTH:
        raise ValueError(f"cabac_unary_length must be 1..{MAX_UNARY_LENGTH}, got {unary_length}")
    return DeepCabacOptions(sig_context="previous", sign_context="previous",
                            law=LevelLaw(k0=0, x_prime=unary_length, remainder="rem_prime"),
                            greater_split=unary_length + 1, greater_above="position", estimator="nnc")


def signalled_contexts(unary_length: int) -> list[tuple]:
    """The context keys whose parameter sets the payload sends, in NNC's order."""
    greater = "abs_level_greater_x"
    return ([("sig_flag", state) for state in range(3)] + [("sign_flag", state) for state in range(3)]
            + [(greater, j, negative) for j in range(unary_length) for negative in (0, 1)]
            + [(greater, unary_length + j, None) for j in range(CONTEXTS_ABOVE)])


def decode_nnc_layer(data: bytes, shape: tuple[int, ...], unary_length: int = DEFAULT_UNARY_LENGTH) -> np.ndarray:
    """The int32 levels of one layer of ``shape`` from NNCodec's payload; it must end where ``data`` ends."""
    options = nnc_options(unary_length)
    chosen: dict = {}
    reader = BinReader(data, ContextStore(lambda key: NncEstimator(chosen.get(key, 0))))
    for key in signalled_contexts(unary_length):
        if reader.decision(PARAMETER_FLAG):
            chosen[key] = 1 + reader.bypass(PARAMETER_BITS)
    levels = [0] * math.prod(shape)
    code_levels(reader, options, levels, matrix_shape(tuple(shape))[1])
    finish_stream(reader.engine, data)
    return np.array(levels, np.int32).reshape(shape)


def encode_nnc_layer(levels, unary_length: int = DEFAULT_UNARY_LENGTH, choose_parameters: bool = True) -> bytes:
    """NNCodec's payload for one layer of integer levels (int32 range); ``choose_parameters=False`` keeps
    every context at the default set (NNCodec's param_opt off)."""
    options = nnc_options(unary_length)
    array = integer_levels(levels, options.law.limit)
    flat, columns = array.ravel().tolist(), matrix_shape(array.shape)[1]
    chosen = choose_parameter_sets(options, flat, columns) if choose_parameters else {}
    writer = BinWriter(ContextStore(lambda key: NncEstimator(chosen.get(key, 0))))
    for key in signalled_contexts(unary_length):
        if writer.decision(PARAMETER_FLAG, int(key in chosen)):
            writer.bypass(PARAMETER_BITS, chosen[key] - 1)
    code_levels(writer, options, flat, columns)
    return writer.engine.finish()


class BinRecorder:
    """A bin coder that codes nothing and keeps each context's bins in order."""

    bit_position = 0

    def __init__(self) -> None:
        self.bins: dict = {}

    def decision(self, key, bin_value: int) -> int:
        self.bins.setdefault(key, []).append(bin_value)
        return bin_value

    def bypass(self, count: int, value: int) -> int:
        return value


def choose_parameter_sets(options: DeepCabacOptions, levels: list[int], columns: int) -> dict:
    """Per context that codes bins, the parameter set (1..8) whose estimated cost plus PARAMETER_PENALTY is
    below the default set's; contexts best left at 0 are absent."""
    recorder = BinRecorder()
    code_levels(recorder, options, list(levels), columns)
    chosen = {}
    for key, bins in recorder.bins.items():
        costs = [bins_cost(bins, parameter_set) + (PARAMETER_PENALTY if parameter_set else 0.0)
                 for parameter_set in range(len(NNC_PARAMETER_SETS))]
        best = min(range(len(costs)), key=costs.__getitem__)
        if best:
            chosen[key] = best
    return chosen


@cache
def lps_bits() -> tuple[tuple[float, float], ...]:
    """Per probability level |S0plusS1 >> 7|, the estimated bits of an MPS and of an LPS: the LPS range over
    the range, averaged over the eight range intervals (each at its middle)."""
    costs = []
    for level in range(32):
        probability = sum(row[level] / (256 + 32 * band + 16) for band, row in enumerate(NNC_LPS_RANGE)) / 8
        costs.append((-math.log2(1 - probability), -math.log2(probability)))
    return tuple(costs)


def bins_cost(bins: list[int], parameter_set: int) -> float:
    """Estimated bits of coding ``bins`` in one context of ``parameter_set``."""
    estimator, table, total = NncEstimator(parameter_set), lps_bits(), 0.0
    for bin_value in bins:
        total += table[abs(estimator.total >> 7)][int(bin_value != estimator.mps())]
        estimator.update(bin_value)
    return total
