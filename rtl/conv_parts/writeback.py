"""CONV's write-back: a pixel's new accumulators into ACC, two words a cycle, byte-masked to its block."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.conv_parts.interfaces import pixel_place
from aipu.rtl.lanes import counter, select_word, shift_up
from aipu.rtl.ports import word_bytes, write_port
from aipu.sim.machine.arch import ACC_BITS, Buffer, HardwareConfig
from aipu.sim.timing.conv import ENTRY_BYTES, acc_beats


class AccWriteBack(wiring.Component):
    """When ``place.valid``, registers ``sums`` shifted to byte ``acc_offset`` of a window of ``2·acc_beats``
    ACC words from ``acc_word``, with a byte mask that covers the block's first ``cols`` entries only; then
    writes the window in ``acc_beats`` cycles, words ``2b`` and ``2b + 1`` on ``acc_write``/``acc_write_b`` in
    cycle ``b``. A new pixel arrives every ``beats`` cycles, never fewer than ``acc_beats``.

    Signature: ``place`` (In: from the issue), ``sums`` (In: from the MAC array), ``acc_write``,
    ``acc_write_b`` (the ACC write ports).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({"place": In(pixel_place(config)), "sums": In(ACC_BITS * config.mac.cols),
                          "acc_write": Out(write_port(config, Buffer.ACC)),
                          "acc_write_b": Out(write_port(config, Buffer.ACC))})

    def elaborate(self, platform) -> Module:
        m = Module()
        place = self.place
        beats, port_bytes = acc_beats(self.config), word_bytes(self.config, Buffer.ACC)
        entry_mask = Cat(*((j < place.cols).replicate(ENTRY_BYTES) for j in range(self.config.mac.cols)))
        window_bytes = 2 * beats * port_bytes
        write_data, write_mask = Signal(8 * window_bytes), Signal(window_bytes)
        writing, write_beat, write_word = Signal(), counter(beats), Signal.like(place.acc_word)
        with m.If(place.valid):
            m.d.sync += [writing.eq(1), write_beat.eq(0), write_word.eq(place.acc_word),
                         write_data.eq(shift_up(m, "write_data_placed", self.sums, place.acc_offset, 8, window_bytes)),
                         write_mask.eq(shift_up(m, "write_mask_placed", entry_mask, place.acc_offset, 1, window_bytes))]
        with m.Elif(writing):
            m.d.sync += write_beat.eq(write_beat + 1)
            with m.If(write_beat == beats - 1):
                m.d.sync += writing.eq(0)
        for half, port in enumerate((self.acc_write, self.acc_write_b)):
            m.d.comb += [port.addr.eq(write_word + 2 * write_beat + half), port.en.eq(writing),
                         port.data.eq(select_word(m, f"write_data{half}", write_data, 2 * write_beat + half,
                                                  8 * port_bytes)),
                         port.mask.eq(select_word(m, f"write_mask{half}", write_mask, 2 * write_beat + half, port_bytes))]
        return m
