"""WDEC's write-back: a decoded level as int8 at its [out_c][k_h][k_w][in_c] byte of WEIGHT."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.ports import word_bytes, write_port
from aipu.rtl.wdec_parts.interfaces import command_field
from aipu.rtl.wdec_parts.leaves import MAX_ZDEPTH, MORTON_LEVELS
from aipu.sim.machine.arch import Buffer, HardwareConfig


class LevelWriter(wiring.Component):
    """Writes ``level`` at byte ``wgt_addr + (kernel·taps + tap)·in_c + channel`` (one byte lane of the
    port's word) in the cycle ``valid`` is high: the weights land transposed, as CONV reads them.

    Signature: ``valid``, ``level``, ``kernel``, ``tap``, ``channel`` (In: the level and its position),
    ``taps`` (In: k_h·k_w), the command's ``wgt_addr`` and ``in_c`` (In), ``weight_write`` (the WEIGHT port).
    """

    def __init__(self, config: HardwareConfig):
        self.port_bytes = word_bytes(config, Buffer.WEIGHT)
        in_c = command_field(config, "in_c")
        super().__init__({
            "valid": In(1), "level": In(8), "kernel": In(command_field(config, "out_c").width + 1),
            "tap": In(MORTON_LEVELS), "channel": In(in_c.width + 1), "taps": In(range(MAX_ZDEPTH + 1)),
            "wgt_addr": In(command_field(config, "wgt_addr")), "in_c": In(in_c),
            "weight_write": Out(write_port(config, Buffer.WEIGHT))})

    def elaborate(self, platform) -> Module:
        m = Module()
        port, port_bytes = self.weight_write, self.port_bytes
        address = self.wgt_addr + (self.kernel * self.taps + self.tap) * self.in_c + self.channel
        with m.If(self.valid):
            m.d.comb += [port.en.eq(1),
                         port.addr.eq(address >> (port_bytes.bit_length() - 1)),
                         port.data.eq(self.level.replicate(port_bytes)),
                         port.mask.eq(1 << address[:max(1, port_bytes.bit_length() - 1)] if port_bytes > 1 else 1)]
        return m
