"""CONV's MAC array: two banks of stationary weights, and one pixel's ``cols`` dot products a cycle."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, Value, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.arith import net
from aipu.rtl.conv_parts.interfaces import (HALF_OPERAND_BITS, NIBBLE_BITS, PRODUCT_BITS, command_field, int8_halves,
                                            pixel_operands, slot_operands, slots, weight_column)
from aipu.sim.machine.arch import ACC_BITS, DType, HardwareConfig


class MacArray(wiring.Component):
    """``rows x cols`` cells, each two signed 9 x 5-bit multipliers whose products it adds (docs/arithmetic.md
    D23). Two register banks hold a weight column's ``halves`` per cell (``weight_b<bank>_c<col>_h<half>``),
    written a column at a time from ``column``. For the pixel in ``operands``, column ``j`` of its bank makes
    ``sums[j]``: each cell's sum added to the old accumulator ``j``, or to 0 when the block overwrites,
    wrapping to int32 like the register. Input channel ``v`` of the run is byte ``v`` read as ``in_type`` (or
    nibble ``v``, INT4) minus ``in_zero_point``; cell ``r`` multiplies channel ``r`` by its int8 weight, as
    low half + 16 · high half, or with ``int4_weights`` channels ``2r`` and ``2r + 1`` by its two weights.

    For a DWCONV (``depthwise``) the same multipliers take the ``slots``' operands instead, cell (row r,
    column j) slot j·rows + r with its weight split as an int8 one, and give each product alone in
    ``products`` (the column sums unused).

    Signature: ``in_type``, ``in_zero_point`` (In: the command's), ``int4_weights`` (In: the setup's),
    ``column`` (In: from the loader), ``operands`` (In: from the issue), ``sums`` (Out: ``cols`` int32,
    combinational), ``depthwise`` (In: the command is a DWCONV), ``slots`` (In: from the slot operands),
    ``products`` (Out: combinational).
    """

    def __init__(self, config: HardwareConfig):
        self.rows, self.cols = config.mac.rows, config.mac.cols
        super().__init__({"in_type": In(command_field(config, "in_type")),
                          "in_zero_point": In(command_field(config, "in_zero_point")), "int4_weights": In(1),
                          "column": In(weight_column(config)), "operands": In(pixel_operands(config)),
                          "sums": Out(ACC_BITS * config.mac.cols), "depthwise": In(1),
                          "slots": In(slot_operands(config)),
                          "products": Out(data.ArrayLayout(signed(PRODUCT_BITS), slots(config)))})

    def elaborate(self, platform) -> Module:
        m = Module()
        rows, cols, column, pixel = self.rows, self.cols, self.column, self.operands
        weights = [[[Signal(signed(HALF_OPERAND_BITS), name=f"weight_b{b}_c{j}_h{h}") for h in range(2 * rows)]
                    for j in range(cols)] for b in range(2)]
        with m.If(column.valid):
            for b in range(2):
                for j in range(cols):
                    with m.If((column.bank == b) & (column.col == j)):
                        m.d.sync += [weights[b][j][h].eq(column.halves[h]) for h in range(2 * rows)]

        int4 = self.int4_weights & ~self.depthwise
        channels = [net(m, self.x_operand(pixel.x, v), f"x{v}") for v in range(2 * rows)]
        low_inputs = [net(m, Mux(int4, channels[2 * r], channels[r]), f"x_low{r}") for r in range(rows)]
        high_inputs = [net(m, Mux(int4, channels[2 * r + 1], channels[r]), f"x_high{r}") for r in range(rows)]
        old, slot = pixel.old, self.slots
        for j in range(cols):
            products = []
            for r in range(rows):
                e = j * rows + r          # the cell's DWCONV slot
                x_slot, slot_halves = self.byte_operand(slot.x[8 * e:8 * e + 8]), int8_halves(slot.w[e])
                halves = [Mux(pixel.bank, weights[1][j][2 * r + h], weights[0][j][2 * r + h]) for h in range(2)]
                low = net(m, Mux(self.depthwise, x_slot, low_inputs[r])
                          * Mux(self.depthwise, slot_halves[0], halves[0]), f"low_c{j}_r{r}")
                high = net(m, Mux(self.depthwise, x_slot, high_inputs[r])
                           * Mux(self.depthwise, slot_halves[1], halves[1]), f"high_c{j}_r{r}")
                product = net(m, low + Mux(int4, high, high << NIBBLE_BITS), f"product_c{j}_r{r}")
                m.d.comb += self.products[e].eq(product)
                products.append(product)
            dot = sum(products)
            previous = Mux(pixel.overwrites, 0, old[ACC_BITS * j:ACC_BITS * (j + 1)])
            m.d.comb += self.sums[ACC_BITS * j:ACC_BITS * (j + 1)].eq((previous + dot)[:ACC_BITS])
        return m

    def byte_operand(self, byte: Value) -> Value:
        """An input byte read as ``in_type`` (INT8 or UINT8), minus ``in_zero_point``."""
        return Mux(self.in_type == DType.INT8, byte.as_signed(), byte) - self.in_zero_point

    def x_operand(self, run: Value, v: int) -> Value:
        """Input channel ``v`` of the run: byte ``v`` as ``in_type``, or nibble ``v`` if INT4, minus
        ``in_zero_point``."""
        nibble = run[NIBBLE_BITS * v:NIBBLE_BITS * (v + 1)].as_signed() - self.in_zero_point
        return Mux(self.in_type == DType.INT4, nibble, self.byte_operand(run[8 * v:8 * v + 8]))
