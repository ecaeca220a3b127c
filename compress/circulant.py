"""Block-circulant weights with sign vectors: T/AI 115.1-2021 §7.4.2 (compression), §8.4.2 (decompression) and
§9.6.2 (making a trained layer block-circulant).

A layer's weight matrix M (rows = outputs, columns = inputs: y = M x) is cut into circ_size × circ_size blocks, each
circulant: row k of a block is its first row rotated right by k (§8.4.2.1, ``circ_shift``), so
block[k][t] = v[(t − k) mod L]. Only the first row of every block is stored (§7.4.2.2): w_circ = M[::L], the
weights divided by L. The layer's input is multiplied element-wise by a ±1 sign vector first (§8.4.2.3), so the
layer computes y = C (s ⊙ x) = C·diag(s)·x.

The sign vectors come from one ±1 reference vector shared by the network and a length per layer (``len_list``,
§7.4.2.3); a layer's vector is the reference's first len_list[i] entries extended to its input length by cyclic
shift (method 1) or copy (method 2) (§8.4.2.2). The standard names no random generator, so the reference vector
and len_list are stored with the model (docs/structured.md).

A convolution's weight (C_out, C_in, k_h, k_w) is block-circulant per kernel tap over (C_out, C_in): its stored
form is weight[::L], every L-th filter, and its sign vector runs over the input channels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SHIFT_EXTENSION, COPY_EXTENSION = 1, 2          # §8.4.2.2, Table 263


@dataclass(frozen=True)
class SignVectors:
    """The network's sign-vector records (§7.4.2.3): the ±1 reference vector and each layer's length."""

    base_sign_vector_network: np.ndarray
    len_list: tuple[int, ...]


def circ_shift(vector, shift: int) -> np.ndarray:
    """``vector`` rotated right by ``shift`` (§8.4.2.1, Tables 258-259): element i moves to (i + shift) mod L."""
    return np.roll(np.asarray(vector), shift)


def _check_blocks(shape: tuple[int, ...], circ_size: int) -> None:
    rows, columns = shape[0], shape[1]
    if circ_size < 1 or rows % circ_size or columns % circ_size:
        raise ValueError(f"circ_size {circ_size} must divide both the outputs ({rows}) and the inputs ({columns})")


def compress_weight_to_w_circ(weight, circ_size: int) -> np.ndarray:
    """The first row of every block (§7.4.2.2, Table 207): rows 0, L, 2L, ... of the (outputs, inputs, ...) weight.
    Lossless only for a weight that is block-circulant (``decompress_w_circ_to_weight`` of something)."""
    array = np.asarray(weight)
    _check_blocks(array.shape, circ_size)
    return array[::circ_size].copy()


def decompress_w_circ_to_weight(w_circ, circ_size: int) -> np.ndarray:
    """The whole weight from its blocks' first rows (§8.4.2.1, Table 257): row k of block (i, j) is the first row
    rotated right by k. Trailing axes (a convolution's kernel taps) are carried along."""
    stored = np.asarray(w_circ)
    if circ_size < 1 or stored.ndim < 2 or stored.shape[1] % circ_size:
        raise ValueError(f"circ_size {circ_size} must divide the inputs ({stored.shape[1:2]})")
    blocks = stored.reshape(stored.shape[0], stored.shape[1] // circ_size, circ_size, *stored.shape[2:])
    rows = [np.roll(blocks, k, axis=2) for k in range(circ_size)]          # (block row, block column, L, ...)
    stacked = np.stack(rows, axis=1)                                        # (block row, k, block column, L, ...)
    return stacked.reshape(stored.shape[0] * circ_size, stored.shape[1], *stored.shape[2:])


def project_to_block_circulant(weight, circ_size: int) -> np.ndarray:
    """The block-circulant weight nearest ``weight`` (least squares), as its first rows: each stored element is the
    mean of the L elements that share it, the average §9.6.2 (Table 314) applies to their gradients."""
    array = np.asarray(weight, np.float64)
    _check_blocks(array.shape, circ_size)
    blocks = array.reshape(array.shape[0] // circ_size, circ_size, array.shape[1] // circ_size, circ_size,
                           *array.shape[2:])
    aligned = [np.roll(blocks[:, k], -k, axis=2) for k in range(circ_size)]   # row k rotated back onto row 0
    mean = np.mean(aligned, axis=0)
    return mean.reshape(array.shape[0] // circ_size, array.shape[1], *array.shape[2:])


def generate_len_list(input_lengths, circ_sizes, rng: np.random.Generator) -> tuple[int, ...]:
    """One random length per layer, uniform in [circ_size, input length] (§7.4.2.3 a, Table 208)."""
    lengths = []
    for length, circ_size in zip(input_lengths, circ_sizes, strict=True):
        if not 1 <= circ_size <= length:
            raise ValueError(f"circ_size {circ_size} must lie in 1 .. the input length {length}")
        lengths.append(int(rng.integers(circ_size, length, endpoint=True)))
    return tuple(lengths)


def generate_base_sign_vector_network(len_list, rng: np.random.Generator) -> np.ndarray:
    """The network's ±1 reference vector, as long as the longest layer length (§7.4.2.3 b-c, Table 210): a
    Bernoulli(0.5) draw with 0 mapped to −1."""
    if not len_list:
        raise ValueError("len_list is empty")
    return np.where(rng.binomial(1, 0.5, max(len_list)) < 0.5, -1, 1).astype(np.int8)


def extend_base_to_sign(base_sign_vector, len_extend: int, method: int) -> np.ndarray:
    """``base_sign_vector`` extended to ``len_extend`` (§8.4.2.2, Tables 262-263): block b of its length is the base
    rotated right by b (method 1) or the base itself (method 2); the last block is cut to fit."""
    base = np.asarray(base_sign_vector)
    if method not in (SHIFT_EXTENSION, COPY_EXTENSION):
        raise ValueError(f"extension method {method} is not 1 (cyclic shift) or 2 (copy)")
    if base.size == 0 or len_extend < 0:
        raise ValueError(f"cannot extend a base of {base.size} entries to {len_extend}")
    blocks = [circ_shift(base, b) if method == SHIFT_EXTENSION else base
              for b in range(-(-len_extend // base.size))]
    return np.concatenate(blocks)[:len_extend] if blocks else base[:0].copy()


def generate_sign_vector_list(signs: SignVectors, extend_list, len_target) -> list[np.ndarray]:
    """Each layer's sign vector: the reference's first len_list[i] entries extended to len_target[i] by
    extend_list[i] (§8.4.2.2, Table 260)."""
    base = signs.base_sign_vector_network
    return [extend_base_to_sign(base[:length], target, method)
            for length, method, target in zip(signs.len_list, extend_list, len_target, strict=True)]


def cal_sign_circ(layer_in, weight, sign_vector, bias=None) -> np.ndarray:
    """One fully connected layer with its sign vector (§8.4.2.3, Table 265): weight · (layer_in ⊙ sign) + bias,
    ``weight`` the decompressed (outputs, inputs) matrix."""
    out = np.asarray(weight) @ (np.asarray(layer_in) * np.asarray(sign_vector))
    return out if bias is None else out + np.asarray(bias)


def signed_weight(weight, sign_vector) -> np.ndarray:
    """The dense weight a layer with a sign vector amounts to: C·diag(s), the sign on each input (column)."""
    array = np.asarray(weight)
    signs = np.asarray(sign_vector).reshape(1, -1, *([1] * (array.ndim - 2)))
    return array * signs


def w_circ_gradient(dense_gradient, sign_vector, circ_size: int) -> np.ndarray:
    """The update of the first rows from the loss gradient of the dense weight C·diag(s) (§9.6.2, Table 314): the
    gradient of C is the dense one times the signs, and each stored element takes the mean over the L positions
    that share it (the exact gradient is L times this; the standard averages)."""
    return project_to_block_circulant(signed_weight(dense_gradient, sign_vector), circ_size)
