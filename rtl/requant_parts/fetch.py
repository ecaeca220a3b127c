"""REQUANT's stream stage A: one lane group a cycle, its ACC word and each lane's channel."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.ports import read_port
from aipu.rtl.requant_parts.interfaces import command, element_bytes, remainder
from aipu.sim.machine.arch import ACC_BITS, Buffer, HardwareConfig
from aipu.sim.timing.requant import RequantGeometry


class GroupFetch(wiring.Component):
    """Walks the command's lane groups (``lanes`` consecutive ACC entries, aligned), one per cycle while
    ``issue`` is high, from the group of ``acc_addr`` on; ``last`` says the group issued is the last.

    Per group it reads the ACC word and sets ``channel``, the channel of lane 0's element (lane j's is
    ``channel + j`` mod channels, the record store's window): ``(element index) mod channels``, started at
    ``begin`` without a divider and advanced by ``lanes mod channels`` a group (for the first group lane 0
    may lie before ``acc_addr``: its channel is then that of the element it would hold). One cycle later
    (stage B) ``valid`` holds, ``accumulator[j]`` is lane j's entry, ``in_tile`` marks the lanes inside
    [acc_addr, acc_addr + pixels * channels) and
    ``group_byte`` is the OUT byte of lane 0 (``out_addr`` minus the first group's leading lanes).

    Signature: ``command``, ``begin``, ``issue`` (In), ``last`` (Out), ``acc_read`` (the ACC port),
    ``channel`` (Out), ``valid``, ``in_tile``, ``group_byte``, ``accumulator`` (Out, one per lane).
    """

    def __init__(self, config: HardwareConfig):
        self.geometry = geometry = RequantGeometry.of(config)
        layout = command(config)
        lanes = geometry.lanes
        super().__init__({"command": In(layout), "begin": In(1), "issue": In(1), "last": Out(1),
                          "acc_read": Out(read_port(config, Buffer.ACC)),
                          "channel": Out(layout["channels"].shape),
                          "valid": Out(1), "in_tile": Out(lanes), "group_byte": Out(signed(layout["out_addr"].shape.width + 2)),
                          "accumulator": Out(signed(ACC_BITS)).array(lanes)})

    def elaborate(self, platform) -> Module:
        m = Module()
        cmd, lanes = self.command, self.geometry.lanes
        lane_bits = (lanes - 1).bit_length()
        first_lane = cmd.acc_addr[:lane_bits] if lane_bits else Const(0)
        last_entry = cmd.acc_addr + cmd.pixels * cmd.channels - 1
        first_group, last_group = cmd.acc_addr >> lane_bits, last_entry >> lane_bits
        group = Signal.like(last_group)
        group_byte = Signal.like(self.group_byte)                     # OUT byte of lane 0 of the group
        channel_step = Signal.like(cmd.channels)                      # lanes mod channels
        slot_bits = (self.geometry.acc_entries // lanes - 1).bit_length()
        slot = Signal(max(1, slot_bits))
        m.d.comb += [self.acc_read.addr.eq(group >> slot_bits), self.acc_read.en.eq(self.issue),
                     self.last.eq(group == last_group)]
        # the last lane is never before the first lane, lane 0 never after the last entry: no constant compares
        in_tile = Cat(((group != first_group) | (j >= first_lane if j < lanes - 1 else Const(1))) &
                      ((group != last_group) | (j <= last_entry[:lane_bits] if j else Const(1)))
                      for j in range(lanes))
        m.d.sync += self.valid.eq(self.issue)
        with m.If(self.issue):
            m.d.sync += [slot.eq(group[:slot_bits] if slot_bits else 0), self.in_tile.eq(in_tile),
                         self.group_byte.eq(group_byte), group.eq(group + 1),
                         group_byte.eq(group_byte + lanes * element_bytes(cmd))]
            advanced = self.channel + channel_step
            m.d.sync += self.channel.eq(Mux(advanced >= cmd.channels, advanced - cmd.channels, advanced))
        step, start = self._first_channel(m, first_lane)
        with m.If(self.begin):
            m.d.sync += [channel_step.eq(step), self.channel.eq(start), group.eq(first_group),
                         group_byte.eq(cmd.out_addr - first_lane * element_bytes(cmd))]

        entries = self.acc_read.data.word_select(slot, ACC_BITS * lanes) if slot_bits else \
            self.acc_read.data[:ACC_BITS * lanes]
        for j, accumulator in enumerate(self.accumulator):
            m.d.comb += accumulator.eq(entries[ACC_BITS * j:ACC_BITS * (j + 1)])
        return m

    def _first_channel(self, m, first_lane):
        """``lanes mod channels``, and the channel of lane 0 in the first group: -first_lane mod channels,
        formed as ((lanes - first_lane) mod channels - lanes mod channels) mod channels (all operands >= 0)."""
        cmd, lanes = self.command, self.geometry.lanes
        step = remainder(m, Const(lanes), cmd.channels, lanes.bit_length(), "lanes_mod_channels")
        ahead = remainder(m, lanes - first_lane, cmd.channels, lanes.bit_length(), "lane0_ahead")
        return step, Mux(ahead >= step, ahead - step, ahead + cmd.channels - step)
