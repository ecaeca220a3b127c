"""Sublayers with structure for the syntax tests, and the round trip every syntax test goes through.

``round_trip`` encodes with both encoders (the compiled trees and the pure-Python reference), requires
byte-identical streams, and decodes with both decoders.
"""
from __future__ import annotations

import numpy as np

from aipu.codec.api import decode_stream
from aipu.codec.encoder import EncoderOptions, encode_stream
from aipu.codec.reference.headers import Sublayer


def weight_levels(rng, zdepth, channels, kernels, spread=40, zero_rows=4):
    """Levels with many distinct values (> 31, so codebooks escape), a zero band and a uniform block."""
    levels = np.round(rng.laplace(0, spread / 6, (zdepth, channels, kernels))).astype(np.int64)
    levels[:, :zero_rows, :] = 0
    levels[:, zero_rows:zero_rows + 3, :5] = 7
    return levels


def round_trip(header, sublayers, options=None, layers=1):
    stream = encode_stream(header, [list(sublayers)] * layers, options or EncoderOptions())
    reference = encode_stream(header, [list(sublayers)] * layers, options or EncoderOptions(), reference=True)
    assert stream.data == reference.data        # the numba trees write exactly the reference's bytes
    for reference in (False, True):      # the numba trees and the pure-Python reference
        decoded_header, decoded, stats, bins = decode_stream(stream.data, reference=reference)
        assert bins == stream.bins
        assert decoded_header == header
        for layer in decoded:
            for source, result in zip(sublayers, layer):
                assert result.shape == source.shape and result.dim == source.dim
                np.testing.assert_array_equal(result.levels, source.levels)
    return stats, stream


def conv_sublayers(rng, r=3, s=3, c=20, k=13, bias=True):
    subs = [Sublayer(dim=4, shape=(r, s, c, k), cmaxw=100, bitdepth=8, levels=weight_levels(rng, r * s, c, k))]
    if bias:
        subs[0].include_bias_array1d = 1
        subs.append(Sublayer(dim=1, shape=(1, 1, 1, k), cmaxw=3, levels=rng.integers(-300, 300, k)))
    return subs
