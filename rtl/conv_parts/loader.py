"""CONV's weight loader: the next block's weight columns, read into the bank the streaming block does not use."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.conv_parts.interfaces import (NIBBLE_BITS, PHASE, command_field, dim, geometry, int8_halves, next_block,
                                            packed_bytes, weight_column)
from aipu.rtl.conv_parts.window import WordWindow, reads_needed
from aipu.rtl.lanes import counter
from aipu.rtl.ports import read_port, word_bytes
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.timing.conv import ConvTiming


class WeightLoader(wiring.Component):
    """While ``phase.loading``: the ``cols`` columns of ``block``, ``weight_beats`` cycles each (two WEIGHT
    words a cycle). Column ``j`` is a run of ``rows`` bytes of output channel ``j``'s weights (stride
    ``weights_per_out_channel``): byte ``r`` feeds cell ``r``, an int8 weight or two INT4 ones. For groups
    side by side on the diagonal the run starts as many bytes early as the groups before ``j``'s take (``(j
    // group_out) · group_in`` weights), so that byte ``r`` is cell ``r``'s (counters, no divider). In the
    data cycle of a column's last words the run is cut out of them (a ``WordWindow``) and handed to the MAC
    array as ``column``: each weight minus ``w_zero_point``, an int8 one split into its halves (D23), 0
    outside the column's group's cells.

    Signature: ``geometry``, ``phase``, ``block`` (In: from the setup, the sequencer, the block walk),
    ``w_zero_point`` (In: the command's), ``weight_read``, ``weight_read_b`` (the WEIGHT ports, words ``w``
    and ``w + 1``), ``column`` (Out: to the MAC array).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({"geometry": In(geometry(config)), "phase": In(PHASE), "block": In(next_block(config)),
                          "w_zero_point": In(command_field(config, "w_zero_point")),
                          "weight_read": Out(read_port(config, Buffer.WEIGHT)),
                          "weight_read_b": Out(read_port(config, Buffer.WEIGHT)), "column": Out(weight_column(config))})

    def elaborate(self, platform) -> Module:
        m = Module()
        geo, phase, block, column = self.geometry, self.phase, self.block, self.column
        rows, cols, n = self.config.mac.rows, self.config.mac.cols, dim(self.config)
        beats, port_bytes = ConvTiming.of(self.config).weight_beats, word_bytes(self.config, Buffer.WEIGHT)
        load_col, load_beat = Signal(range(cols)), counter(beats)
        load_offset = Signal(range(2 * self.config.buffer(Buffer.WEIGHT).bytes))
        # the column's group within the block: its weights sit in rows [load_row_lo, load_row_lo + group_in)
        load_group_col, load_row_lo = Signal(range(n)), Signal(range(n * cols))
        load_byte = block.weights + load_offset - load_row_lo      # byte r of the run is cell r's weights
        load_word = load_byte >> (port_bytes.bit_length() - 1)
        ports = (self.weight_read, self.weight_read_b)
        # only the block's columns, each run up to its last cell: no word the command does not use
        int4 = geo.int4_weights
        group_bytes, block_bytes = packed_bytes(geo.group_in, int4), packed_bytes(block.rows, int4)
        used = Mux(load_row_lo + block_bytes < rows, load_row_lo + block_bytes, rows)
        for half, port in enumerate(ports):
            word = load_word + 2 * load_beat + half
            m.d.comb += [port.addr.eq(word), port.en.eq(phase.loading & (load_col < block.cols) &
                                                        reads_needed(word, load_byte, used, port_bytes))]
        with m.If(phase.loading):
            with m.If(load_beat == beats - 1):
                m.d.sync += [load_beat.eq(0), load_col.eq(load_col + 1),
                             load_offset.eq(load_offset + geo.weights_per_out_channel)]
                with m.If(load_group_col == geo.group_out - 1):
                    m.d.sync += [load_group_col.eq(0), load_row_lo.eq(load_row_lo + group_bytes)]
                with m.Else():
                    m.d.sync += load_group_col.eq(load_group_col + 1)
            with m.Else():
                m.d.sync += load_beat.eq(load_beat + 1)
        with m.If(phase.begin | phase.boundary):     # last, so that a boundary wins over the count
            m.d.sync += [count.eq(0) for count in (load_col, load_beat, load_offset, load_group_col, load_row_lo)]

        # the read's data cycle
        got_weights, got_beat = Signal(), counter(beats, name="weights_beat")
        got_offset = Signal(range(port_bytes), name="weights_offset")
        got_row_lo = Signal(range(n * cols), name="weights_row_lo")
        got_row_hi = Signal(range(n * cols + rows), name="weights_row_hi")
        m.d.sync += [got_weights.eq(phase.loading), got_beat.eq(load_beat), column.col.eq(load_col),
                     column.bank.eq(~phase.bank), got_offset.eq(load_byte[:len(got_offset)]),
                     got_row_lo.eq(load_row_lo), got_row_hi.eq(load_row_lo + block_bytes)]
        m.submodules.weight_window = window = WordWindow(port_bytes, beats, rows)
        m.d.comb += [window.a.eq(ports[0].data), window.b.eq(ports[1].data), window.valid.eq(got_weights),
                     window.beat.eq(got_beat), window.offset.eq(got_offset)]
        run = window.run
        m.d.comb += column.valid.eq(got_weights & (got_beat == beats - 1))
        zero_point = self.w_zero_point
        for r in range(rows):
            in_group = (r >= got_row_lo) & (r < got_row_hi)
            byte = run[8 * r:8 * r + 8]
            int8_low, int8_high = int8_halves(byte.as_signed() - zero_point)
            low = Mux(int4, byte[:NIBBLE_BITS].as_signed() - zero_point, int8_low)
            high = Mux(int4, byte[NIBBLE_BITS:].as_signed() - zero_point, int8_high)
            m.d.comb += [column.halves[2 * r].eq(Mux(in_group, low, 0)),
                         column.halves[2 * r + 1].eq(Mux(in_group, high, 0))]
        return m
