"""LUT's local table: the load of the command's table, one LUT word a cycle, into its rows, and a lane's copy
of it in two banks of one read and one write port each."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from aipu.rtl.lut_parts.interfaces import log2, operands, table_row, table_rows
from aipu.rtl.lut_parts.softmax import exp_row_bad
from aipu.rtl.ports import read_port, word_bytes
from aipu.sim.machine.arch import LUT_ENTRY_BITS, Buffer, HardwareConfig
from aipu.sim.timing.lut import entries_per_row


class TableLoad(wiring.Component):
    """From ``begin``, while ``load`` is high: one LUT word a cycle from the word of ``table_addr`` on; from the
    third cycle (the first two are the prologue the source's first reads overlap) one row a cycle into the
    local table (``write_*``), cut at ``table_addr``'s byte offset from the last word and the word held, so
    any byte address loads at full rate. ``loaded``: the table's last row is being written.

    Each row is checked as it passes: a DIRECT8 entry outside ``out_type``, or an exp entry above 2^20 or a
    zero E[0] (SOFTMAX); ``entries_bad`` is sticky until ``begin``.

    Signature: ``operands`` (In), ``begin``, ``load`` (In), ``lut_read`` (the LUT port), ``write_addr``,
    ``write_data``, ``write_en`` (Out: the table's write port), ``prologue``, ``prologue_last``, ``loaded``,
    ``entries_bad`` (Out).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({"operands": In(operands(config)), "begin": In(1), "load": In(1),
                          "lut_read": Out(read_port(config, Buffer.LUT)), "write_addr": Out(range(table_rows(config))),
                          "write_data": Out(table_row(config)), "write_en": Out(1), "prologue": Out(1),
                          "prologue_last": Out(1), "loaded": Out(1), "entries_bad": Out(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        config, ops, port = self.config, self.operands, self.lut_read
        lut_word_bytes, row_entries = word_bytes(config, Buffer.LUT), entries_per_row(config)
        step = Signal(range(table_rows(config) + 3))
        lut_word = Signal(range(config.buffer(Buffer.LUT).bytes // lut_word_bytes + 2))
        lut_last = Signal(8 * lut_word_bytes)
        offset = ops.table_addr & (lut_word_bytes - 1)
        row = Cat(lut_last, port.data).bit_select(offset * 8, 8 * lut_word_bytes)
        row_bad = Mux(ops.is_softmax, exp_row_bad(row, step == 2), Cat(
            (entry < ops.out_min) | (entry > ops.out_max)
            for entry in (row.word_select(i, LUT_ENTRY_BITS).as_signed() for i in range(row_entries))).any())
        load_rows = (ops.entries + row_entries - 1) >> log2(row_entries)
        m.d.comb += [port.addr.eq(lut_word), port.en.eq(self.load), self.write_addr.eq(step - 2),
                     self.write_data.eq(row), self.prologue.eq(step < 2), self.prologue_last.eq(step == 1),
                     self.loaded.eq(step == load_rows + 1)]
        with m.If(self.load):
            m.d.sync += [step.eq(step + 1), lut_word.eq(lut_word + 1), lut_last.eq(port.data)]
            with m.If(~self.prologue):
                m.d.comb += self.write_en.eq(1)
                m.d.sync += self.entries_bad.eq(self.entries_bad | row_bad)
        with m.If(self.begin):
            m.d.sync += [step.eq(0), lut_word.eq(ops.table_addr >> log2(lut_word_bytes)), self.entries_bad.eq(0)]
        return m


class TableCopy(wiring.Component):
    """One lane's copy of the local table: its even rows in bank ``even``, its odd rows in bank ``odd``, each
    with one write port (every copy takes the load's rows, ``write_*``) and one read port. A lane reads rows
    ``row_a`` and ``row_b`` = ``row_a`` or ``row_a + 1`` (the rows of entries i and i + 1): one even and one
    odd row, or one row twice, so each bank serves one read a cycle. ``data_a``, ``data_b``: the rows, one
    cycle after the addresses.

    Signature: ``write_addr``, ``write_data``, ``write_en`` (In), ``row_a``, ``row_b`` (In), ``data_a``,
    ``data_b`` (Out).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        rows, row = range(table_rows(config)), table_row(config)
        super().__init__({"write_addr": In(rows), "write_data": In(row), "write_en": In(1),
                          "row_a": In(rows), "row_b": In(rows), "data_a": Out(row), "data_b": Out(row)})

    def elaborate(self, platform) -> Module:
        m = Module()
        rows = table_rows(self.config)
        # the odd row of the two is row_a >> 1 of the odd bank, the even one (row_a + 1) >> 1 of the even bank
        addresses = ((self.row_a + 1) >> 1, self.row_a >> 1)
        data = []
        for parity, (name, addr) in enumerate(zip(("even", "odd"), addresses)):
            m.submodules[name] = bank = Memory(shape=table_row(self.config), depth=(rows + 1 - parity) // 2, init=[])
            write, read = bank.write_port(), bank.read_port()
            m.d.comb += [write.addr.eq(self.write_addr >> 1), write.data.eq(self.write_data),
                         write.en.eq(self.write_en & (self.write_addr[0] == parity)), read.addr.eq(addr)]
            data.append(read.data)
        odd_a, odd_b = Signal(), Signal()
        m.d.sync += [odd_a.eq(self.row_a[0]), odd_b.eq(self.row_b[0])]
        m.d.comb += [self.data_a.eq(Mux(odd_a, data[1], data[0])), self.data_b.eq(Mux(odd_b, data[1], data[0]))]
        return m
