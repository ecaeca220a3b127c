"""The LUT unit: table-lookup activations, DIRECT8 and INTERP16 (docs/rtl-lut.md).

A command runs in two phases:

  LOAD  the table is copied from the narrow LUT port into a local table memory of ``entries_per_row``
        entries per row (one LUT word per cycle), which every lane reads on its own ports; DIRECT8
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
decision and the output packing; its rows stream through :mod:`aipu.rtl.softmax` instead of RUN.

The table's row width, the groups and the cycles they take are ``aipu.sim.timing.lut``.
"""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from aipu.rtl.arith import clamp, rounding_shift_right
from aipu.rtl.ports import read_port, word_bytes, write_port
from aipu.rtl.softmax import exp_row_bad, softmax_datapath, softmax_violations
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import (DTYPE_BYTES, DTYPE_NUMPY, LUT8_ENTRIES, LUT16_INDEX_BITS_MAX,
                                   LUT16_INDEX_BITS_MIN, LUT16_INPUT_BITS, LUT_ENTRY_BITS, SOFTMAX_ENTRY_BYTES,
                                   Buffer, HardwareConfig, storage_dtype)
from aipu.sim.machine.isa import VECTOR_SOURCE_BUFFERS, LutMode, Opcode, Rounding, Unit
from aipu.sim.timing.lut import ENTRY_BYTES, SOFTMAX_TABLE_BYTES, entries_per_row

DIRECT8_INDEX_BITS = (LUT8_ENTRIES - 1).bit_length()
DIRECT8_ZERO_FIELDS = ("table_log2", "index_shift", "input_min", "qmin", "qmax")   # the interpreter's order
INTERP16_INPUT = next(d for d, t in DTYPE_NUMPY.items() if t == storage_dtype(LUT16_INPUT_BITS, signed=True))
TYPE_RANGES = {dtype: np.iinfo(numpy_type) for dtype, numpy_type in DTYPE_NUMPY.items()}


def _log2(value: int) -> int:
    return value.bit_length() - 1


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

    def elaborate_engine(self, m: Module, word, start, done, fault, fault_field) -> None:
        config = self.config
        cmd, exp_cmd = self.view(word, Opcode.LUT), self.view(word, Opcode.SOFTMAX)
        is_softmax = cmd.opcode == Opcode.SOFTMAX
        sources = {b: getattr(self, f"{b.name.lower()}_read") for b in VECTOR_SOURCE_BUFFERS}
        source_bytes = {b: word_bytes(config, b) for b in VECTOR_SOURCE_BUFFERS}
        out_word_bytes, lut_word_bytes = word_bytes(config, Buffer.OUT), word_bytes(config, Buffer.LUT)
        window_bytes = max(source_bytes.values())
        lanes = max(min(size, out_word_bytes) for size in source_bytes.values())
        row_entries = entries_per_row(config)
        interp, direct = cmd.mode == LutMode.INTERP16, cmd.mode == LutMode.DIRECT8

        # --- per-command quantities (the word is stable while the engine runs) ---------------------------
        def by_type(dtype_field, values: dict, shape) -> Signal:
            """A signal holding values[DType(dtype_field)], for values derived from sim/machine per type."""
            signal = Signal(shape)
            with m.Switch(dtype_field):
                for dtype, value in values.items():
                    with m.Case(dtype):
                        m.d.comb += signal.eq(value)
            return signal

        size_log2 = {dtype: _log2(size) for dtype, size in DTYPE_BYTES.items()}
        out_type = Mux(is_softmax, exp_cmd.out_type, cmd.out_type)
        table_addr = Mux(is_softmax, exp_cmd.table_addr, cmd.table_addr)
        dst_addr = Mux(is_softmax, exp_cmd.dst_addr, cmd.dst_addr)
        in_log2 = by_type(cmd.in_type, size_log2, range(3))
        out_log2 = by_type(out_type, size_log2, range(3))
        out_min = by_type(out_type, {d: int(t.min) for d, t in TYPE_RANGES.items()}, signed(LUT_ENTRY_BITS + 1))
        out_max = by_type(out_type, {d: int(t.max) for d, t in TYPE_RANGES.items()}, signed(LUT_ENTRY_BITS + 1))
        from_out = cmd.src_buf == Buffer.OUT
        source_log2 = Mux(from_out, _log2(source_bytes[Buffer.OUT]), _log2(source_bytes[Buffer.ACT]))
        source_size = Mux(from_out, config.buffer(Buffer.OUT).bytes, config.buffer(Buffer.ACT).bytes)
        group_log2 = Signal(range(_log2(window_bytes) + 1))
        m.d.comb += group_log2.eq(Mux(source_log2 - in_log2 < _log2(out_word_bytes) - out_log2,
                                      source_log2 - in_log2, _log2(out_word_bytes) - out_log2))
        group_in_bytes = Const(1) << (group_log2 + in_log2)
        source_word_bytes = Const(1) << source_log2
        entries = Mux(is_softmax, SOFTMAX_TABLE_BYTES // ENTRY_BYTES,
                      Mux(direct, LUT8_ENTRIES, (Const(1) << cmd.table_log2) + 1))
        load_rows = (entries + row_entries - 1) >> _log2(row_entries)
        src_len, dst_len = cmd.count << in_log2, cmd.count << out_log2
        overlap = from_out & (cmd.src_addr < cmd.dst_addr + dst_len) & (cmd.dst_addr < cmd.src_addr + src_len)
        outside_out_type = {name: (getattr(cmd, name) < out_min) | (getattr(cmd, name) > out_max)
                            for name in ("qmin", "qmax")}
        entries_bad = Signal()   # a DIRECT8 entry outside out_type, a bad exp entry (sticky over the load)

        violations = [
            (cmd.src_addr + src_len > source_size, "src_addr"),
            *[(direct & (getattr(cmd, name) != 0), name) for name in DIRECT8_ZERO_FIELDS],
            (cmd.table_addr + (entries << _log2(ENTRY_BYTES)) > config.buffer(Buffer.LUT).bytes, "table_addr"),
            (direct & entries_bad, "out_type"),
            ((direct & (in_log2 != 0)) | (interp & (cmd.in_type != INTERP16_INPUT)), "in_type"),
            (interp & (cmd.table_log2 < LUT16_INDEX_BITS_MIN), "table_log2"),
            (interp & outside_out_type["qmin"], "qmin"),
            (interp & outside_out_type["qmax"], "qmax"),
            (interp & (cmd.qmin > cmd.qmax), "qmin"),
            ((cmd.dst_addr + dst_len > config.buffer(Buffer.OUT).bytes)
             | overlap & ((cmd.dst_addr > cmd.src_addr) | (out_log2 > in_log2)), "dst_addr"),
        ]

        exp_violations = softmax_violations(config, exp_cmd, Const(1) << out_log2, out_min, out_max, entries_bad)

        # --- the local table: one write port for the load, two read ports per lane -------------------------
        table_rows = -(-((1 << LUT16_INDEX_BITS_MAX) + 2) // row_entries)   # entry 2**k + 1 is read (times 0)
        assert table_rows * row_entries * ENTRY_BYTES >= SOFTMAX_TABLE_BYTES, \
            "the softmax exp table fits the local table"
        m.submodules.table = table = Memory(shape=unsigned(LUT_ENTRY_BITS * row_entries), depth=table_rows,
                                            init=[])
        table_write = table.write_port()

        # --- LOAD ----------------------------------------------------------------------------------------
        step = Signal(range(table_rows + 3))
        lut_word = Signal(range(config.buffer(Buffer.LUT).bytes // lut_word_bytes + 2))
        lut_last = Signal(8 * lut_word_bytes)
        lut_offset = table_addr & (lut_word_bytes - 1)
        loaded_row = Cat(lut_last, self.lut_read.data).bit_select(lut_offset * 8, 8 * lut_word_bytes)
        row_bad = Mux(is_softmax, exp_row_bad(loaded_row, step == 2), Cat(
            (entry < out_min) | (entry > out_max)
            for entry in (loaded_row.word_select(i, LUT_ENTRY_BITS).as_signed() for i in range(row_entries))).any())
        m.d.comb += [self.lut_read.addr.eq(lut_word), table_write.addr.eq(step - 2),
                     table_write.data.eq(loaded_row)]

        # --- the source window ---------------------------------------------------------------------------
        src_word = Signal(range(max(config.buffer(b).bytes // size for b, size in source_bytes.items()) + 2))
        src_last = Signal(8 * window_bytes)
        src_held = Mux(from_out, sources[Buffer.OUT].data, sources[Buffer.ACT].data)
        src_pos = Signal(range(window_bytes))
        window = Mux(from_out, Cat(src_last[:8 * source_bytes[Buffer.OUT]], sources[Buffer.OUT].data),
                     Cat(src_last[:8 * source_bytes[Buffer.ACT]], sources[Buffer.ACT].data))
        chunk = window.bit_select(src_pos * 8, 8 * window_bytes)
        read_source = Signal()
        for buffer, port in sources.items():
            m.d.comb += [port.addr.eq(src_word), port.en.eq(read_source & (cmd.src_buf == buffer))]

        # --- RUN stage 1: indices -------------------------------------------------------------------------
        left = Signal.like(cmd.count)
        group_full = Const(1) << group_log2
        group_count = Mux(left < group_full, left, group_full)
        last_group = left <= group_full
        run_first = Signal()
        shift = cmd.index_shift
        top = Const(1) << (cmd.table_log2 + shift)
        fractions, selects, data_a, data_b = [], [], [], []
        for lane in range(lanes):
            raw = chunk.word_select(lane, 8)[:DIRECT8_INDEX_BITS]
            sample = (chunk.word_select(lane, LUT16_INPUT_BITS).as_signed()
                      if (lane + 1) * LUT16_INPUT_BITS <= 8 * window_bytes else Const(0, signed(LUT16_INPUT_BITS)))
            position = sample - cmd.input_min
            clamped = clamp(position, 0, top)
            index = Mux(interp, clamped >> shift, raw)
            fraction = Signal(LUT16_INPUT_BITS, name=f"fraction{lane}")
            select = Signal(range(row_entries), name=f"select{lane}")
            next_select = Signal(range(row_entries), name=f"next_select{lane}")
            read_a, read_b = table.read_port(), table.read_port()
            m.d.comb += [read_a.addr.eq(index >> _log2(row_entries)),
                         read_b.addr.eq((index + 1) >> _log2(row_entries))]
            m.d.sync += [fraction.eq(Mux(interp, clamped & ((Const(1) << shift) - 1), 0)),
                         select.eq(index), next_select.eq(index + 1)]
            fractions.append(fraction)
            selects.append((select, next_select))
            data_a.append(read_a.data)
            data_b.append(read_b.data)

        # --- SOFTMAX: its rows stream once the faults are clear; results come one per cycle ------------------
        begin = Signal()
        softmax_results = softmax_datapath(m, config, exp_cmd, begin, table, row_entries, sources)

        # --- RUN stage 2: interpolation, clamp, packing (of the LUT's groups or the softmax results) ----------
        lut_stage2, lut_stage2_last = Signal(), Signal()
        lut_stage2_bytes = Signal(range(out_word_bytes + 1))
        stage2, stage2_last = Signal(), Signal()
        stage2_bytes = Signal(range(out_word_bytes + 1))
        m.d.comb += [stage2.eq(Mux(is_softmax, softmax_results.valid, lut_stage2)),
                     stage2_last.eq(Mux(is_softmax, softmax_results.last, lut_stage2_last)),
                     stage2_bytes.eq(Mux(is_softmax, Const(1) << out_log2, lut_stage2_bytes))]
        outputs = []
        for lane in range(lanes):
            (select, next_select), fraction = selects[lane], fractions[lane]
            base = data_a[lane].word_select(select, LUT_ENTRY_BITS).as_signed()
            following = data_b[lane].word_select(next_select, LUT_ENTRY_BITS).as_signed()
            value = base + rounding_shift_right((following - base) * fraction, shift, Rounding.HALF_UP)
            outputs.append(Mux(interp, clamp(value, cmd.qmin, cmd.qmax), value)[:LUT_ENTRY_BITS])
        outputs[0] = Mux(is_softmax, softmax_results.value[:LUT_ENTRY_BITS], outputs[0])
        group_bytes = Signal(8 * out_word_bytes)
        with m.Switch(out_log2):
            for size in set(DTYPE_BYTES.values()):
                with m.Case(_log2(size)):
                    m.d.comb += group_bytes.eq(Cat(value[:8 * size] for value in outputs[:out_word_bytes // size]))
        ones = Const((1 << out_word_bytes) - 1, out_word_bytes)
        group_mask = Mux(stage2, ~(ones << stage2_bytes), 0)[:out_word_bytes]
        group_data = group_bytes & Cat(bit.replicate(8) for bit in group_mask)

        pending = Signal(8 * out_word_bytes)
        pending_mask = Signal(out_word_bytes)
        fill = Signal(range(out_word_bytes))
        out_word = Signal(range(config.buffer(Buffer.OUT).bytes // out_word_bytes + 1))
        merged = pending | (group_data << (fill * 8))
        merged_mask = pending_mask | (group_mask << fill)
        filled = fill + stage2_bytes
        flush = Signal()
        m.d.comb += [self.out_write.addr.eq(out_word), self.out_write.data.eq(merged[:8 * out_word_bytes]),
                     self.out_write.mask.eq(merged_mask[:out_word_bytes])]

        with m.If(stage2):
            with m.If((filled >= out_word_bytes) | stage2_last):
                m.d.comb += self.out_write.en.eq(1)
                m.d.sync += [pending.eq(merged[8 * out_word_bytes:]), pending_mask.eq(merged_mask[out_word_bytes:]),
                             out_word.eq(out_word + 1)]
            with m.Else():
                m.d.sync += [pending.eq(merged), pending_mask.eq(merged_mask)]
            m.d.sync += fill.eq(Mux(filled >= out_word_bytes, filled - out_word_bytes, filled))
            with m.If(stage2_last):
                with m.If(filled > out_word_bytes):
                    m.d.sync += flush.eq(1)
                with m.Else():
                    m.d.comb += done.eq(1)
        with m.If(flush):   # the pending word's tail: merged is just pending here (stage 2 is idle)
            m.d.comb += [self.out_write.en.eq(1), done.eq(1)]
            m.d.sync += flush.eq(0)

        # --- control ---------------------------------------------------------------------------------------
        m.d.sync += lut_stage2.eq(0)
        with m.FSM(name="lut_engine"):
            with m.State("IDLE"):
                with m.If(start):
                    m.d.sync += [step.eq(0), lut_word.eq(table_addr >> _log2(lut_word_bytes)),
                                 src_word.eq(cmd.src_addr >> source_log2),
                                 src_pos.eq(cmd.src_addr & (source_word_bytes - 1)), entries_bad.eq(0),
                                 left.eq(cmd.count), run_first.eq(1), pending.eq(0), pending_mask.eq(0),
                                 fill.eq(dst_addr & (out_word_bytes - 1)),
                                 out_word.eq(dst_addr >> _log2(out_word_bytes))]
                    m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += self.lut_read.en.eq(1)
                m.d.sync += [step.eq(step + 1), lut_word.eq(lut_word + 1), lut_last.eq(self.lut_read.data)]
                with m.If(step < 2):   # the first two words of the table and of the source
                    m.d.comb += read_source.eq(1)
                    m.d.sync += src_word.eq(src_word + 1)
                    with m.If(step == 1):
                        m.d.sync += src_last.eq(src_held)
                with m.Else():
                    m.d.comb += table_write.en.eq(1)
                    m.d.sync += entries_bad.eq(entries_bad | row_bad)
                    with m.If((step == load_rows + 1) & is_softmax):
                        m.next = "SOFTMAX"
                    with m.Elif(step == load_rows + 1):
                        m.next = "RUN"
            with m.State("RUN"):
                m.d.sync += run_first.eq(0)
                with m.If(run_first & Cat(condition for condition, _ in violations).any()):
                    self._name_first(m, violations, fault, fault_field)
                    m.next = "IDLE"
                with m.Else():
                    advanced = src_pos + group_in_bytes
                    with m.If(advanced >= source_word_bytes):
                        m.d.comb += read_source.eq(1)
                        m.d.sync += [src_pos.eq(advanced - source_word_bytes), src_last.eq(src_held),
                                     src_word.eq(src_word + 1)]
                    with m.Else():
                        m.d.sync += src_pos.eq(advanced)
                    m.d.sync += [left.eq(left - group_count), lut_stage2.eq(1), lut_stage2_last.eq(last_group),
                                 lut_stage2_bytes.eq(group_count << out_log2)]
                    with m.If(last_group):
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                with m.If(done):
                    m.next = "IDLE"
            with m.State("SOFTMAX"):   # the faults in the first cycle, then the rows until the last result
                m.d.sync += run_first.eq(0)
                with m.If(run_first & Cat(condition for condition, _ in exp_violations).any()):
                    self._name_first(m, exp_violations, fault, fault_field)
                    m.next = "IDLE"
                with m.Elif(run_first):
                    m.d.comb += begin.eq(1)
                with m.If(done):
                    m.next = "IDLE"

    def _name_first(self, m: Module, violations: list, fault, fault_field) -> None:
        """Fault naming the field of the first violation that holds (the interpreter's order)."""
        m.d.comb += fault.eq(1)
        with m.Switch(Cat(condition for condition, _ in violations)):
            for position, (_, name) in enumerate(violations):
                with m.Case("-" * (len(violations) - 1 - position) + "1" + "0" * position):
                    m.d.comb += fault_field.eq(self.error_index(name))

