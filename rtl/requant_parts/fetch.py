"""REQUANT's stream stage A: one lane group a cycle, its ACC word and each output lane's channel; in stage B the
group's accumulators paired into output lanes (dual: two planes an output)."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.ports import read_port
from aipu.rtl.requant_parts.interfaces import command, element_nibbles, entries, remainder
from aipu.sim.machine.arch import ACC_BITS, Buffer, HardwareConfig
from aipu.sim.timing.requant import RequantGeometry


class GroupFetch(wiring.Component):
    """Walks the command's lane groups (``lanes`` consecutive ACC entries, aligned), one per cycle while
    ``issue`` is high, from the group of ``acc_addr`` on; ``last`` says the group issued is the last.

    A group gives up to ``lanes`` outputs, one an entry; with ``dual`` an output takes the pair of entries at
    offsets 2k, 2k + 1 from ``acc_addr``, so a group gives ``lanes / 2`` (one every other group with one lane),
    output lane i taking the pair whose second entry is lane 2i + s (s: the lane parity of second entries; a
    pair's first entry in the previous group is kept from it). Per group it reads the ACC word and sets
    ``channel``, the channel of output lane 0 (output lane i's is ``channel + i`` mod channels, the record
    store's window): its output index mod channels, started at ``begin`` without a divider and advanced by
    the outputs a group mod channels (for the first group output lane 0 may lie before ``acc_addr``: its
    channel is then that of the output it would be). One cycle later (stage B) ``valid`` holds,
    ``accumulator[i]`` (and with ``dual`` ``second[i]``) are output lane i's entries, ``in_tile`` marks the
    output lanes inside the command and ``group_nibble`` is the OUT nibble of output lane 0.

    Signature: ``command``, ``begin``, ``issue`` (In), ``last`` (Out), ``acc_read`` (the ACC port),
    ``channel`` (Out), ``valid``, ``in_tile``, ``group_nibble``, ``accumulator``, ``second`` (Out, one per lane).
    """

    def __init__(self, config: HardwareConfig):
        self.geometry = geometry = RequantGeometry.of(config)
        layout = command(config)
        lanes = geometry.lanes
        super().__init__({"command": In(layout), "begin": In(1), "issue": In(1), "last": Out(1),
                          "acc_read": Out(read_port(config, Buffer.ACC)),
                          "channel": Out(layout["channels"].shape), "valid": Out(1), "in_tile": Out(lanes),
                          "group_nibble": Out(signed(layout["out_addr"].shape.width + 3)),
                          "accumulator": Out(signed(ACC_BITS)).array(lanes),
                          "second": Out(signed(ACC_BITS)).array(lanes)})

    def elaborate(self, platform) -> Module:
        m = Module()
        cmd, lanes = self.command, self.geometry.lanes
        lane_bits = (lanes - 1).bit_length()
        first_lane = cmd.acc_addr[:lane_bits] if lane_bits else Const(0)
        last_entry = cmd.acc_addr + entries(cmd) - 1
        first_group, last_group = cmd.acc_addr >> lane_bits, last_entry >> lane_bits
        group = Signal.like(last_group)
        group_nibble = Signal.like(self.group_nibble)                 # OUT nibble of output lane 0 of the group
        channel_step = Signal.like(cmd.channels)                      # outputs a group mod channels
        slot_bits = (self.geometry.acc_entries // lanes - 1).bit_length()
        slot = Signal(max(1, slot_bits))
        tile, pair_end = Signal(lanes), Signal()                      # stage B: the entries inside, a pair's end
        m.d.comb += [self.acc_read.addr.eq(group >> slot_bits), self.acc_read.en.eq(self.issue),
                     self.last.eq(group == last_group)]
        # the last lane is never before the first lane, lane 0 never after the last entry: no constant compares
        in_tile = Cat(((group != first_group) | (j >= first_lane if j < lanes - 1 else Const(1))) &
                      ((group != last_group) | (j <= last_entry[:lane_bits] if j else Const(1)))
                      for j in range(lanes))
        # one lane: a dual group's entry ends a pair (lies at an odd offset) every other group, and only then
        # gives an output
        ends_pair = (cmd.dual & (group[0] ^ cmd.acc_addr[0])) if lanes == 1 else Const(0)
        m.d.sync += self.valid.eq(self.issue)
        with m.If(self.issue):
            m.d.sync += [slot.eq(group[:slot_bits] if slot_bits else 0), tile.eq(in_tile), pair_end.eq(ends_pair),
                         self.group_nibble.eq(group_nibble), group.eq(group + 1),
                         group_nibble.eq(group_nibble + (self._outputs() + ends_pair) * element_nibbles(cmd))]
            advanced = self.channel + channel_step + ends_pair
            m.d.sync += self.channel.eq(Mux(advanced >= cmd.channels, advanced - cmd.channels, advanced))
        step, start, back = self._first_channel(m, first_lane)
        with m.If(self.begin):
            m.d.sync += [channel_step.eq(step), self.channel.eq(start), group.eq(first_group),
                         group_nibble.eq(2 * cmd.out_addr - back * element_nibbles(cmd))]

        words = self.acc_read.data.word_select(slot, ACC_BITS * lanes) if slot_bits else \
            self.acc_read.data[:ACC_BITS * lanes]
        self._pair(m, [words[ACC_BITS * j:ACC_BITS * (j + 1)].as_signed() for j in range(lanes)], tile, pair_end)
        return m

    def _outputs(self):
        """Outputs a group gives: ``lanes``, or ``lanes / 2`` with dual (with one lane: ends_pair of them)."""
        return Mux(self.command.dual, self.geometry.lanes // 2, self.geometry.lanes)

    def _first_channel(self, m, first_lane):
        """The outputs a group gives mod channels; the channel of output lane 0 in the first group, -back mod
        channels with ``back`` the outputs it lies before the command's first (``first_lane``, or
        ceil(first_lane / 2) with dual), formed as ((outputs - back) mod channels - outputs mod channels) mod
        channels (all operands >= 0); and ``back``."""
        cmd, lanes = self.command, self.geometry.lanes
        back = Mux(cmd.dual, (first_lane + cmd.acc_addr[0]) >> 1, first_lane) if lanes > 1 else Const(0)
        step = remainder(m, self._outputs(), cmd.channels, lanes.bit_length(), "outputs_mod_channels")
        ahead = remainder(m, self._outputs() - back, cmd.channels, lanes.bit_length(), "lane0_ahead")
        return step, Mux(ahead >= step, ahead - step, ahead + cmd.channels - step), back

    def _pair(self, m, words: list, tile, pair_end) -> None:
        """Stage B: each output lane's entries and mask, the entries as they are without dual. With dual,
        second entries lie in lanes of parity s = 1 - acc_addr mod 2 (one lane: every other group), and the
        pair of a second entry in lane 0 begins in the previous group's last lane (``carry``)."""
        cmd, lanes = self.command, self.geometry.lanes
        carry = Signal(signed(ACC_BITS))
        with m.If(self.valid):
            m.d.sync += carry.eq(words[-1])
        if lanes == 1:
            pairs = [(carry, words[0], tile[0] & pair_end)]
        else:
            s = ~cmd.acc_addr[0]
            pairs = [(Mux(s, words[2 * i], words[2 * i - 1] if i else carry), Mux(s, words[2 * i + 1], words[2 * i]),
                      Mux(s, tile[2 * i + 1], tile[2 * i])) for i in range(lanes // 2)]
        for j in range(lanes):
            first, second, inside = pairs[j] if j < len(pairs) else (0, 0, 0)
            m.d.comb += [self.accumulator[j].eq(Mux(cmd.dual, first, words[j])), self.second[j].eq(second),
                         self.in_tile[j].eq(Mux(cmd.dual, inside, tile[j]))]
