"""Weight tiles as npu-profile streams for WDEC (``aipu compile --compress``): the conv emitter asks for each
tile it would load, and gets where its stream lies in DRAM and in how many parts, or None (load it raw)."""
from __future__ import annotations

import numpy as np

from aipu.compiler.lowering.base import field_max
from aipu.compiler.lowering.conv_layer import ConvLayer
from aipu.compiler.lowering.memory import DramPlan
from aipu.sim.machine.arch import DType, HardwareConfig
from aipu.sim.machine.isa import Opcode

PARTS_OVERHEAD = 0.01       # a split's stream may be this much longer than the one-part stream
POLE_PARTS_OVERHEAD = 0.02  # ... and this much in a layer whose plan finds WDEC the pole (conv_plan, wdec_cost)


class WeightStreams:
    """``weight_stream`` of emit_conv_layer for one layer's weights [K, C/groups, KH, KW]: a tile's stream
    (codec.encode_parts_stream, in as many parts as ``parts_of`` chooses), placed as a constant of ``dram`` once
    however often the tile is decoded, and described in ``record``; None (load the tile raw) where the stream is
    not smaller than the tile or does not fit WDEC's fields, for INT4 or codebook weights (WDEC writes int8
    levels), and everywhere in a layer whose plan keeps its weights raw (``decode`` False: the "hidden" policy
    found decoding would cost cycles), whose tiles are recorded without a stream."""

    def __init__(self, layer: ConvLayer, prefix: str, dram: DramPlan, record: list[dict], config: HardwareConfig,
                 overhead: float = PARTS_OVERHEAD, decode: bool = True):
        self.weights, self.prefix, self.dram, self.record, self.config = layer.w, prefix, dram, record, config
        self.overhead = overhead      # the plan's cap on the bytes parts add (TilePlan.parts_overhead)
        self.int8, self.decode = decodable(layer), decode
        self.placed: dict[tuple[int, int, int, int], tuple[int, int, int] | None] = {}

    def __call__(self, k0: int, k: int, c0: int, c: int) -> tuple[int, int, int] | None:
        """(DRAM address, length, parts) of the stream of weights [k0:k0+k, c0:c0+c], or None."""
        key = (k0, k, c0, c)
        if not self.int8:
            return None
        if key not in self.placed:
            self.placed[key] = self._placed(f"{self.prefix}/weights[{k0}:{k0 + k},{c0}:{c0 + c}]",
                                            self.weights[k0:k0 + k, c0:c0 + c])
        return self.placed[key]

    def _placed(self, name: str, tile: np.ndarray) -> tuple[int, int, int] | None:
        """The tile's stream placed in DRAM and recorded, or None (recorded raw)."""
        if not self.decode:
            self.record.append({"name": name, "weight_bytes": tile.size, "stream_bytes": None, "parts": 0,
                                "one_part_bytes": None, "decoded": False})
            return None
        stream, parts, one_part = parts_of(tile, self.config.wdec.engines, self.overhead)
        fits = all(value <= field_max(self.config, Opcode.WDEC, field) for field, value in
                   (("length", len(stream)), ("out_c", tile.shape[0]), ("in_c", tile.shape[1]),
                    ("k_h", tile.shape[2]), ("k_w", tile.shape[3])))
        decoded = fits and len(stream) < tile.size
        self.record.append({"name": name, "weight_bytes": tile.size, "stream_bytes": len(stream), "parts": parts,
                            "one_part_bytes": one_part, "decoded": decoded})
        return (self.dram.constant(name, np.frombuffer(stream, np.uint8)), len(stream), parts) if decoded else None


def decodable(layer: ConvLayer) -> bool:
    """Whether WDEC can write the layer's weights: int8 levels (not INT4, dual planes, codebook indices or
    block-circulant first rows, which LOAD expands)."""
    return (layer.w_type == DType.INT8 and layer.w.dtype == np.int8 and layer.codebook is None
            and layer.circulant is None)


def parts_of(tile: np.ndarray, engines: int, overhead: float = PARTS_OVERHEAD) -> tuple[bytes, int, int]:
    """The tile's WDEC stream, its parts K and the one-part stream's bytes: the largest K of engines,
    engines/2, .. 1 with K <= the tile's output channels whose stream is at most ``overhead`` longer than the
    one-part stream (docs/codec.md §11: each part adds its length and restarts the contexts)."""
    from aipu import codec

    whole = codec.encode_profile_stream(tile)
    parts = engines
    while parts > 1:
        if parts <= len(tile):
            stream = codec.encode_parts_stream(tile, parts)
            if len(stream) <= len(whole) * (1 + overhead):
                return stream, parts, len(whole)
        parts //= 2
    return whole, 1, len(whole)
