"""The LUT unit: table-lookup activations, DIRECT8 and INTERP16 (docs/rtl-lut.md).

A command runs in two phases:

  LOAD  the table is copied from the narrow LUT port into a local table of ``entries_per_row`` entries per
        row (one LUT word per cycle), a copy per lane in two banks of one read and one write port; DIRECT8
        entries are checked against ``out_type`` on the way in. The source prologue (its first two
        words) overlaps it.
  RUN   one group of ``lanes`` elements per cycle, in element order, in two stages:
        1. the group's bytes are cut from a two-word window (the last word taken and the port's held
           word) at the byte offset of the group; each lane computes its table index (and
           interpolation fraction) and addresses two table rows (entry i and entry i + 1);
        2. each lane interpolates and clamps; the group's output bytes go into a pending output word at
           the destination's byte offset, which is written whenever it fills (and once more at the end).

Every fault is decided in the first RUN cycle, before anything is written: that is when the table-fit
check of DIRECT8 is complete, and the other checks are ordered around it as the interpreter orders them.
Elements are read before any byte they feed is overwritten as long as an overlapping destination starts at or
before the source and its elements are no wider (the compiler's rule; the interpreter refuses the rest).

SOFTMAX (docs/arithmetic.md §6.4) shares the LOAD phase (its exp table is 512 16-bit entries), the fault
decision and the output packing; its rows stream through the softmax part instead of RUN.

The engine is wired from named parts (aipu.rtl.lut_parts), one Verilog module each: control (the phases),
checks (the operands and every fault), table_load (LOAD), fetch (the source window, RUN stage 1's elements),
lookup0 .. lookupN (each lane's index, interpolation and clamp), table0 .. tableN (each lane's copy of the
local table), softmax, packer (the write-back).

The table's row width, the groups and the cycles they take are ``aipu.sim.timing.lut``.
"""
from __future__ import annotations

from amaranth.hdl import Mux
from amaranth.lib.wiring import Out, connect, flipped

from aipu.rtl.lut_parts.checks import CommandChecks
from aipu.rtl.lut_parts.control import LutControl
from aipu.rtl.lut_parts.fetch import ElementFetch
from aipu.rtl.lut_parts.interfaces import lanes
from aipu.rtl.lut_parts.lookup import FIELDS, LaneLookup
from aipu.rtl.lut_parts.packer import OutputPacker
from aipu.rtl.lut_parts.softmax import SoftmaxStream
from aipu.rtl.lut_parts.table import TableCopy, TableLoad
from aipu.rtl.ports import read_port, word_bytes, write_port
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import SOFTMAX_ENTRY_BYTES, Buffer, HardwareConfig
from aipu.sim.machine.isa import VECTOR_SOURCE_BUFFERS, Opcode, Unit
from aipu.sim.timing.lut import ENTRY_BYTES


class LutUnit(UnitComponent):
    """Executes LUT commands: reads ``act_read`` or ``out_read``, the table through ``lut_read``, writes
    ``out_write``. Lanes and table row width come from the port widths (each at least one table entry)."""

    UNIT = Unit.LUT

    def __init__(self, config: HardwareConfig):
        least = {**{buffer: ENTRY_BYTES for buffer in (*VECTOR_SOURCE_BUFFERS, Buffer.OUT)},
                 Buffer.LUT: SOFTMAX_ENTRY_BYTES}    # a LUT word carries whole softmax exp entries
        for buffer, size in least.items():
            if word_bytes(config, buffer) < size:
                raise ValueError(f"LutUnit needs buffers.{buffer.name.lower()}.port_bytes >= {size}, "
                                 f"got {word_bytes(config, buffer)}")
        super().__init__(config)

    def ports(self, config: HardwareConfig) -> dict:
        members = {f"{b.name.lower()}_read": Out(read_port(config, b)) for b in VECTOR_SOURCE_BUFFERS}
        return {**members, "lut_read": Out(read_port(config, Buffer.LUT)),
                "out_write": Out(write_port(config, Buffer.OUT))}

    def elaborate_engine(self, m, word, start, done, fault, fault_field) -> None:
        config = self.config
        cmd = self.view(word, Opcode.LUT)
        m.submodules.control = control = LutControl(self.error_names)
        m.submodules.checks = checks = CommandChecks(config, self.error_names)
        m.submodules.table_load = table = TableLoad(config)
        m.submodules.fetch = fetch = ElementFetch(config)
        m.submodules.softmax = softmax = SoftmaxStream(config)
        m.submodules.packer = packer = OutputPacker(config)
        ops = checks.operands
        m.d.comb += [checks.command.eq(word), fetch.command.eq(cmd), softmax.command.eq(word),
                     *(part.operands.eq(ops) for part in (table, fetch, packer)),
                     control.start.eq(start), control.is_softmax.eq(ops.is_softmax), done.eq(packer.done),
                     control.refused.eq(checks.fault), control.field.eq(checks.field), fault.eq(control.fault),
                     fault_field.eq(control.fault_field), checks.entries_bad.eq(table.entries_bad),
                     control.prologue.eq(table.prologue), control.prologue_last.eq(table.prologue_last),
                     control.loaded.eq(table.loaded), control.last_group.eq(fetch.last_group),
                     control.done.eq(packer.done), table.begin.eq(control.begin), table.load.eq(control.load),
                     fetch.begin.eq(control.begin), fetch.prime.eq(control.prime),
                     fetch.prime_hold.eq(control.prime_hold), fetch.advance.eq(control.advance),
                     softmax.begin.eq(control.softmax_begin), packer.begin.eq(control.begin),
                     packer.group_valid.eq(fetch.staged_valid), packer.group_last.eq(fetch.staged_last),
                     packer.group_bytes.eq(fetch.staged_bytes), packer.softmax_valid.eq(softmax.valid),
                     packer.softmax_last.eq(softmax.last), packer.softmax_result.eq(softmax.result)]
        connect(m, flipped(self.lut_read), table.lut_read)
        connect(m, flipped(self.out_write), packer.out_write)
        for buffer in VECTOR_SOURCE_BUFFERS:    # RUN's reads, or the softmax stream's while it reads
            name = f"{buffer.name.lower()}_read"
            port, lut_side, softmax_side = getattr(self, name), getattr(fetch, name), getattr(softmax, name)
            m.d.comb += [port.addr.eq(Mux(softmax.reading, softmax_side.addr, lut_side.addr)),
                         port.en.eq(Mux(softmax.reading, softmax_side.en, lut_side.en)),
                         lut_side.data.eq(port.data), softmax_side.data.eq(port.data)]

        # the local table: a copy per lane (TableCopy: two banks of one read and one write port); the softmax
        # reads lane 0's while no lane runs
        for lane in range(lanes(config)):
            m.submodules[f"lookup{lane}"] = lookup = LaneLookup(config)
            m.submodules[f"table{lane}"] = copy = TableCopy(config)
            softmax_reads = ops.is_softmax if lane == 0 else 0
            m.d.comb += [lookup.raw.eq(fetch.raw[lane]), lookup.sample.eq(fetch.sample[lane]),
                         lookup.interp.eq(ops.interp), packer.value[lane].eq(lookup.value),
                         *(getattr(lookup, name).eq(getattr(cmd, name)) for name in FIELDS),
                         copy.write_addr.eq(table.write_addr), copy.write_data.eq(table.write_data),
                         copy.write_en.eq(table.write_en),
                         copy.row_a.eq(Mux(softmax_reads, softmax.lookup_addr, lookup.row_a)),
                         copy.row_b.eq(Mux(softmax_reads, softmax.lookup_addr, lookup.row_b)),
                         lookup.data_a.eq(copy.data_a), lookup.data_b.eq(copy.data_b)]
        m.d.comb += softmax.lookup_data.eq(m.submodules.table0.data_a)
