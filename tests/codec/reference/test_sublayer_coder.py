"""The CTUs of a weight sublayer (codec/reference/sublayer_coder.py): every tree, codebook, start depth, split,
escape mode and plane order round-trips through both encoders and both decoders.

The encoder is forced into one mode at a time (EncoderOptions with a single candidate) and the decoder's
mode statistics prove the path was taken.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from aipu.codec.encoder import EncoderOptions
from aipu.codec.errors import CodecError
from aipu.codec.reference.headers import StreamHeader
from aipu.codec.reference.sublayer_coder import zdep_from_queue, zdep_queue
from aipu.codec.reference.tree_coder import TREES
from tests.codec.syntax_streams import conv_sublayers, round_trip


FORCED = list(itertools.product(TREES, ("off", "on"), ("leaf", "root"), ("never", "always")))


@pytest.mark.parametrize("tree,codebook,start,split", FORCED)
def test_every_tree_codebook_start_depth_and_split(tree, codebook, start, split):
    rng = np.random.default_rng(abs(hash((tree, codebook, start, split))) % 2**32)
    header = StreamHeader(integer_input=1, array1d_depth=9)
    options = EncoderOptions(trees=(tree,), codebook=codebook, start_depth=start, split=split, zdep="off")
    stats, _ = round_trip(header, conv_sublayers(rng), options)
    modes = stats[0]
    assert modes[tree] >= 1
    assert modes.get("codebook", 0) >= (1 if codebook == "on" else 0)
    assert modes.get("direct", 0) >= (1 if codebook == "off" else 0)
    assert (modes.get("start_depth", 0) > 0) == (start == "root")
    assert (modes[tree] > 1) == (split == "always")
    if codebook == "on":
        assert modes.get("escapes", 0) >= 1
        if split == "always":
            assert modes.get("predicted_codebook", 0) >= 1


@pytest.mark.parametrize("tree", TREES)
@pytest.mark.parametrize("reorder", ("on", "off"))
def test_escape_modes_and_plane_reordering(tree, reorder):
    rng = np.random.default_rng(7)
    header = StreamHeader(integer_input=1, array1d_depth=9)
    options = EncoderOptions(trees=(tree,), codebook="on", escape_reorder=reorder, zdep="on", split="never")
    subs = conv_sublayers(rng, r=3, s=2, c=11, k=17, bias=False)
    subs[0].levels[[1, 4]] = 0                      # empty planes: the energy order moves them last
    stats, _ = round_trip(header, subs, options)
    assert (stats[0].get("escape_reorder", 0) > 0) == (reorder == "on")
    assert stats[0]["zdep_reorder"] == 1


def test_zdep_queue_round_trips_random_permutations():
    rng = np.random.default_rng(0)
    for zdepth in range(1, 30):
        for _ in range(10):
            perm = (0, *(1 + rng.permutation(zdepth - 1)))
            assert tuple(zdep_from_queue(zdep_queue(perm))) == perm
    for bad in ([-1, 5, -2], [-1, 0, -2], [-1, 2, 2]):
        with pytest.raises(CodecError):
            zdep_from_queue(bad)
