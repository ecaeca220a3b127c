"""Weight tiles as npu-profile streams for WDEC (``aipu compile --compress``): the conv emitter asks for each
tile it would load, and gets where its stream lies in DRAM or None (load it raw)."""
from __future__ import annotations

import numpy as np

from aipu.compiler.lowering.base import field_max
from aipu.compiler.lowering.conv_layer import ConvLayer
from aipu.compiler.lowering.memory import DramPlan
from aipu.sim.machine.arch import DEFAULT, DType
from aipu.sim.machine.isa import Opcode


class WeightStreams:
    """``weight_stream`` of emit_conv_layer for one layer's weights [K, C/groups, KH, KW]: a tile's npu-profile
    stream (codec.encode_profile_stream), placed as a constant of ``dram`` once however often the tile is
    decoded, and described in ``record``; None (load the tile raw) where the stream is not smaller than the tile
    or does not fit WDEC's fields, and for INT4 or codebook weights (WDEC writes int8 levels)."""

    def __init__(self, layer: ConvLayer, prefix: str, dram: DramPlan, record: list[dict]):
        self.weights, self.prefix, self.dram, self.record = layer.w, prefix, dram, record
        self.int8 = layer.w_type == DType.INT8 and layer.w.dtype == np.int8 and layer.codebook is None
        self.placed: dict[tuple[int, int, int, int], tuple[int, int] | None] = {}

    def __call__(self, k0: int, k: int, c0: int, c: int) -> tuple[int, int] | None:
        from aipu import codec

        key = (k0, k, c0, c)
        if not self.int8:
            return None
        if key not in self.placed:
            tile = self.weights[k0:k0 + k, c0:c0 + c]
            stream = codec.encode_profile_stream(tile)
            fits = all(value <= field_max(DEFAULT, Opcode.WDEC, name) for name, value in
                       (("length", len(stream)), ("out_c", k), ("in_c", c), ("k_h", tile.shape[2]),
                        ("k_w", tile.shape[3])))
            name = f"{self.prefix}/weights[{k0}:{k0 + k},{c0}:{c0 + c}]"
            decoded = fits and len(stream) < tile.size
            self.record.append({"name": name, "weight_bytes": tile.size, "stream_bytes": len(stream),
                                "decoded": decoded})
            self.placed[key] = None
            if decoded:
                self.placed[key] = (self.dram.constant(name, np.frombuffer(stream, np.uint8)), len(stream))
        return self.placed[key]
