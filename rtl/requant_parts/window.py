"""REQUANT's write-back: each group's output bytes merged into a two-word window that writes OUT whole words."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl import arith
from aipu.rtl.ports import write_port
from aipu.rtl.requant_parts.interfaces import command, element_bytes
from aipu.rtl.requant_parts.lane import VALUE_BITS
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.timing.requant import WIDEST_ELEMENT_BYTES, RequantGeometry


def barrel_shift_left(m, value, amount, unit_bits: int, name: str):
    """``value`` << (amount * unit_bits), keeping the width: one constant-shift stage per bit of ``amount``
    (a variable shift of a wide value makes every output bit depend on every input bit)."""
    for bit in range(len(amount)):
        shifted = Cat(Const(0, unit_bits << bit), value)[:len(value)]
        value = arith.net(m, Mux(amount[bit], shifted, value), f"{name}_{bit}")
    return value


class OutputWindow(wiring.Component):
    """Places the ``lanes`` values of a ``valid`` group (the low ``out_type`` bytes of each, lanes outside
    ``in_tile`` masked) at OUT byte ``group_byte`` in a window of two OUT words starting at the word of
    ``out_addr`` (from ``begin``). When the window's first word is complete it is written and the window moves
    on a word, at most one per cycle since a group fits one word; ``flush`` writes what the first word holds,
    if anything, and empties the window.

    Signature: ``command``, ``begin``, ``flush``, ``valid``, ``in_tile``, ``group_byte``, ``value`` (In, one per
    lane), ``out_write`` (the OUT port).
    """

    def __init__(self, config: HardwareConfig):
        self.geometry = geometry = RequantGeometry.of(config)
        layout = command(config)
        super().__init__({"command": In(layout), "begin": In(1), "flush": In(1), "valid": In(1),
                          "in_tile": In(geometry.lanes), "group_byte": In(signed(layout["out_addr"].shape.width + 2)),
                          "value": In(signed(VALUE_BITS)).array(geometry.lanes),
                          "out_write": Out(write_port(config, Buffer.OUT))})

    def elaborate(self, platform) -> Module:
        m = Module()
        cmd, lanes, out_bytes = self.command, self.geometry.lanes, self.geometry.out_bytes
        wide = element_bytes(cmd) == WIDEST_ELEMENT_BYTES
        lane_data = Mux(wide, Cat(value[:16] for value in self.value), Cat(value[:8] for value in self.value))
        lane_mask = Mux(wide, Cat(Cat(self.in_tile[j], self.in_tile[j]) for j in range(lanes)), self.in_tile)
        window_bytes = 2 * out_bytes
        bias = WIDEST_ELEMENT_BYTES * lanes                     # keeps the first group's offset >= 0
        base = Signal(len(cmd.out_addr) + 1)                    # OUT byte address of the window's first word
        data, mask = Signal(8 * window_bytes), Signal(window_bytes)
        offset = Signal(range(out_bytes + 2 * bias))
        m.d.comb += offset.eq(self.group_byte - base + bias)
        reach = bias + window_bytes                              # zero-extended so every slice exists
        placed_data = barrel_shift_left(m, Cat(lane_data, Const(0, 8 * reach)), offset, 8, "placed_data")
        placed_data = placed_data[8 * bias:8 * reach]
        placed_mask = barrel_shift_left(m, Cat(lane_mask, Const(0, reach)), offset, 1, "placed_mask")
        placed_mask = Mux(self.valid, placed_mask[bias:reach], 0)
        merged_data = Cat(Mux(placed_mask[i], placed_data[8 * i:8 * i + 8], data[8 * i:8 * i + 8])
                          for i in range(window_bytes))
        merged_mask = mask | placed_mask
        word_full = merged_mask[out_bytes - 1]
        port = self.out_write
        m.d.comb += [port.addr.eq(base // out_bytes), port.data.eq(merged_data[:8 * out_bytes]),
                     port.mask.eq(merged_mask[:out_bytes]),
                     port.en.eq(word_full | (self.flush & (mask[:out_bytes] != 0)))]
        with m.If(word_full):
            m.d.sync += [data.eq(merged_data[8 * out_bytes:]), mask.eq(merged_mask[out_bytes:]),
                         base.eq(base + out_bytes)]
        with m.Else():
            m.d.sync += [data.eq(merged_data), mask.eq(merged_mask)]
        with m.If(self.begin):
            m.d.sync += [mask.eq(0), base.eq(cmd.out_addr // out_bytes * out_bytes)]
        with m.If(self.flush):
            m.d.sync += mask.eq(0)
        return m
