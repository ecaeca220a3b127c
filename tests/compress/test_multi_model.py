"""Multi-model compression (T/AI 115.1-2021 §7.1, §8.1, §9.3): the round trips within their bounds, the Error
codes of Tables 164, 167, 220 and 228, and the decisions on the text's defects (docs/multimodel.md, MM-n)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from aipu.compress.multi_model import (COUNT_MISMATCH, OK, SHAPE_MISMATCH, DecompressMultimodel, DFQuantization,
                                       cluster, cluster_mean_gradient, decompress_all, decompress_one,
                                       df_quantization, df_quantize, df_weight_update, kmeans,
                                       multilayer_weight_regroup, nearest, regroup, residual_decompress,
                                       split_gradient, switch, task_filter)
from aipu.sim.machine.errors import InputError

fast = settings(max_examples=50, deadline=None)
finite = st.floats(-4, 4, width=32)


@st.composite
def shared_models(draw):
    """2-4 models of one layer shape whose first ``slice_indicator`` entries along ``axe`` are equal."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple))
    axe = draw(st.integers(0, len(shape) - 1))
    cut = draw(st.integers(0, shape[axe]))
    models = draw(st.integers(2, 4))
    weights = [draw(arrays(np.float32, shape, elements=finite)) for _ in range(models)]
    biases = [draw(arrays(np.float32, shape[0], elements=finite)) for _ in range(models)]
    for w, b in zip(weights[1:], biases[1:]):
        index = [slice(None)] * len(shape)
        index[axe] = slice(0, cut)
        w[tuple(index)] = weights[0][tuple(index)]
        if axe == 0:
            b[:cut] = biases[0][:cut]
    return weights, biases, axe, cut


@fast
@given(shared_models())
def test_sharing_round_trips_exactly_when_the_shared_slices_agree(case):
    weights, biases, axe, cut = case
    record = regroup(weights, biases, axe, cut)
    assert record.slice_indicator == cut and record.models == len(weights)
    restored, restored_b, indicator, error = decompress_all(record.w_share, record.b_share, record.w_specific,
                                                            record.b_specific, axe)
    assert error == OK and indicator == cut
    for m, (w, b) in enumerate(zip(weights, biases)):
        assert np.array_equal(restored[m], w) and np.array_equal(restored_b[m], b)
        one_w, one_b = decompress_one(record, m)
        assert np.array_equal(one_w, w) and np.array_equal(one_b, b)
    stored = record.shared_bytes() + sum(record.specific_bytes(m) for m in range(record.models))
    separate = sum(w.nbytes + b.nbytes for w, b in zip(weights, biases))
    assert stored == separate - (len(weights) - 1) * record.shared_bytes()


@fast
@given(shared_models(), st.data())
def test_switch_rewrites_only_the_specific_part(case, data):
    weights, biases, axe, cut = case
    record = regroup(weights, biases, axe, cut)
    source, target = data.draw(st.integers(0, record.models - 1)), data.draw(st.integers(0, record.models - 1))
    w, b = decompress_one(record, source)
    shared_before = np.moveaxis(w, axe, 0)[:cut].copy()
    written = switch(w, b, record, target)
    assert np.array_equal(w, weights[target]) and np.array_equal(b, biases[target])
    assert np.array_equal(np.moveaxis(w, axe, 0)[:cut], shared_before)
    assert written == record.specific_bytes(target)


def test_regroup_worked_example_and_the_corrected_defects():
    """Two 4-filter layers sharing their first 2 filters: the text's `Error==1` test (MM-1) would return
    nothing, and its Weights_list[0] (MM-2) would give model 1 model 0's filters."""
    w0 = np.arange(8, dtype=np.float32).reshape(4, 2)
    w1 = w0.copy()
    w1[2:] += 100
    b0, b1 = np.array([1, 2, 3, 4], np.float32), np.array([1, 2, 30, 40], np.float32)
    w_share, w_specific, b_share, b_specific, error = multilayer_weight_regroup([w0, w1], [b0, b1], 0, 2)
    assert error == OK
    assert w_share.tolist() == [[0, 1], [2, 3]]
    assert w_specific[1].tolist() == [[104, 105], [106, 107]]          # model 1's, not model 0's (MM-2)
    assert b_share.tolist() == [1, 2] and b_specific[1].tolist() == [30, 40]   # B_share is C (MM-5)
    # state 2 (axe is not the output channels): the biases stay whole, B_share is empty
    w_share, w_specific, b_share, b_specific, error = multilayer_weight_regroup([w0, w1], [b0, b1], 1, 1)
    assert error == OK and w_share.shape == (4, 1) and b_share.size == 0
    assert [b.tolist() for b in b_specific] == [b0.tolist(), b1.tolist()]
    # slice(t, axe, a, -1) runs to the end (MM-4): the last filter is kept
    assert w_specific[0].shape == (4, 1) and w_specific[0][:, 0].tolist() == [1, 3, 5, 7]


def test_regroup_error_codes():
    w, b = np.zeros((4, 2), np.float32), np.zeros(4, np.float32)
    assert multilayer_weight_regroup([w, w], [b], 0, 2)[-1] == COUNT_MISMATCH
    assert multilayer_weight_regroup([w, np.zeros((4, 3))], [b, b], 0, 2)[-1] == SHAPE_MISMATCH
    assert multilayer_weight_regroup([w, w], [b, np.zeros(5)], 0, 2)[-1] == SHAPE_MISMATCH
    assert multilayer_weight_regroup([w, w], [b, b], 0, 5)[-1] == SHAPE_MISMATCH
    assert multilayer_weight_regroup([w, w], [b, b], 2, 0)[-1] == SHAPE_MISMATCH
    assert all(value is None for value in multilayer_weight_regroup([w], [], 0, 0)[:4])
    with pytest.raises(InputError, match="Error 1"):
        regroup([w, w], [b], 0, 2)


def test_decompress_error_codes():
    share, spec = np.zeros((2, 3), np.float32), np.zeros((1, 3), np.float32)
    bias_share, bias_spec = np.zeros(2, np.float32), np.zeros(1, np.float32)
    assert decompress_all(share, bias_share, [spec, spec], [bias_spec], 0)[-1] == COUNT_MISMATCH
    assert decompress_all(share, bias_share, [spec, np.zeros((1, 4))], [bias_spec] * 2, 0)[-1] == SHAPE_MISMATCH
    assert decompress_all(share, bias_share, [spec], [np.zeros(2)], 0)[-1] == SHAPE_MISMATCH
    assert decompress_all(share, bias_share, [spec], [bias_spec], 0)[-1] == OK
    with pytest.raises(InputError, match="Error 2"):
        DecompressMultimodel(share, bias_share, (spec,), (np.zeros(3),), 0)
    record = DecompressMultimodel(share, bias_share, (spec,), (bias_spec,), 0)
    with pytest.raises(InputError, match="Unit_indicator"):
        decompress_one(record, 1)


def test_codebook_assignment_follows_derived_vector_d10():
    """D10 of the digest: centres [-0.45, 0, 0.45], the exact tie 0.225 goes to the lowest index."""
    assert nearest(np.array([0.3, -0.2, 0.225, -0.5, 0.1]), np.array([-0.45, 0.0, 0.45])).tolist() == [2, 1, 1, 0, 1]


def test_kmeans_starts_evenly_spaced_and_converges():
    values = np.array([0.0, 0.1, 0.2, 10.0, 10.1, 10.2])
    assert np.allclose(kmeans(values, 2), [0.1, 10.1])
    assert kmeans(np.array([3.0, 3.0, 1.0]), 4).tolist() == [1.0, 3.0]     # fewer distinct values than k


@fast
@given(st.lists(arrays(np.float32, st.tuples(st.integers(1, 5), st.integers(1, 5)), elements=finite),
                min_size=1, max_size=3), st.integers(1, 8), st.data())
def test_residual_round_trip_is_the_nearest_centre(base, n, data):
    """W_target = W_base + centres[index] where index is the nearest centre of dW: the error of every weight is
    its distance to the nearest centre (exact when dW has at most 2^n distinct values)."""
    targets = [data.draw(arrays(np.float32, b.shape, elements=finite)) for b in base]
    record = df_quantize(base, targets, n)
    restored, error = residual_decompress(record.w_share, record.w_specific, base)
    assert error == OK
    for b, t, r, centres in zip(base, targets, restored, record.w_share):
        assert centres.size <= 1 << n and r.dtype == np.float32
        df = t.astype(np.float64) - b
        bound = np.abs(df[..., None] - centres.astype(np.float64)).min(axis=-1)
        assert np.all(np.abs((r.astype(np.float64) - b) - df) <= bound + 1e-6 * (1 + np.abs(df)))
        if np.unique(df).size <= 1 << n:
            assert np.allclose(r, t, atol=1e-5)
    assert record.index_bytes() == sum(-(-t.size * n // 8) for t in targets)


def test_residual_error_codes():
    base = [np.zeros((2, 2), np.float32)]
    assert df_quantization(base, None, 2)[-1] == 1
    assert df_quantization(base, [np.zeros((2, 2)), np.zeros(2)], 2)[-1] == 1      # not one per base layer
    assert df_quantization(base, [np.zeros(3)], 2)[-1] == 1
    assert df_quantization(base, [np.full((2, 2), np.nan)], 2)[-1] == 1
    assert cluster(np.zeros(4), 0)[-1] == 1 and cluster(np.zeros(4), 9)[-1] == 1
    assert residual_decompress([np.zeros(2)], [], base)[-1] == 1
    assert residual_decompress([np.zeros(2)], [np.zeros((2, 3), np.uint8)], base)[-1] == 1
    with pytest.raises(InputError, match="n"):
        DFQuantization(9, (), ())
    with pytest.raises(InputError, match="indices"):
        DFQuantization(1, (np.zeros(2),), (np.array([2]),))


def test_all_layers_are_quantized_not_all_but_the_last():
    """Tables 167 and 228 loop to len - 1 (MM-9): every layer here, the last one included."""
    base = [np.zeros(3, np.float32), np.zeros(3, np.float32)]
    targets = [np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)]
    record = df_quantize(base, targets, 2)
    restored, _ = residual_decompress(record.w_share, record.w_specific, base)
    assert [r.tolist() for r in restored] == [[1, 2, 3], [4, 5, 6]]


def test_cluster_mean_gradient_and_weight_update():
    """§9.3.2: a centre moves by lr times the mean of its members' gradients (MM-10); empty clusters stay."""
    indices = np.array([[0, 0], [1, 3]])
    gradient = np.array([[1.0, 3.0], [5.0, 7.0]])
    assert cluster_mean_gradient(gradient, indices, 4).tolist() == [2.0, 5.0, 0.0, 7.0]
    updated = df_weight_update([np.array([0.0, 1.0, 2.0, 3.0], np.float32)], [gradient], [indices], lr=0.5)
    assert updated[0].tolist() == [-1.0, -1.5, 2.0, -0.5]


def test_split_gradient_and_task_filter():
    gradient = np.arange(12.0).reshape(4, 3)
    shared, specific = split_gradient(gradient, 0, 1)
    assert shared.tolist() == [[0, 1, 2]] and specific.shape == (3, 3)
    assert task_filter(8, 0.5, 2, 1).tolist() == [1, 1, 1, 1, 0, 0, 1, 1]
