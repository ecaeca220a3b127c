"""Neural-network weight compression: the T/AI 115.1-2021 chapter-10 bitstream.

``encode(tensors, options)`` -> container bytes, ``decode(data)`` -> tensors, ``decode_layer(data, name)``
for one layer; ``encode_with_info``/``decode_with_info``/``read_index`` add per-layer statistics. Pre-quantized
integer tensors pass their ``QuantParams`` (scale, zero point) to ``encode``; ``quantization_of(info.tensors)``
gives them back.
docs/codec.md describes the container, the syntax decisions and the encoder.

The names are imported on first use (PEP 562), so that importing ``aipu.codec`` or one of its modules (e.g.
for the CLI parser) does not load numba. ``codec.reference`` is the pure-Python reference, ``codec.compiled``
the numba fast path; docs/codec.md §0 maps every module.
"""
from __future__ import annotations

import importlib

_EXPORTS = {"CodecOptions": "api", "LayerInfo": "container", "decode": "api", "decode_layer": "api",
            "decode_stream": "api", "decode_weight_stream": "api", "decode_with_info": "api", "encode": "api",
            "encode_with_info": "api", "read_index": "container", "decode_profile_stream": "npu_profile",
            "decode_profile_compiled": "npu_profile", "encode_profile_stream": "npu_profile",
            "encode_parts_stream": "npu_profile", "decode_parts_stream": "npu_profile",
            "decode_parts_compiled": "npu_profile", "EncoderOptions": "encoder", "CodecError": "errors",
            "QuantParams": "quantization", "quantization_of": "quantization"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'aipu.codec' has no attribute {name!r}")
    return getattr(importlib.import_module(f"aipu.codec.{_EXPORTS[name]}"), name)
