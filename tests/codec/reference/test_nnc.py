"""nnc() (codec/reference/nnc.py): a stream of several layers, each choosing its own modes."""
from __future__ import annotations

import numpy as np

from aipu.codec.encoder import EncoderOptions
from aipu.codec.reference.headers import StreamHeader
from aipu.codec.reference.tree_coder import TREES
from tests.codec.syntax_streams import conv_sublayers, round_trip


def test_automatic_choice_round_trips_and_uses_several_modes():
    rng = np.random.default_rng(11)
    header = StreamHeader(integer_input=1, array1d_depth=9)
    subs = conv_sublayers(rng, r=3, s=3, c=30, k=21)
    subs[0].levels[:, 10:, 10:] = 0
    stats, _ = round_trip(header, subs, EncoderOptions(), layers=2)
    assert len(stats) == 2 and sum(stats[0].get(tree, 0) for tree in TREES) >= 1
