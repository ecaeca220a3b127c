"""REQUANT's write-back: each group's outputs merged nibble by nibble into a two-word window that writes OUT
whole words."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl import arith
from aipu.rtl.ports import write_port
from aipu.rtl.requant_parts.interfaces import NIBBLE_BITS, command
from aipu.rtl.requant_parts.lane import VALUE_BITS
from aipu.sim.machine.arch import DTYPE_BITS, Buffer, HardwareConfig
from aipu.sim.timing.requant import WIDEST_ELEMENT_BYTES, RequantGeometry


def barrel_shift_left(m, value, amount, unit_bits: int, name: str):
    """``value`` << (amount * unit_bits), keeping the width: one constant-shift stage per bit of ``amount``
    (a variable shift of a wide value makes every output bit depend on every input bit)."""
    for bit in range(len(amount)):
        shifted = Cat(Const(0, unit_bits << bit), value)[:len(value)]
        value = arith.net(m, Mux(amount[bit], shifted, value), f"{name}_{bit}")
    return value


class OutputWindow(wiring.Component):
    """Places the ``lanes`` values of a ``valid`` group (the low ``out_type`` nibbles of each: one for INT4;
    lanes outside ``in_tile`` masked) at OUT nibble ``group_nibble`` in a window of two OUT words starting at
    the word of ``out_addr`` (from ``begin``). When the window's first word is complete it is written and the
    window moves on a word, at most one per cycle since a group fits one word; ``flush`` writes what the first
    word holds, if anything, and empties the window. A command's outputs fill whole bytes (INT4: an even count
    from ``out_addr``'s low nibble on), so a byte is written with both its nibbles.

    Signature: ``command``, ``begin``, ``flush``, ``valid``, ``in_tile``, ``group_nibble``, ``value`` (In, one
    per lane), ``out_write`` (the OUT port).
    """

    def __init__(self, config: HardwareConfig):
        self.geometry = geometry = RequantGeometry.of(config)
        layout = command(config)
        super().__init__({"command": In(layout), "begin": In(1), "flush": In(1), "valid": In(1),
                          "in_tile": In(geometry.lanes),
                          "group_nibble": In(signed(layout["out_addr"].shape.width + 3)),
                          "value": In(signed(VALUE_BITS)).array(geometry.lanes),
                          "out_write": Out(write_port(config, Buffer.OUT))})

    def elaborate(self, platform) -> Module:
        m = Module()
        cmd, lanes, out_bytes = self.command, self.geometry.lanes, self.geometry.out_bytes
        word = 2 * out_bytes                                    # nibbles an OUT word holds
        lane_data, lane_mask = Const(0), Const(0)
        for dtype, bits in DTYPE_BITS.items():                  # each type's values, nibble-aligned
            nibbles = bits // NIBBLE_BITS
            is_type = cmd.out_type == dtype
            lane_data = Mux(is_type, Cat(value[:bits] for value in self.value), lane_data)
            lane_mask = Mux(is_type, Cat(self.in_tile[j].replicate(nibbles) for j in range(lanes)), lane_mask)
        window = 2 * word
        bias = WIDEST_ELEMENT_BYTES * 2 * lanes                 # keeps the first group's offset >= 0
        base = Signal(len(cmd.out_addr) + 2)                    # OUT nibble address of the window's first word
        data, mask = Signal(NIBBLE_BITS * window), Signal(window)
        offset = Signal(range(word + 2 * bias))
        m.d.comb += offset.eq(self.group_nibble - base + bias)
        reach = bias + window                                    # zero-extended so every slice exists
        placed_data = barrel_shift_left(m, Cat(lane_data, Const(0, NIBBLE_BITS * reach)), offset, NIBBLE_BITS,
                                        "placed_data")
        placed_data = placed_data[NIBBLE_BITS * bias:NIBBLE_BITS * reach]
        placed_mask = barrel_shift_left(m, Cat(lane_mask, Const(0, reach)), offset, 1, "placed_mask")
        placed_mask = Mux(self.valid, placed_mask[bias:reach], 0)
        merged_data = Cat(Mux(placed_mask[i], placed_data[NIBBLE_BITS * i:NIBBLE_BITS * (i + 1)],
                              data[NIBBLE_BITS * i:NIBBLE_BITS * (i + 1)]) for i in range(window))
        merged_mask = mask | placed_mask
        word_full = merged_mask[word - 1]
        port = self.out_write
        m.d.comb += [port.addr.eq(base // word), port.data.eq(merged_data[:NIBBLE_BITS * word]),
                     port.mask.eq(Cat(merged_mask[2 * b] | merged_mask[2 * b + 1] for b in range(out_bytes))),
                     port.en.eq(word_full | (self.flush & (mask[:word] != 0)))]
        with m.If(word_full):
            m.d.sync += [data.eq(merged_data[NIBBLE_BITS * word:]), mask.eq(merged_mask[word:]),
                         base.eq(base + word)]
        with m.Else():
            m.d.sync += [data.eq(merged_data), mask.eq(merged_mask)]
        with m.If(self.begin):
            m.d.sync += [mask.eq(0), base.eq(cmd.out_addr // out_bytes * word)]
        with m.If(self.flush):
            m.d.sync += mask.eq(0)
        return m
