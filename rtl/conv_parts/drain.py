"""DWCONV's drain: a finished block's accumulators into ACC, one run of entries, two words a cycle."""
from __future__ import annotations

from amaranth.hdl import C, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.conv_parts.interfaces import block_drain, depthwise_geometry, slots
from aipu.rtl.lanes import shift_down
from aipu.rtl.ports import read_port, word_bytes, write_port
from aipu.sim.machine.arch import ACC_BITS, Buffer, HardwareConfig
from aipu.sim.timing.conv import ENTRY_BYTES


class DepthwiseDrain(wiring.Component):
    """From ``block.start`` the block's slots 0 .. entries - 1 (already in ACC order) go to the ACC entries
    from ``acc_first``: in each of the next ``drain_beats`` cycles two ACC words, ``w + 2b`` and ``w + 2b + 1``,
    are read (``accumulate``) and their entries cut from the bank (a shifter by the run's entry offset); a
    cycle later the words are written, the old entries added when accumulating, byte-masked to the run.
    ``done`` marks the last write of the command's last block.

    Signature: ``geometry`` (In: the depthwise setup's), ``accumulate`` (In: the command's), ``block`` (In:
    from the tap walk), ``bank0``, ``bank1`` (In: the accumulators), ``acc_read``, ``acc_read_b``,
    ``acc_write``, ``acc_write_b`` (the ACC ports), ``done`` (Out).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({
            "geometry": In(depthwise_geometry(config)), "accumulate": In(1), "block": In(block_drain(config)),
            "bank0": In(ACC_BITS * slots(config)), "bank1": In(ACC_BITS * slots(config)),
            "acc_read": Out(read_port(config, Buffer.ACC)), "acc_read_b": Out(read_port(config, Buffer.ACC)),
            "acc_write": Out(write_port(config, Buffer.ACC)), "acc_write_b": Out(write_port(config, Buffer.ACC)),
            "done": Out(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        block, geo = self.block, self.geometry
        port_bytes = word_bytes(self.config, Buffer.ACC)
        entries_per_word = port_bytes // ENTRY_BYTES
        lanes = 2 * entries_per_word
        draining, beat, bank = Signal(), Signal.like(geo.drain_beats), Signal()
        first_byte = block.acc_first * ENTRY_BYTES
        word = Signal(range(2 * self.config.buffer_units(Buffer.ACC)))
        last_word = Signal.like(word)       # the run's last: no read past it (docs/isa.md, "Banks")
        entries, last = Signal.like(block.entries), Signal()
        # the entry of the bank that lane 0 of this beat takes, plus entries_per_word (never negative)
        lane0 = Signal(range(slots(self.config) + 2 * lanes))
        with m.If(draining):
            m.d.sync += [beat.eq(beat + 1), lane0.eq(lane0 + lanes)]
            with m.If(beat == geo.drain_beats - 1):
                m.d.sync += draining.eq(0)
        with m.If(block.start):      # last: a block's drain may start in the previous one's last beat
            m.d.sync += [draining.eq(1), beat.eq(0), bank.eq(block.bank), entries.eq(block.entries),
                         last.eq(block.last), word.eq(first_byte >> (port_bytes.bit_length() - 1)),
                         last_word.eq((first_byte + block.entries * ENTRY_BYTES - 1) >> (port_bytes.bit_length() - 1)),
                         lane0.eq(entries_per_word - block.acc_first % entries_per_word)]

        reads = (self.acc_read, self.acc_read_b)
        for half, port in enumerate(reads):
            read = word + 2 * beat + half
            m.d.comb += [port.addr.eq(read), port.en.eq(draining & self.accumulate & (read <= last_word))]
        padded = Cat(C(0, ACC_BITS * entries_per_word), Mux(bank, self.bank1, self.bank0))
        writing, final = Signal(), Signal()
        write_word = Signal.like(word)
        values = Signal(ACC_BITS * lanes)
        in_run = Signal(lanes)
        m.d.sync += [writing.eq(draining), final.eq(draining & last & (beat == geo.drain_beats - 1)),
                     write_word.eq(word + 2 * beat),
                     values.eq(shift_down(m, "drained", padded, lane0, ACC_BITS, lanes)),
                     in_run.eq(Cat(*((lane0 + lane >= entries_per_word) & (lane0 + lane < entries + entries_per_word)
                                     for lane in range(lanes))))]
        for half, port in enumerate((self.acc_write, self.acc_write_b)):
            data = []
            for lane in range(half * entries_per_word, (half + 1) * entries_per_word):
                value = values[ACC_BITS * lane:ACC_BITS * (lane + 1)]
                old = reads[half].data[ACC_BITS * (lane % entries_per_word):ACC_BITS * (lane % entries_per_word + 1)]
                data.append((value + Mux(self.accumulate, old, 0))[:ACC_BITS])
            mask = Cat(*(in_run[lane].replicate(ENTRY_BYTES)
                         for lane in range(half * entries_per_word, (half + 1) * entries_per_word)))
            m.d.comb += [port.addr.eq(write_word + half), port.en.eq(writing), port.data.eq(Cat(*data)),
                         port.mask.eq(mask)]
        m.d.comb += self.done.eq(writing & final)
        return m
