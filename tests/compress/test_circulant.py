"""Block-circulant weights with sign vectors (T/AI 115.1-2021 §7.4.2, §8.4.2, §9.6.2): the derived vectors D5 and
D9, round trips, the least-squares fit, the sign vectors and the averaged gradient."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aipu.compress import circulant

QUICK = settings(max_examples=30, derandomize=True, deadline=None, database=None)


def test_d5_first_rows_expand_to_circulant_blocks_and_back():
    w_circ = np.array([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]])
    weight = circulant.decompress_w_circ_to_weight(w_circ, 3)
    assert weight.tolist() == [[1, 2, 3, 4, 5, 6], [3, 1, 2, 6, 4, 5], [2, 3, 1, 5, 6, 4],
                               [7, 8, 9, 10, 11, 12], [9, 7, 8, 12, 10, 11], [8, 9, 7, 11, 12, 10]]
    assert np.array_equal(circulant.compress_weight_to_w_circ(weight, 3), w_circ)


def test_d9_sign_extension_by_shift_and_by_copy():
    base = [1, -1, -1]
    assert circulant.extend_base_to_sign(base, 8, circulant.SHIFT_EXTENSION).tolist() == [1, -1, -1, -1, 1, -1, -1, -1]
    assert circulant.extend_base_to_sign(base, 8, circulant.COPY_EXTENSION).tolist() == [1, -1, -1, 1, -1, -1, 1, -1]


def test_circ_shift_moves_element_i_to_i_plus_shift():
    vector = np.arange(5)
    for shift in range(7):
        expected = np.zeros(5, int)
        for i in range(5):                         # Table 258's loop
            expected[(i + shift) % 5] = vector[i]
        assert np.array_equal(circulant.circ_shift(vector, shift), expected)


@QUICK
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2 ** 31 - 1))
def test_expansion_round_trips_and_the_fit_keeps_circulant_weights(circ_size, block_rows, block_columns, seed):
    rng = np.random.default_rng(seed)
    w_circ = rng.normal(size=(block_rows, block_columns * circ_size, 3, 3))
    weight = circulant.decompress_w_circ_to_weight(w_circ, circ_size)
    assert weight.shape == (block_rows * circ_size, block_columns * circ_size, 3, 3)
    assert np.array_equal(circulant.compress_weight_to_w_circ(weight, circ_size), w_circ)
    assert np.allclose(circulant.project_to_block_circulant(weight, circ_size), w_circ)
    for tap in range(9):                            # a convolution: every tap its own block-circulant matrix
        ky, kx = divmod(tap, 3)
        assert np.array_equal(weight[:, :, ky, kx],
                              circulant.decompress_w_circ_to_weight(w_circ[:, :, ky, kx], circ_size))


@QUICK
@given(st.integers(2, 4), st.integers(0, 2 ** 31 - 1))
def test_the_fit_is_least_squares(circ_size, seed):
    rng = np.random.default_rng(seed)
    weight = rng.normal(size=(2 * circ_size, 3 * circ_size))
    fitted = circulant.decompress_w_circ_to_weight(circulant.project_to_block_circulant(weight, circ_size),
                                                   circ_size)
    other = circulant.decompress_w_circ_to_weight(rng.normal(size=(2, 3 * circ_size)), circ_size)
    assert abs(np.sum((weight - fitted) * other)) < 1e-9          # the residual is orthogonal to every circulant


def test_sign_vectors_come_from_one_reference_vector():
    rng = np.random.default_rng(5)
    lengths = circulant.generate_len_list([16, 32, 8], [4, 4, 8], rng)
    assert 4 <= lengths[0] <= 16 and 4 <= lengths[1] <= 32 and lengths[2] == 8
    base = circulant.generate_base_sign_vector_network(lengths, rng)
    assert len(base) == max(lengths) and set(base.tolist()) <= {-1, 1}
    signs = circulant.SignVectors(base, lengths)
    vectors = circulant.generate_sign_vector_list(signs, [1, 2, 1], [16, 32, 8])
    for vector, length, target in zip(vectors, lengths, [16, 32, 8]):
        assert len(vector) == target and np.array_equal(vector[:length], base[:length])


def test_a_layer_multiplies_its_input_by_the_signs_first():
    rng = np.random.default_rng(1)
    weight, x, sign, bias = rng.normal(size=(4, 6)), rng.normal(size=6), np.array([1, -1, 1, 1, -1, -1]), rng.normal(size=4)
    assert np.allclose(circulant.cal_sign_circ(x, weight, sign, bias), circulant.signed_weight(weight, sign) @ x + bias)


def test_the_first_rows_gradient_is_the_dense_ones_averaged_over_shared_positions():
    rng = np.random.default_rng(2)
    circ_size, sign = 3, np.array([1, -1, 1, -1, -1, 1])
    w_circ, upstream, direction = rng.normal(size=(2, 6)), rng.normal(size=(6, 6)), rng.normal(size=(2, 6))

    def loss(first_rows):            # linear in the first rows: <upstream, C·diag(s)>
        return np.sum(upstream * circulant.signed_weight(circulant.decompress_w_circ_to_weight(first_rows, circ_size),
                                                         sign))

    derivative = loss(w_circ + direction) - loss(w_circ)
    averaged = circulant.w_circ_gradient(upstream, sign, circ_size)
    assert np.isclose(np.sum(circ_size * averaged * direction), derivative)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="must divide"):
        circulant.compress_weight_to_w_circ(np.zeros((6, 4)), 3)
    with pytest.raises(ValueError, match="extension method 3"):
        circulant.extend_base_to_sign([1, -1], 4, 3)
    with pytest.raises(ValueError, match="circ_size 9"):
        circulant.generate_len_list([8], [9], np.random.default_rng(0))
