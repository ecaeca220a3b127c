"""Low-rank weights: T/AI 115.1-2021 §7.4.3 (decomposition), §8.4.3 (reconstruction) and §9.6.3.2 (the ranks).

A fully connected or 1×1 convolution weight M (outputs × inputs) becomes two factors by a truncated SVD (Table 216):
M ≈ w2 · w1, w2 = U_k·diag(σ_k) (outputs × core_size), w1 = V_kᵀ (core_size × inputs), so the layer runs as two
smaller ones. A k×k convolution (C_out, C_in, k_h, k_w) becomes a block-term decomposition (BTD, Tables 212-214):
``groups`` terms, each a Tucker-2 product over the output and input channels,

    W[o, c, s] ≈ Σ_g Σ_a Σ_b A_g[o, a] · G_g[a, b, s] · B_g[c, b]      (a < r2, b < r1, s a kernel tap)

with r1 = R1 / groups and r2 = R2 / groups, found by fitting each term by HOSVD to the residual of the others,
in turn, until the error stops falling. It runs as three convolutions (§9.6.3.2): 1×1 C_in → R1 (the B_g), k×k
R1 → R2 in ``groups`` groups (the G_g, with the layer's stride, padding and dilation), 1×1 R2 → C_out (the A_g,
with the layer's bias). The standard's pseudo-code disagrees with this in its shapes and concatenation axes; the
formula above is the one consistent with §8.4.3.2 and §9.6.3.2 (docs/structured.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_ITERATIONS = 1000            # §7.4.3.2's cap
TOLERANCE = 1e-5                 # ... and its tolerance on the change of the relative error


@dataclass(frozen=True)
class BlockTerms:
    """A BTD of a convolution weight as the three convolutions' weights: ``first`` (R1, C_in, 1, 1), ``middle``
    (R2, r1, k_h, k_w) in ``groups`` groups, ``last`` (C_out, R2, 1, 1); ``relative_error`` = ‖W − Ŵ‖ / ‖W‖."""

    first: np.ndarray
    middle: np.ndarray
    last: np.ndarray
    groups: int
    relative_error: float
    iterations: int


def core_size_for_ratio(outputs: int, inputs: int, ratio: float) -> int:
    """The core size that keeps ``ratio`` of a (outputs × inputs) matrix's parameters, eq. (52):
    W·H·ratio = W·core_size + core_size·H, rounded down, at least 1."""
    _check_ratio(ratio)
    return max(1, math.floor(ratio * outputs * inputs / (outputs + inputs)))


def ranks_for_ratio(out_channels: int, in_channels: int, kernel_taps: int, ratio: float,
                    groups: int) -> tuple[int, int]:
    """(R1, R2) that keep ``ratio`` of a convolution's parameters, eq. (51):
    C_out·C_in·K²·ratio = R1·C_in + R2·(R1/groups)·K² + C_out·R2, with R1 ∝ C_in and R2 ∝ C_out as §9.6.3.2
    advises: R1 = ρ·C_in, R2 = ρ·C_out, ρ the positive root of the quadratic, each rank rounded down to a multiple
    of ``groups`` (at least ``groups``)."""
    _check_ratio(ratio)
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    quadratic = in_channels * out_channels * kernel_taps / groups
    linear = in_channels ** 2 + out_channels ** 2
    constant = -ratio * out_channels * in_channels * kernel_taps
    rho = (-linear + math.sqrt(linear ** 2 - 4 * quadratic * constant)) / (2 * quadratic)

    def rank(channels: int) -> int:
        return max(groups, math.floor(rho * channels / groups) * groups)

    return rank(in_channels), rank(out_channels)


def _check_ratio(ratio: float) -> None:
    if not 0 < ratio <= 1:
        raise ValueError(f"the ratio of parameters kept must lie in (0, 1], got {ratio}")


def svd_process(weight, core_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(w1, w2) with weight ≈ w2 · w1 (Table 216): w1 = V_kᵀ (core_size × inputs), w2 = U_k·diag(σ_k)."""
    matrix = np.asarray(weight, np.float64)
    if matrix.ndim != 2 or not 1 <= core_size <= min(matrix.shape):
        raise ValueError(f"core_size {core_size} must lie in 1 .. {min(matrix.shape)} for a {matrix.shape} matrix")
    u, sigma, vt = np.linalg.svd(matrix, full_matrices=False)
    return vt[:core_size], u[:, :core_size] * sigma[:core_size]


def svd_decompression(w1, w2) -> np.ndarray:
    """The matrix the two factors stand for (Tables 269-270)."""
    return np.asarray(w2) @ np.asarray(w1)


def _leading_vectors(matrix: np.ndarray, count: int) -> np.ndarray:
    u, _, _ = np.linalg.svd(matrix, full_matrices=False)
    return u[:, :count]


def hosvd(tensor: np.ndarray, r1: int, r2: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Tucker-2 term (Table 214) of a (C_out, C_in, taps) tensor: A (C_out × r2) and B (C_in × r1) the leading
    singular vectors of its mode-0 and mode-1 unfoldings, G = the tensor projected on them (r2 × r1 × taps)."""
    out_channels, in_channels, taps = tensor.shape
    a = _leading_vectors(tensor.reshape(out_channels, -1), r2)
    b = _leading_vectors(tensor.transpose(1, 0, 2).reshape(in_channels, -1), r1)
    core = np.einsum("oa,ocs,cb->abs", a, tensor, b)
    return a, core, b


def _term(a: np.ndarray, core: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("oa,abs,cb->ocs", a, core, b)


def btd_process(weight, ranks: tuple[int, int], groups: int) -> BlockTerms:
    """The block-term decomposition of a convolution weight (Table 213, as the module docstring states it)."""
    array = np.asarray(weight, np.float64)
    if array.ndim != 4:
        raise ValueError(f"a convolution weight has 4 axes, got {array.ndim}")
    rank_in, rank_out = ranks
    out_channels, in_channels, height, width = array.shape
    if groups < 1 or rank_in % groups or rank_out % groups:
        raise ValueError(f"R1 = {rank_in} and R2 = {rank_out} must be multiples of groups = {groups}")
    r1, r2 = rank_in // groups, rank_out // groups
    if r1 > in_channels or r2 > out_channels:
        raise ValueError(f"r1 = {r1} and r2 = {r2} must not exceed C_in = {in_channels} and C_out = {out_channels}")
    target = array.reshape(out_channels, in_channels, height * width)
    norm = float(np.linalg.norm(target)) or 1.0
    terms = [(np.zeros((out_channels, r2)), np.zeros((r2, r1, height * width)), np.zeros((in_channels, r1)))
             for _ in range(groups)]
    approximation = np.zeros_like(target)
    error, iterations = 1.0, 0
    while iterations < MAX_ITERATIONS:
        iterations += 1
        for index, term in enumerate(terms):
            others = approximation - _term(*term)
            terms[index] = hosvd(target - others, r1, r2)
            approximation = others + _term(*terms[index])
        new_error = float(np.linalg.norm(target - approximation)) / norm
        if abs(error - new_error) <= TOLERANCE:
            error = new_error
            break
        error = new_error
    first = np.concatenate([b.T for _, _, b in terms])[:, :, None, None]
    middle = np.concatenate([core for _, core, _ in terms]).reshape(rank_out, r1, height, width)
    last = np.concatenate([a for a, _, _ in terms], axis=1)[:, :, None, None]
    return BlockTerms(first, middle, last, groups, error, iterations)


def btd_decompression(terms: BlockTerms) -> np.ndarray:
    """The convolution weight the three factors stand for (Tables 267-268)."""
    rank_in, in_channels = terms.first.shape[:2]
    rank_out, r1, height, width = terms.middle.shape
    r2 = rank_out // terms.groups
    total = np.zeros((terms.last.shape[0], in_channels, height * width))
    for group in range(terms.groups):
        a = terms.last[:, group * r2:(group + 1) * r2, 0, 0]
        core = terms.middle[group * r2:(group + 1) * r2].reshape(r2, r1, height * width)
        b = terms.first[group * r1:(group + 1) * r1, :, 0, 0].T
        total += _term(a, core, b)
    return total.reshape(terms.last.shape[0], in_channels, height, width)


def svd_gradients(w1, w2, gradient) -> tuple[np.ndarray, np.ndarray]:
    """The loss gradients of (w1, w2) from ``gradient``, the loss gradient of the matrix w2 · w1 (§9.6.3.3 e)."""
    return np.asarray(w2).T @ gradient, gradient @ np.asarray(w1).T


def btd_gradients(terms: BlockTerms, gradient) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The loss gradients of (first, middle, last) from ``gradient``, the loss gradient of the weight
    ``btd_decompression(terms)`` stands for: the chain rule through each group's Tucker-2 product."""
    rank_in, in_channels = terms.first.shape[:2]
    rank_out, r1, height, width = terms.middle.shape
    r2 = rank_out // terms.groups
    upstream = np.asarray(gradient).reshape(terms.last.shape[0], in_channels, height * width)
    first, middle, last = np.zeros_like(terms.first), np.zeros_like(terms.middle), np.zeros_like(terms.last)
    for group in range(terms.groups):
        outs, ins = slice(group * r2, (group + 1) * r2), slice(group * r1, (group + 1) * r1)
        a = terms.last[:, outs, 0, 0]
        core = terms.middle[outs].reshape(r2, r1, height * width)
        b = terms.first[ins, :, 0, 0].T
        last[:, outs, 0, 0] = np.einsum("ocs,abs,cb->oa", upstream, core, b)
        middle[outs] = np.einsum("oa,ocs,cb->abs", a, upstream, b).reshape(r2, r1, height, width)
        first[ins, :, 0, 0] = np.einsum("oa,abs,ocs->cb", a, core, upstream).T
    return first, middle, last
