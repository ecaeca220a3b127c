"""The encoder's decisions (codec/encoder.py): codebooks, and the trial search against every fixed mode."""
from __future__ import annotations

import numpy as np

from aipu import codec
from aipu.codec.encoder import EncoderOptions, build_codebook
from aipu.codec.reference.tree_coder import TREES


def test_codebook_builder_puts_predicted_entries_first():
    values = np.array([0, 0, 0, 5, 5, -5, 3, 9, 9, 9, 9])
    cbook, predicted = build_codebook(values, [7, 9, 0, 9])
    assert predicted == (1, 2)
    assert cbook[:2] == (9, 0) and set(cbook) == {0, 5, -5, 3, 9}


def test_encoder_choice_beats_every_single_fixed_mode():
    """A trained-like tensor: Laplacian weights with per-output-channel scales, pruned channels."""
    rng = np.random.default_rng(6)
    scales = rng.gamma(2.0, 0.02, (24, 1, 1, 1))
    w = (rng.laplace(0, 1, (24, 40, 3, 3)) * scales).astype(np.float32)
    w[rng.random(24) < 0.25] = 0                                  # pruned output channels
    w[:, rng.random(40) < 0.2] = 0                                # dead input channels
    tensors = {"w": w}

    def size(encoder):      # bytes of the nnc() streams (the container index holds names and statistics)
        _, infos = codec.encode_with_info(tensors, codec.CodecOptions(bitdepth=6, encoder=encoder))
        return sum(info.length for info in infos)
    fixed = {(tree, book, start): size(EncoderOptions(trees=(tree,), codebook=book, start_depth=start,
                                                      split="never", zdep="off"))
             for tree in TREES for book in ("off", "on") for start in ("leaf", "root")}
    chosen = size(EncoderOptions())
    assert chosen < min(fixed.values()), (chosen, min(fixed.items(), key=lambda kv: kv[1]))
