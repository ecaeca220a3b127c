"""WDEC's estimated cycles for one weight tile of a plan (``aipu compile --compress``): what the conv tiler
(conv_plan.py) weighs in place of a raw weight LOAD where the layer's weights become WDEC streams.

A plan does not have its streams yet (encoding every candidate's tiles would make planning many times slower),
so the estimate takes the layer's weights encoded once as one stream: its bits, bins and Morton skips a weight.
A part decoder spends a weight's bins at BINS_PER_CYCLE (fitted on the part decoders' measured cycles,
docs/compiler.md, "Tiling") and a cycle on each Morton skip (docs/rtl-wdec.md, "Cycles"); the parts are those
weight_streams.parts_of would choose on such a stream, each further one adding PART_BYTES.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from aipu.compiler.lowering.base import field_max
from aipu.compiler.lowering.weight_streams import PARTS_OVERHEAD, POLE_PARTS_OVERHEAD
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import Opcode

# Bins a part decoder decodes a cycle at each wdec.bins_per_cycle B, net of its levels' writes and holds:
# fitted on the ResNet-18-shaped program's trained-like tiles (aipu bench wdec at 8 to 32 engines; 18.2 bins
# and 0.15 Morton skips a weight take 21.7, 11.4 and 6.1 cycles at B = 1, 2, 4).
BINS_PER_CYCLE = {1: 0.845, 2: 1.62, 4: 3.08}
PART_BYTES = 26                 # what each further part adds to a stream (its length, restarted contexts)


class LayerStream(NamedTuple):
    """One layer's weights as one npu-profile stream, per weight: its bits, its bins and the Morton walk's
    skips (1x1 kernels skip about 1.3 candidates a weight, 3x3 kernels 0.15)."""

    bits: float
    bins: float
    skips: float

    @classmethod
    def of(cls, weights: np.ndarray) -> LayerStream:
        from aipu import codec
        from aipu.codec.npu_profile import decode_profile_compiled

        stream = codec.encode_profile_stream(weights)
        decoded = decode_profile_compiled(stream, weights.shape)
        return cls(8 * len(stream) / weights.size, decoded.bins / weights.size, decoded.morton_skips / weights.size)


class WdecCost:
    """Cycles of one WDEC command decoding a tile of ``weights`` weights over ``out_c`` output channels of a
    layer whose weights encode as ``stream``, the parts' overhead cap that gives them, and whether WDEC takes
    such a tile at all (its fields).

    The cap is weight_streams.PARTS_OVERHEAD, the bytes a split may always add; where the decode would then
    outlast the CONVs it feeds (WDEC the pole), up to POLE_PARTS_OVERHEAD: another percent of the stream's
    bytes then buys a decode twice or four times as fast."""

    def __init__(self, config: HardwareConfig, stream: LayerStream) -> None:
        self.config, self.bytes_per_weight = config, stream.bits / 8
        self.cycles_per_weight = stream.bins / BINS_PER_CYCLE[config.wdec.bins_per_cycle] + stream.skips
        self.limits = {name: field_max(config, Opcode.WDEC, name) for name in ("out_c", "in_c", "length")}
        latency = config.dram.latency_cycles
        self.fixed = 1 + latency + 2 + 1 + 1    # the check, the first bits and the engine start, the padding check
        self.header = latency + 1               # a stream of several parts: its length header first

    def decodes(self, out_c: int, in_c: int, weights: int) -> bool:
        """Whether such a tile fits WDEC's fields (else the emitter loads it raw)."""
        return (out_c <= self.limits["out_c"] and in_c <= self.limits["in_c"]
                and weights * self.bytes_per_weight <= self.limits["length"])

    def parts(self, out_c: int, weights: int, overhead: float) -> int:
        """The parts weight_streams.parts_of would choose: the largest of engines, engines/2, .. 1 at most
        ``out_c`` whose added bytes stay within ``overhead`` of the stream."""
        parts = self.config.wdec.engines
        while parts > 1 and (parts > out_c or (parts - 1) * PART_BYTES > overhead * weights * self.bytes_per_weight):
            parts //= 2
        return parts

    def cycles(self, out_c: int, weights: int, budget: float) -> tuple[float, float]:
        """(cycles, overhead cap) of one WDEC command that has ``budget`` cycles of CONV to hide under."""
        cycles = self._cycles(out_c, weights, PARTS_OVERHEAD)
        if cycles <= budget:
            return cycles, PARTS_OVERHEAD
        return min((cycles, PARTS_OVERHEAD), (self._cycles(out_c, weights, POLE_PARTS_OVERHEAD), POLE_PARTS_OVERHEAD))

    def _cycles(self, out_c: int, weights: int, overhead: float) -> float:
        """Its fixed steps, then the largest part on its own engine. Part i holds the output channels
        [i·out_c/K, (i+1)·out_c/K), so the largest has ceil(out_c/K) of them."""
        parts = self.parts(out_c, weights, overhead)
        return (self.fixed + (self.header if parts > 1 else 0)
                + -(-out_c // parts) * (weights // out_c) * self.cycles_per_weight)
