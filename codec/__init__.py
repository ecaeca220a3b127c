"""Neural-network weight compression: the T/AI 115.1-2021 chapter-10 bitstream.

``encode(tensors, options)`` -> container bytes, ``decode(data)`` -> tensors, ``decode_layer(data, name)``
for one layer; ``encode_with_info``/``decode_with_info``/``read_index`` add per-layer statistics.
docs/codec.md describes the container, the syntax decisions and the encoder.
"""
from .api import (CodecOptions, LayerInfo, decode, decode_layer, decode_stream, decode_with_info, encode,
                  encode_with_info, read_index)
from .encoder import EncoderOptions
from .errors import CodecError

__all__ = ["CodecError", "CodecOptions", "EncoderOptions", "LayerInfo", "decode", "decode_layer", "decode_stream",
           "decode_with_info", "encode", "encode_with_info", "read_index"]
