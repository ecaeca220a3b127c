"""CONV's MAC array: two banks of stationary weights, and one pixel's ``cols`` dot products a cycle."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, Value, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.arith import net
from aipu.rtl.conv_parts.interfaces import (PRODUCT_BITS, command_field, pixel_operands, slot_operands, slots,
                                            weight_column)
from aipu.sim.machine.arch import ACC_BITS, MAC_OPERAND_BITS, DType, HardwareConfig


class MacArray(wiring.Component):
    """``rows x cols`` multipliers of signed 9-bit operands. Two register banks hold ``rows x cols`` weight
    operands each (``weight_b<bank>_c<col>_r<row>``), written a column at a time from ``column``. For the
    pixel in ``operands``, column ``j`` of its bank makes ``sums[j]``: the dot product of its weights with
    the pixel's ``rows`` input bytes minus ``in_zero_point`` (read as ``in_type``), added to the old
    accumulator ``j``, or to 0 when the block overwrites, wrapping to int32 like the register.

    For a DWCONV (``depthwise``) the same multipliers take the ``slots``' operands instead, multiplier
    (row r, column j) slot j·rows + r, and give each product alone in ``products`` (the column sums unused).

    Signature: ``in_type``, ``in_zero_point`` (In: the command's), ``column`` (In: from the loader),
    ``operands`` (In: from the issue), ``sums`` (Out: ``cols`` int32, combinational), ``depthwise`` (In: the
    command is a DWCONV), ``slots`` (In: from the slot operands), ``products`` (Out: combinational).
    """

    def __init__(self, config: HardwareConfig):
        self.rows, self.cols = config.mac.rows, config.mac.cols
        super().__init__({"in_type": In(command_field(config, "in_type")),
                          "in_zero_point": In(command_field(config, "in_zero_point")),
                          "column": In(weight_column(config)), "operands": In(pixel_operands(config)),
                          "sums": Out(ACC_BITS * config.mac.cols), "depthwise": In(1),
                          "slots": In(slot_operands(config)),
                          "products": Out(data.ArrayLayout(signed(PRODUCT_BITS), slots(config)))})

    def elaborate(self, platform) -> Module:
        m = Module()
        rows, cols, column, pixel = self.rows, self.cols, self.column, self.operands
        weights = [[[Signal(signed(MAC_OPERAND_BITS), name=f"weight_b{b}_c{j}_r{r}") for r in range(rows)]
                    for j in range(cols)] for b in range(2)]
        with m.If(column.valid):
            for b in range(2):
                for j in range(cols):
                    with m.If((column.bank == b) & (column.col == j)):
                        m.d.sync += [weights[b][j][r].eq(column.operands[r]) for r in range(rows)]

        old, slot = pixel.old, self.slots
        x_operands = [net(m, self.x_operand(pixel.x[8 * r:8 * r + 8]), f"x{r}") for r in range(rows)]
        for j in range(cols):
            products = []
            for r in range(rows):
                e = j * rows + r          # the multiplier's DWCONV slot
                x_slot, w_slot = self.x_operand(slot.x[8 * e:8 * e + 8]), slot.w[e]
                w_pixel = Mux(pixel.bank, weights[1][j][r], weights[0][j][r])
                product = net(m, Mux(self.depthwise, x_slot, x_operands[r]) * Mux(self.depthwise, w_slot, w_pixel),
                              f"product_c{j}_r{r}")
                m.d.comb += self.products[e].eq(product)
                products.append(product)
            dot = sum(products)
            previous = Mux(pixel.overwrites, 0, old[ACC_BITS * j:ACC_BITS * (j + 1)])
            m.d.comb += self.sums[ACC_BITS * j:ACC_BITS * (j + 1)].eq((previous + dot)[:ACC_BITS])
        return m

    def x_operand(self, byte: Value) -> Value:
        """An input byte read as ``in_type``, minus ``in_zero_point``."""
        return Mux(self.in_type == DType.INT8, byte.as_signed(), byte) - self.in_zero_point
