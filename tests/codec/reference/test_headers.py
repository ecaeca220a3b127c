"""Stream and layer headers, 1-D sublayers and the step size (codec/reference/headers.py)."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.codec.api import decode_stream
from aipu.codec.encoder import EncoderOptions, encode_stream
from aipu.codec.errors import CodecError
from aipu.codec.reference.element_coder import ElementWriter
from aipu.codec.reference.engine import AecEncoder
from aipu.codec.reference.headers import (StreamHeader, Sublayer, code_layer_header, code_nnc_header, dequantw,
                                          step_size)
from tests.codec.syntax_streams import conv_sublayers, round_trip


def test_layer_header_implicit_bias_and_inherited_vector_lengths():
    """Table 324: implicit bias after a weight, an explicit 1-D vector, then one that inherits its length."""
    rng = np.random.default_rng(5)
    header = StreamHeader(integer_input=1, array1d_depth=9)
    subs = conv_sublayers(rng, r=1, s=1, c=9, k=12)
    subs += [Sublayer(dim=1, shape=(1, 1, 1, 12), cmaxw=1, levels=rng.integers(-60, 60, 12)),
             Sublayer(dim=1, shape=(1, 1, 1, 12), cmaxw=1, levels=np.zeros(12, dtype=np.int64)),
             Sublayer(dim=2, shape=(1, 1, 4, 5), levels=rng.integers(-9, 9, (1, 4, 5)))]
    subs[2].levels[3] = -64
    stats, _ = round_trip(header, subs, EncoderOptions(trees=("octree",), split="never"))
    with pytest.raises(CodecError, match="inherited"):
        bad = subs[:3] + [Sublayer(dim=1, shape=(1, 1, 1, 5), cmaxw=1, levels=np.zeros(5, dtype=np.int64))]
        encode_stream(header, [bad], EncoderOptions())


def test_standalone_vector_layer_and_zero_cmaxw():
    header = StreamHeader(integer_input=1, array1d_depth=3)
    vector = Sublayer(dim=1, shape=(1, 1, 1, 6), cmaxw=8, levels=np.array([0, 1, -1, 8, -8, 5]))
    zeros = Sublayer(dim=1, shape=(1, 1, 1, 4), cmaxw=0, levels=np.zeros(4, dtype=np.int64))
    round_trip(header, [vector])
    round_trip(header, [zeros])


def test_float_header_step_sizes_follow_table_324():
    header = StreamHeader(integer_input=0, array1d_depth=10)
    subs = [Sublayer(dim=2, shape=(1, 1, 3, 4), cmaxw=300, bitdepth=6, levels=np.arange(12).reshape(1, 3, 4)),
            Sublayer(dim=1, shape=(1, 1, 1, 4), cmaxw=2, levels=np.array([1, -2, 0, 3]))]
    subs[0].include_bias_array1d = 1
    stream = encode_stream(header, [subs])
    _, layers, _, _ = decode_stream(stream.data)
    weight, bias = layers[0]
    assert weight.step == np.float32(np.float32(300) / np.float32(256)) / np.float32(63)
    assert bias.step == np.float32(2) / np.float32(1023)


def test_dequantw_and_step_size_of_tables_321_and_324():
    np.testing.assert_array_equal(dequantw(np.array([-3, 0, 2]), np.float32(0.5)), np.float32([-1.5, 0, 1.0]))
    assert step_size(255, 8, 1, False) == 1.0
    with pytest.raises(CodecError):
        step_size(255, 0, 0, False)


def test_encoder_rejects_what_the_syntax_cannot_carry():
    writer = ElementWriter(AecEncoder())
    code_nnc_header(writer, StreamHeader(), 1)
    with pytest.raises(ValueError):
        code_layer_header(writer, StreamHeader(), [Sublayer(dim=2, shape=(1, 1, 70000, 3))])
