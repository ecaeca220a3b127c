"""DWCONV's accumulators: two banks of one int32 per slot, each multiplier adding into its own."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.conv_parts.interfaces import PRODUCT_BITS, slots
from aipu.sim.machine.arch import ACC_BITS, HardwareConfig


class DepthwiseAccumulators(wiring.Component):
    """Two banks of ``rows·cols`` int32 registers (``bank<b>_slot<e>``). When ``valid`` (the data cycle of a
    tap's last beat), each slot of bank ``bank`` takes its product, added to what it holds or, for a block's
    ``first`` tap, alone; it wraps like the ACC register. One block accumulates in a bank while the other
    drains.

    Signature: ``valid``, ``first``, ``bank`` (In: from the tap walk), ``products`` (In: from the MAC array),
    ``bank0``, ``bank1`` (Out: the registers, slot e at bits ``[32 e, 32 e + 32)``).
    """

    def __init__(self, config: HardwareConfig):
        self.slots = slots(config)
        super().__init__({"valid": In(1), "first": In(1), "bank": In(1),
                          "products": In(data.ArrayLayout(signed(PRODUCT_BITS), self.slots)),
                          "bank0": Out(ACC_BITS * self.slots), "bank1": Out(ACC_BITS * self.slots)})

    def elaborate(self, platform) -> Module:
        m = Module()
        banks = [[Signal(ACC_BITS, name=f"bank{b}_slot{e}") for e in range(self.slots)] for b in range(2)]
        for e in range(self.slots):
            held = Mux(self.first, 0, Mux(self.bank, banks[1][e], banks[0][e]))
            total = (held.as_signed() + self.products[e])[:ACC_BITS]
            for b in range(2):
                with m.If(self.valid & (self.bank == b)):
                    m.d.sync += banks[b][e].eq(total)
        m.d.comb += [self.bank0.eq(Cat(*banks[0])), self.bank1.eq(Cat(*banks[1]))]
        return m
