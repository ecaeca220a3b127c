"""Context selection and whole layers: the contexts each method picks, and round trips of every method and
estimator."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aipu.codec.deepcabac.reference.binarization import LevelLaw
from aipu.codec.deepcabac.reference.contexts import GREATER_ABOVE, SIG_METHODS, Neighbourhood, greater_key
from aipu.codec.deepcabac.reference.estimators import HevcEstimator
from aipu.codec.deepcabac.reference.layer_coder import (BinReader, ContextStore, DeepCabacOptions, decode_layer,
                                                        encode_layer)
from aipu.codec.errors import CodecError

QUICK = settings(max_examples=25, derandomize=True, deadline=None, database=None)
MATRIX = [[0, -2, 0, 0, 5],
          [3, 0, 0, -1, 0]]


def contexts_at(method: str, row: int, column: int, window: int = 3) -> int:
    around = Neighbourhood([v for line in MATRIX for v in line], 5)
    around.row, around.column = row, column
    around.previous = MATRIX[row][column - 1] if column else (MATRIX[row - 1][-1] if row else 0)
    return around.method_context(method, window)


def test_left_neighbour_is_unavailable_at_a_row_start_but_the_previous_weight_is_not():
    assert contexts_at("left", 1, 0) == 0 and contexts_at("previous", 1, 0) == 2      # 5 ends row 0
    assert contexts_at("left", 0, 2) == 1 and contexts_at("previous", 0, 2) == 1      # left of it: -2
    assert contexts_at("left", 1, 1) == 2


def test_template_combines_three_neighbours():
    # (x-1, y) = 0 -> 0, (x, y-1) = 0 -> 0, (x-1, y-1) = -2 -> 1: C = 9
    assert contexts_at("template", 1, 2) == 9
    # (x-1, y) = 3 -> 2, (x, y-1) = -2 -> 1, (x-1, y-1) = 0: C = 2 + 3
    assert contexts_at("template", 1, 1) == 5
    assert contexts_at("template", 0, 0) == 0


def test_distance_counts_zero_or_unavailable_positions_to_the_left():
    assert contexts_at("distance", 0, 4) == 2           # 0, 0, then -2
    assert contexts_at("distance", 1, 3) == 2           # 0, 0, then 3
    assert contexts_at("distance", 1, 4) == 0           # -1 next to it
    assert contexts_at("distance", 1, 1) == 0
    assert contexts_at("distance", 0, 1) == 3           # 0, then the row start: capped at the window
    assert contexts_at("distance", 0, 4, window=1) == 1


def test_greater_flags_split_by_sign_below_x_prime_only():
    key = greater_key(4, "position", 1)
    assert key(2, 3) == ("abs_level_greater_x", 2, 1)
    assert key(3, 4) == ("abs_level_greater_x", 3, None)
    assert greater_key(4, "shared", 0)(5, 9) == greater_key(4, "shared", 1)(6, 17)
    assert greater_key(4, "bypass", 0)(5, 9) is None


LEVELS = hnp.arrays(np.int32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=9),
                    elements=st.one_of(st.integers(-3, 3), st.integers(-3000, 3000), st.just(-(2**31 - 1))))
ESTIMATORS = st.sampled_from([("nnc", {}), ("nnc", {"parameter_set": 5}), ("hevc", {}), ("dual_rate", {}),
                              ("dual_rate", {"shift_fast": 2, "shift_slow": 5})])
LAWS = st.builds(LevelLaw, k0=st.integers(0, 3), x_prime=st.one_of(st.none(), st.integers(0, 20)),
                 remainder=st.sampled_from(["rem", "rem_prime"]))


@pytest.mark.parametrize("sig", SIG_METHODS)
@QUICK
@given(levels=LEVELS, estimator=ESTIMATORS, law=LAWS, above=st.sampled_from(GREATER_ABOVE),
       sign=st.sampled_from(["left", "previous", "template"]), split=st.integers(1, 30))
def test_every_context_method_and_estimator_round_trips(sig, levels, estimator, law, above, sign, split):
    options = DeepCabacOptions(sig_context=sig, sign_context=sign, law=law, greater_split=split,
                               greater_above=above, estimator=estimator[0], estimator_parameters=estimator[1])
    data = encode_layer(levels, options)
    assert np.array_equal(decode_layer(data, levels.shape, options), levels)


@QUICK
@given(levels=hnp.arrays(np.int8, st.tuples(st.integers(1, 6), st.integers(1, 30))), cap=st.integers(1, 200))
def test_known_maximum_round_trips(levels, cap):
    levels = np.clip(levels.astype(np.int32), -cap, cap)
    options = DeepCabacOptions(law=LevelLaw(x_prime=3, abs_max=cap))
    assert np.array_equal(decode_layer(encode_layer(levels, options), levels.shape, options), levels)


def test_the_template_sees_zero_columns():
    """Zero input channels (columns): only the template looks at the row above, and gains."""
    rng = np.random.default_rng(3)
    levels = np.round(rng.laplace(0, 1.5, (60, 60)) * (rng.random((1, 60)) < 0.5)).astype(np.int32)
    sizes = {sig: len(encode_layer(levels, DeepCabacOptions(sig_context=sig))) for sig in SIG_METHODS}
    assert sizes["template"] < 0.9 * min(size for sig, size in sizes.items() if sig != "template")


def test_encoder_refusals():
    with pytest.raises(ValueError, match="integers"):
        encode_layer(np.ones(3))
    with pytest.raises(ValueError, match="above the limit 4"):
        encode_layer(np.array([5]), DeepCabacOptions(law=LevelLaw(abs_max=4)))
    with pytest.raises(ValueError, match="sig_context"):
        DeepCabacOptions(sig_context="above")
    with pytest.raises(ValueError, match="sign_context"):
        DeepCabacOptions(sign_context="distance")


def test_decoder_errors_name_the_weight_and_element():
    levels = np.arange(-50, 50, dtype=np.int32).reshape(10, 10)
    data = encode_layer(levels)
    with pytest.raises(CodecError) as caught:
        decode_layer(data[: len(data) // 2], levels.shape)
    error = caught.value
    assert 0 < error.bit_position <= 4 * len(data) and error.element and "weight" in error.context
    with pytest.raises(CodecError, match="1 byte left"):
        decode_layer(data + b"\0", levels.shape)
    with pytest.raises(CodecError, match="terminating bin 0|stop bit|not zero|past the end"):
        decode_layer(data, (10, 9))


def test_reader_names_the_element_of_a_truncated_bin():
    reader = BinReader(b"\x7f\xff", ContextStore(lambda key: HevcEstimator()))
    with pytest.raises(CodecError) as caught:
        for _ in range(100):
            reader.decision(("sig_flag", 0))
    assert caught.value.element == "sig_flag" and caught.value.bit_position == 16
