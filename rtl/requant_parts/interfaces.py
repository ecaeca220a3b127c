"""What REQUANT's parts share: the record as PARAM stores it, the record checks' flags, the command's
per-type constants and a small remainder."""
from __future__ import annotations

from amaranth.hdl import Mux, signed, unsigned
from amaranth.lib import data

from aipu.rtl import arith
from aipu.rtl.commands import command_layout
from aipu.rtl.parts import by_type
from aipu.sim.machine.arch import DTYPE_BITS, PARAM_RECORD, DType, HardwareConfig, dtype_bounds
from aipu.sim.machine.isa import Opcode

# The record as the PARAM buffer stores it (little-endian, packed): integers keep their signedness, the
# float32 scale is its bit pattern.
PARAM_LAYOUT = data.StructLayout({
    name: (signed if dtype.kind == "i" else unsigned)(8 * dtype.itemsize) for name, dtype, _ in PARAM_RECORD})

# Sticky over a command's load: some record has non-zero reserved bits, a shift or negative shift above
# SHIFT_MAX, a non-zero negative shift (refused with dual), a scale that is not finite and positive.
RECORD_FLAGS = data.StructLayout({"reserved": 1, "shift": 1, "negative_shift": 1, "negative_shift_set": 1,
                                  "scale": 1})
NIBBLE_BITS = 4     # OUT is placed in nibbles: an INT4 output is one, a byte two


def command(config: HardwareConfig) -> data.FlexibleLayout:
    """The REQUANT command word's layout (the parts take the word as a port of it)."""
    return command_layout(config, Opcode.REQUANT)


def element_nibbles(cmd):
    """Nibbles of one output element of ``out_type`` (INT4: 1)."""
    return by_type(cmd.out_type, {dtype: bits // NIBBLE_BITS for dtype, bits in DTYPE_BITS.items()})


def entries(cmd):
    """ACC entries the command reads: pixels * channels, twice that with ``dual``."""
    return (cmd.pixels * cmd.channels) << cmd.dual


def type_range(cmd):
    """(least, greatest) value of ``out_type``."""
    return (by_type(cmd.out_type, {dtype: dtype_bounds(dtype)[0] for dtype in DType}),
            by_type(cmd.out_type, {dtype: dtype_bounds(dtype)[1] for dtype in DType}))


def remainder(m, value, divisor, value_bits: int, name: str):
    """value mod divisor for value < 2**value_bits (restoring division, one compare-subtract per bit)."""
    for step in reversed(range(value_bits)):
        value = arith.net(m, Mux(value >= (divisor << step), value - (divisor << step), value), f"{name}_{step}")
    return value
