"""WDEC's estimated cycles for one weight tile of a plan (``aipu compile --compress``): what the conv tiler
(conv_plan.py) weighs in place of a raw weight LOAD where the layer's weights become WDEC streams.

A plan does not have its streams yet (encoding every candidate's tiles would make planning many times slower),
so the estimate is from constants measured on trained-like 3x3 weights (docs/compiler.md, "Tiling"): a part
decoder's weights a cycle at each ``wdec.bins_per_cycle``, the stream's bits a weight and the bytes each
further part adds; the parts are those weight_streams.parts_of would choose on such a stream.
"""
from __future__ import annotations

from aipu.compiler.lowering.base import field_max
from aipu.compiler.lowering.weight_streams import PARTS_OVERHEAD, POLE_PARTS_OVERHEAD
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import Opcode

# Weights one part decoder (a WDEC engine) decodes a cycle, by bins_per_cycle B: about 18 bins a weight at
# 1, 1.9 and 3.5 bins a cycle (docs/rtl-wdec.md, "The cascade"); measured on the ResNet-18-shaped program's
# trained-like tiles (aipu bench wdec).
WEIGHTS_PER_CYCLE = {1: 0.046, 2: 0.088, 4: 0.165}
STREAM_BITS_PER_WEIGHT = 7.2    # int8 trained-like weights in the npu profile (docs/codec.md §11)
PART_BYTES = 40                 # what each further part adds to a stream (headers, restarted contexts, length)


class WdecCost:
    """Cycles of one WDEC command decoding a tile of ``weights`` weights over ``out_c`` output channels, the
    parts' overhead cap that gives them, and whether WDEC takes such a tile at all (its fields).

    The cap is weight_streams.PARTS_OVERHEAD, the bytes a split may always add; where the decode would then
    outlast the CONVs it feeds (WDEC the pole), up to POLE_PARTS_OVERHEAD: a few percent of the stream's bytes
    then buy a decode twice or four times as fast."""

    def __init__(self, config: HardwareConfig) -> None:
        self.config = config
        self.rate = WEIGHTS_PER_CYCLE[config.wdec.bins_per_cycle]
        self.limits = {name: field_max(config, Opcode.WDEC, name) for name in ("out_c", "in_c", "length")}
        latency = config.dram.latency_cycles
        self.fixed = 1 + latency + 2 + 1 + 1    # the check, the first bits and the engine start, the padding check
        self.header = latency + 1               # a stream of several parts: its length header first

    def decodes(self, out_c: int, in_c: int, weights: int) -> bool:
        """Whether such a tile fits WDEC's fields (else the emitter loads it raw)."""
        return (out_c <= self.limits["out_c"] and in_c <= self.limits["in_c"]
                and weights * STREAM_BITS_PER_WEIGHT / 8 <= self.limits["length"])

    def parts(self, out_c: int, weights: int, overhead: float) -> int:
        """The parts weight_streams.parts_of would choose: the largest of engines, engines/2, .. 1 at most
        ``out_c`` whose added bytes stay within ``overhead`` of the stream."""
        parts = self.config.wdec.engines
        while parts > 1 and (parts > out_c or (parts - 1) * PART_BYTES
                             > overhead * weights * STREAM_BITS_PER_WEIGHT / 8):
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
        return self.fixed + (self.header if parts > 1 else 0) + -(-out_c // parts) * (weights // out_c) / self.rate
