"""WDEC's leaf walk: the CTUs of the tensor in stream order and each CU's leaves in Morton order over (z, y, x)."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.codec.npu_profile import SPLIT_FLAG_MIN_CU
from aipu.codec.reference.geometry import CTU_SIZES
from aipu.rtl.arith import bit_length
from aipu.rtl.wdec_parts.interfaces import MAX_ZDEPTH, MORTON_LEVELS, command_field
from aipu.sim.machine.arch import HardwareConfig


def _maximum(values):
    result = values[0]
    for value in values[1:]:
        result = Mux(value > result, value, result)
    return result


def _ceil_log2(m: Module, extent, width: int) -> Signal:
    return bit_length(m, extent - 1, width)


class LeafWalk(wiring.Component):
    """The tensor [out_c][in_c][k_h·k_w] is cut into CTUs (y over in_c, x over out_c, each CTU all of z);
    the leaves of a CTU's CU come in the unitree's depth-first order, which is Morton order over (z, y, x)
    up to the CU's tree depth. A Morton candidate outside the CU jumps over the whole subtree at the
    highest bit where a coordinate passes its extent (a ``skip``, one cycle each).

    Signature: the command's ``out_c``, ``in_c``, ``k_h``, ``k_w`` and the header's ``ctu_size_idx`` (In);
    ``begin`` (the first CTU), ``next_ctu``, ``first_leaf``, ``next_leaf``, ``skip`` (In: steps);
    ``taps`` (k_h·k_w), ``split_coded`` (the CTU codes split_flag), ``last_ctu``, ``cu_end`` (every leaf of
    the CU is done), ``outside`` (the candidate lies outside the CU) and the leaf's tensor position
    ``kernel``, ``tap``, ``channel`` (Out).
    """

    def __init__(self, config: HardwareConfig):
        out_c, in_c = command_field(config, "out_c"), command_field(config, "in_c")
        super().__init__({
            "out_c": In(out_c), "in_c": In(in_c), "k_h": In(command_field(config, "k_h")),
            "k_w": In(command_field(config, "k_w")), "ctu_size_idx": In(2),
            "begin": In(1), "next_ctu": In(1), "first_leaf": In(1), "next_leaf": In(1), "skip": In(1),
            "taps": Out(range(MAX_ZDEPTH + 1)), "split_coded": Out(1), "last_ctu": Out(1), "cu_end": Out(1),
            "outside": Out(1), "kernel": Out(out_c.width + 1), "tap": Out(MORTON_LEVELS),
            "channel": Out(in_c.width + 1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        zdepth = self.taps
        m.d.comb += zdepth.eq(self.k_h * self.k_w)
        ctu_c, ctu_k = Signal(len(self.in_c)), Signal(len(self.out_c))
        ctu_size = Signal(range(max(CTU_SIZES) + 1))
        m.d.comb += ctu_size.eq(max(CTU_SIZES) >> self.ctu_size_idx)
        height, width = Signal(range(max(CTU_SIZES) + 1)), Signal(range(max(CTU_SIZES) + 1))
        m.d.comb += [height.eq(Mux(self.in_c - ctu_c < ctu_size, self.in_c - ctu_c, ctu_size)),
                     width.eq(Mux(self.out_c - ctu_k < ctu_size, self.out_c - ctu_k, ctu_size)),
                     self.split_coded.eq(~((height <= SPLIT_FLAG_MIN_CU) & (width <= SPLIT_FLAG_MIN_CU))),
                     self.last_ctu.eq((ctu_c + ctu_size >= self.in_c) & (ctu_k + ctu_size >= self.out_c))]
        levels = Signal(range(MORTON_LEVELS + 1))       # tree depth of the CU: Morton bits per axis
        m.d.comb += levels.eq(_maximum([_ceil_log2(m, e, len(e)) for e in (zdepth, height, width)]))
        morton = Signal(3 * MORTON_LEVELS + 1)
        coords = [Cat(*[morton[3 * bit + 2 - axis] for bit in range(MORTON_LEVELS)]) for axis in range(3)]
        extents = (zdepth, height, width)
        m.d.comb += self.cu_end.eq((morton >> (levels * 3)) != 0)
        # an out-of-range candidate: skip the subtree at the highest bit where a coordinate passes its extent
        skip_level = Signal(range(MORTON_LEVELS))
        passing = [Mux(coord >= extent, bit_length(m, coord ^ (extent - 1), MORTON_LEVELS) - 1, 0)
                   for coord, extent in zip(coords, extents)]
        m.d.comb += skip_level.eq(_maximum(passing))
        m.d.comb += self.outside.eq(Cat(*[coord >= extent for coord, extent in zip(coords, extents)]).any())
        z, y, x = coords
        m.d.comb += [self.kernel.eq(ctu_k + x), self.tap.eq(z), self.channel.eq(ctu_c + y)]

        with m.If(self.first_leaf):
            m.d.sync += morton.eq(0)
        with m.If(self.next_leaf):
            m.d.sync += morton.eq(morton + 1)
        with m.If(self.skip):
            m.d.sync += morton.eq((morton | ((Const(1, len(morton)) << (skip_level * 3)) - 1)) + 1)
        with m.If(self.next_ctu):
            with m.If(ctu_k + ctu_size >= self.out_c):
                m.d.sync += [ctu_k.eq(0), ctu_c.eq(ctu_c + ctu_size)]
            with m.Else():
                m.d.sync += ctu_k.eq(ctu_k + ctu_size)
        with m.If(self.begin):
            m.d.sync += [ctu_c.eq(0), ctu_k.eq(0)]
        return m
