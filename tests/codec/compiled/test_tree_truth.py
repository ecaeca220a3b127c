"""The compiled encoder's pooled tree truth (codec/compiled/tree_coders.py) against the reference's numpy pooling."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from aipu.codec.compiled.tree_coders import pooled_levels, uniform_leaf_groups
from aipu.codec.reference.geometry import tree_shapes
from aipu.codec.reference.tree_coder import leaf_group_uniform, pool_levels

SHAPES = st.tuples(st.integers(1, 9), st.integers(1, 13), st.integers(1, 13))


@settings(max_examples=150, deadline=None)
@given(data=st.data(), shape=SHAPES, planar=st.booleans())
def test_pooled_levels_equal_the_reference(data, shape, planar):
    leaves = data.draw(arrays(np.int64, shape, elements=st.integers(-3, 3)))
    shapes = np.array(tree_shapes(*shape, planar=planar), dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(shapes.prod(axis=1))[:-1])).astype(np.int64)
    for use_max, reducer in ((True, np.maximum), (False, np.minimum)):
        expected = np.concatenate([level.ravel() for level in pool_levels(leaves, planar, reducer)])
        assert np.array_equal(pooled_levels(leaves, shapes, offsets, use_max), expected)


@settings(max_examples=150, deadline=None)
@given(magnitude=arrays(np.int64, SHAPES, elements=st.integers(0, 2)))
def test_uniform_leaf_groups_equal_the_reference(magnitude):
    assert np.array_equal(uniform_leaf_groups(magnitude), leaf_group_uniform(magnitude).astype(np.int8))
