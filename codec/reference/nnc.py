"""nnc(), Table 322: the whole chapter-10 bitstream, a stream header and its layers, in both directions.

Each layer is a layer_header() and its sublayers: a 1-D sublayer is coded whole (array1d), a weight
sublayer CTU by CTU (``code_weight_sublayer``), preceded by its bias when the header says so.
"""
from __future__ import annotations

import numpy as np

from ..errors import CodecError, error_context
from .element_coder import ElementIO
from .headers import (DEFAULT_LIMITS, DecoderLimits, StreamHeader, Sublayer, code_array1d, code_layer_header,
                      code_nnc_header)
from .sublayer_coder import Planner, code_weight_sublayer


def code_nnc(io: ElementIO, header: StreamHeader | None = None, layers: list[list[Sublayer]] | None = None,
             planner: Planner | None = None, limits: DecoderLimits = DEFAULT_LIMITS
             ) -> tuple[StreamHeader, list[list[Sublayer]], list[dict[str, int]]]:
    """nnc(), Table 322 with A1 (the do-while increments after the if/else).

    Returns the stream header, the layers (decoded levels filled in) and per-layer mode statistics.
    """
    header, layer_count = code_nnc_header(io, header, 0 if io.decoding else len(layers))
    decoded_layers, layer_stats = [], []
    weights = 0
    for layer_index in range(layer_count):
        with error_context(layer=layer_index):
            source = None if io.decoding else layers[layer_index]
            subs = code_layer_header(io, header, source, limits)
            weights += sum(sub.weights for sub in subs)
            if weights > limits.max_weights_per_stream:
                raise CodecError(f"the layers claim {weights} weights, above the decoder limit of "
                                 f"{limits.max_weights_per_stream} per stream", element="sublayer_shape")
            stats: dict[str, int] = {}
            index = 0
            while True:
                with error_context(sublayer=index):
                    sub = subs[index]
                    truth = None if io.decoding else source[index].levels
                    if sub.dim == 1:
                        sub.levels = code_array1d(io, header, sub, truth)
                        last = int(index == len(subs) - 1)
                        if io.code("end_of_last_layer_flag", last) != last:
                            raise CodecError("end_of_last_layer_flag disagrees with total_sublayer",
                                             element="end_of_last_layer_flag")
                        index += 1
                    else:
                        include_bias = index + 1 < len(subs) and subs[index + 1].dim == 1
                        if include_bias:
                            bias_truth = None if io.decoding else source[index + 1].levels
                            subs[index + 1].levels = code_array1d(io, header, subs[index + 1], bias_truth)
                        if not io.decoding:
                            sub.levels = np.asarray(truth, dtype=np.int64)
                        sublayer_stats = code_weight_sublayer(io, header, sub, planner, limits)
                        for key, count in sublayer_stats.items():
                            stats[key] = stats.get(key, 0) + count
                        index += 2 if include_bias else 1
                if index >= len(subs):
                    break
            decoded_layers.append(subs)
            layer_stats.append(stats)
    return header, decoded_layers, layer_stats
