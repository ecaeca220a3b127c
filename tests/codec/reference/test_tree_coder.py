"""The four CU trees (codec/reference/tree_coder.py) at their edges: start depth at the leaves, odd sizes."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.codec.encoder import EncoderOptions
from aipu.codec.reference.headers import StreamHeader, Sublayer
from aipu.codec.reference.tree_coder import TREES
from tests.codec.syntax_streams import round_trip


@pytest.mark.parametrize("tree", TREES)
def test_start_depth_at_the_leaves_with_odd_sizes(tree):
    """startDepth = leaf level: the uni-tagtree's 2x2 group rule, odd edges, 1-wide CUs."""
    rng = np.random.default_rng(3)
    header = StreamHeader(integer_input=1, array1d_depth=4)
    options = EncoderOptions(trees=(tree,), codebook="off", start_depth="leaf", split="never", zdep="off")
    for c, k in ((1, 1), (1, 7), (5, 1), (9, 3)):
        levels = rng.integers(-3, 4, (2, c, k))
        levels[:, ::2, ::2] = 2                     # uniform 2x2 groups next to non-uniform ones
        round_trip(header, [Sublayer(dim=3, shape=(1, 2, c, k), levels=levels)], options)
