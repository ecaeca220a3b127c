"""The encoder's decisions (codec/encoder.py): codebooks, and the trial search against every fixed mode."""
from __future__ import annotations

import numpy as np
import pytest

from aipu import codec
from aipu.codec.encoder import (SAMPLE_EXTENT, SAMPLE_FRACTION, SEARCH_CHOICES, EncoderOptions, _sample,
                                build_codebook)
from aipu.codec.reference.headers import Sublayer
from aipu.codec.reference.tree_coder import TREES


def test_codebook_builder_puts_predicted_entries_first():
    values = np.array([0, 0, 0, 5, 5, -5, 3, 9, 9, 9, 9])
    cbook, predicted = build_codebook(values, [7, 9, 0, 9])
    assert predicted == (1, 2)
    assert cbook[:2] == (9, 0) and set(cbook) == {0, 5, -5, 3, 9}


def trained_like(seed: int, outputs: int, inputs: int) -> np.ndarray:
    """Laplacian 3x3 conv weights with per-output-channel scales, pruned output and dead input channels."""
    rng = np.random.default_rng(seed)
    scales = rng.gamma(2.0, 0.02, (outputs, 1, 1, 1))
    w = (rng.laplace(0, 1, (outputs, inputs, 3, 3)) * scales).astype(np.float32)
    w[rng.random(outputs) < 0.25] = 0
    w[:, rng.random(inputs) < 0.2] = 0
    return w


@pytest.mark.parametrize("search", SEARCH_CHOICES)
def test_encoder_choice_beats_every_single_fixed_mode(search):
    tensors = {"w": trained_like(6, 24, 40)}

    def size(encoder):      # bytes of the nnc() streams (the container index holds names and statistics)
        _, infos = codec.encode_with_info(tensors, codec.CodecOptions(bitdepth=6, encoder=encoder))
        return sum(info.length for info in infos)
    fixed = {(tree, book, start): size(EncoderOptions(trees=(tree,), codebook=book, start_depth=start,
                                                      split="never", zdep="off"))
             for tree in TREES for book in ("off", "on") for start in ("leaf", "root")}
    chosen = size(EncoderOptions(search=search))
    assert chosen < min(fixed.values()), (chosen, min(fixed.items(), key=lambda kv: kv[1]))


def test_the_sublayer_search_codes_one_mode_per_sublayer_chosen_on_a_spread_sample():
    """A sublayer of 256 sample blocks: one tree and one start depth for all its CUs, the cheapest on the sample
    (8 blocks from all over the sublayer); within a few tenths of a percent of the per-CU search."""
    tensors = {"w": trained_like(7, 512, 512)[:, :, 1, 1]}

    def coded(search):
        _, infos = codec.encode_with_info(tensors, codec.CodecOptions(bitdepth=6, encoder=EncoderOptions(
            search=search, split="never", codebook="off", zdep="off")))
        return infos[0]
    sublayer, per_cu = coded("sublayer"), coded("cu")
    trees = [tree for tree in TREES if sublayer.modes.get(tree)]
    assert len(trees) == 1 and "select_map_mode_3" not in sublayer.modes
    assert sublayer.length <= 1.005 * per_cu.length, (sublayer.length, per_cu.length)


def test_the_sample_stacks_evenly_spaced_whole_blocks_of_the_sublayer():
    levels = np.arange(2 * 330 * 100).reshape(2, 330, 100)          # every level names its place
    sample = _sample(Sublayer(dim=4, shape=(1, 2, 330, 100), levels=levels))
    blocks = 11 * 4                                                   # 32 x 32 blocks, the last row and column partial
    count = blocks // SAMPLE_FRACTION
    assert sample.shape == (1, 2, count * SAMPLE_EXTENT, 32) and sample.levels.shape == (2, count * SAMPLE_EXTENT, 32)
    for n, index in enumerate(np.linspace(0, blocks - 1, count).round().astype(int)):
        y, x = divmod(int(index), 4)
        y0, x0 = min(32 * y, 330 - 32), min(32 * x, 100 - 32)        # the last block moved back inside
        assert np.array_equal(sample.levels[:, 32 * n:32 * n + 32], levels[:, y0:y0 + 32, x0:x0 + 32])
    small = _sample(Sublayer(dim=4, shape=(1, 2, 5, 7), levels=levels[:, :5, :7]))
    assert np.array_equal(small.levels, levels[:, :5, :7])
