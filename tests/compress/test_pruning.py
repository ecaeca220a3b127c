"""structured_sparse / Un_structured_sparse (T/AI 115.1-2021 Tables 202, 252): the round trips, worked examples
of the pseudo-code, and the decisions on its defects (docs/pruning.md, PR-1 … PR-6)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from aipu.compress import (PruneGranularity, StructuredSparsity, as_matrix, compact, from_matrix, masked, restore,
                           structured_sparse, un_structured_sparse)
from aipu.sim.machine.errors import InputError

fast = settings(max_examples=60, deadline=None)
ROW, COLUMN = PruneGranularity.ROW, PruneGranularity.COLUMN


@st.composite
def pruned_tensors(draw, granularity):
    """A weight tensor of rank 1-4, an axis for N, a bias and a mask keeping at least one row or column."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple))
    w = draw(arrays(np.float32, shape, elements=st.floats(-4, 4, width=32)))
    n_dim = draw(st.integers(0, len(shape) - 1))
    rows = shape[n_dim]
    length = rows if granularity == ROW else w.size // rows
    mask = draw(arrays(np.uint8, length, elements=st.integers(0, 1)))
    mask[draw(st.integers(0, length - 1))] = 1
    b = draw(arrays(np.float32, rows, elements=st.floats(-4, 4, width=32)))
    return w, b, StructuredSparsity(granularity, n_dim, shape, mask)


@fast
@given(st.sampled_from([ROW, COLUMN]).flatmap(pruned_tensors))
def test_restore_of_compact_is_the_masked_tensor_exactly(case):
    w, b, record = case
    w_o, b_o = compact(w, b, record)
    assert w_o.shape == record.compacted_shape()
    w_u, b_u = restore(w_o, b_o, record)
    w_m, b_m = masked(w, b, record)
    assert w_u.shape == w.shape and w_u.dtype == w.dtype
    assert np.array_equal(w_u, w_m) and np.array_equal(b_u, b_m)
    assert np.array_equal(compact(w_u, b_u, record)[0], w_o)     # compaction of the restored tensor: same bytes


@fast
@given(st.sampled_from([ROW, COLUMN]).flatmap(pruned_tensors))
def test_the_mask_keeps_exactly_its_rows_or_columns(case):
    w, _, record = case
    matrix = as_matrix(w, record.n_dim)
    kept = compact(w, None, record)[0]
    if record.granularity == ROW:
        assert np.array_equal(as_matrix(kept, record.n_dim), matrix[record.mask == 1])
    else:
        assert np.array_equal(kept, matrix[:, record.mask == 1])
    assert np.array_equal(from_matrix(matrix, w.shape, record.n_dim), w)


def test_row_pruning_worked_example():
    """Table 202, granularity 2, on a (3, 2, 1, 2) tensor with N on axis 0: filter 1 goes with its bias."""
    w = np.arange(12, dtype=np.float32).reshape(3, 2, 1, 2)
    b = np.array([10.0, 11.0, 12.0], np.float32)
    (w_o,), (b_o,) = structured_sparse([w], [b], [[1, 0, 1]], 0, ROW)
    assert w_o.shape == (2, 2, 1, 2)
    assert np.array_equal(w_o.ravel(), [0, 1, 2, 3, 8, 9, 10, 11]) and np.array_equal(b_o, [10, 12])
    (w_u,), (b_u,) = un_structured_sparse([w_o], [b_o], [[1, 0, 1]], 0, ROW, [w.shape])
    assert np.array_equal(w_u[1], np.zeros((2, 1, 2))) and np.array_equal(b_u, [10, 0, 12])


def test_row_pruning_with_n_on_another_axis():
    """N_dim: a (C, N) matrix pruned along its second axis (the layout is not always NCHW)."""
    w = np.arange(6.0).reshape(2, 3)
    (w_o,), _ = structured_sparse([w], None, [[0, 1, 1]], 1, ROW)
    assert np.array_equal(w_o, [[1, 2], [4, 5]])


def test_column_pruning_follows_the_mask_not_the_zero_test():
    """PR-3: the mask says which columns go. A kept column that happens to be all zero stays (the literal
    zero test of Table 202 would drop it and leave the inverse one column short); a removed column may be
    non-zero. The result is the (N, kept) matrix, not the original shape."""
    w = np.array([[[[1.0, 0.0, 3.0]]], [[[4.0, 0.0, 6.0]]]])       # (2, 1, 1, 3): column 1 all zero
    record = StructuredSparsity(COLUMN, 0, w.shape, [1, 1, 0])
    w_o, b_o = compact(w, np.array([7.0, 8.0]), record)
    assert np.array_equal(w_o, [[1, 0], [4, 0]]) and np.array_equal(b_o, [7, 8])
    assert record.skip_column == (2,)
    w_u, _ = restore(w_o, None, record)
    assert np.array_equal(w_u, [[[[1, 0, 0]]], [[[4, 0, 0]]]])


def test_column_restore_puts_zeros_at_the_skipped_column():
    """PR-4: Table 252 writes the zeros to org_weights[:, new_col_idx], which would overwrite a restored column;
    the zeros belong at col_idx. Skip_Column (0-based) from the mask, or the mask from Skip_Column (PR-2)."""
    record = StructuredSparsity.from_skip_column((2, 4), [0, 2])
    assert np.array_equal(record.mask, [0, 1, 0, 1])
    (w_u,), (b_u,) = un_structured_sparse([np.array([[1.0, 2.0], [3.0, 4.0]])], [np.array([5.0, 6.0])],
                                          [record.mask], 0, COLUMN, [(2, 4)], skip_column=[(0, 2)])
    assert np.array_equal(w_u, [[0, 1, 0, 2], [0, 3, 0, 4]]) and np.array_equal(b_u, [5, 6])


@pytest.mark.parametrize("call, field", [
    (lambda: StructuredSparsity(1, 0, (2, 2), [1, 1]), "granularity"),
    (lambda: StructuredSparsity(4, 0, (2, 2), [1, 1]), "granularity"),
    (lambda: StructuredSparsity(ROW, 2, (2, 2), [1, 1]), "N_dim"),
    (lambda: StructuredSparsity(ROW, 0, (2, 2), [1, 2]), "mask"),
    (lambda: StructuredSparsity(COLUMN, 0, (2, 3), [1, 1]), "mask"),
    (lambda: StructuredSparsity.from_skip_column((2, 3), [3]), "Skip_Column"),
    (lambda: StructuredSparsity.from_skip_column((2, 3), [1, 1]), "Skip_Column"),
    (lambda: compact(np.zeros((3, 2)), None, StructuredSparsity(ROW, 0, (2, 2), [1, 0])), "W"),
    (lambda: compact(np.zeros((2, 2)), np.zeros(3), StructuredSparsity(ROW, 0, (2, 2), [1, 0])), "B"),
    (lambda: structured_sparse([np.zeros((2, 2))], None, [], 0, ROW), "S"),
    (lambda: un_structured_sparse([np.zeros((2, 1))], None, [[1, 0]], 0, COLUMN, [(2, 2)], [[0]]), "Skip_Column"),
])
def test_bad_records_are_refused_by_field(call, field):
    with pytest.raises(InputError) as error:
        call()
    assert error.value.field == field
