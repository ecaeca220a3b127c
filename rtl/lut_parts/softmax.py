"""LUT's softmax datapath: SOFTMAX commands (docs/rtl-lut.md, "Softmax"; docs/arithmetic.md §6.4).

The LUT unit loads the exp table into its local table (two 16-bit entries per exp entry) and decides the
faults (:func:`exp_row_bad` and :func:`softmax_violations` are the table part's and the checks part's);
:class:`SoftmaxStream` then streams the rows, one element per cycle, three passes over each row:

  MAX     m = max(row)                                   a running maximum
  SUM     S = Σ E[m − x]                                 one table read per element, a 32-bit accumulator
  DIVIDE  q = (E[m − x] · M + ⌊D/2⌋) div D, D = S · 2^N  a restoring divider, one quotient bit per stage

The divider is a pipeline of ``SOFTMAX_QUOTIENT_BITS`` stages carrying each element's divisor, so a row's
divisions overlap the next row's passes; the results leave it in element order, one per cycle, for the LUT
unit's output packer. The quotient's width and the pipeline's latency are named in ``aipu.sim.timing.lut``.
"""
from __future__ import annotations

from enum import IntEnum

from amaranth.hdl import Cat, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.arith import clamp
from aipu.rtl.commands import command_layout
from aipu.rtl.lut_parts.interfaces import table_row, table_rows
from aipu.rtl.ports import read_port, word_bytes
from aipu.sim.machine.arch import (LUT8_ENTRIES, LUT_ENTRY_BITS, SOFTMAX_ENTRY_BYTES, SOFTMAX_EXP_BITS,
                                   SOFTMAX_SHIFT_MAX, SOFTMAX_SUM_BITS, Buffer, DType, HardwareConfig)
from aipu.sim.machine.isa import VECTOR_SOURCE_BUFFERS, Opcode
from aipu.sim.timing.lut import SOFTMAX_QUOTIENT_BITS, SOFTMAX_TABLE_BYTES, entries_per_row

EXP_BITS = 8 * SOFTMAX_ENTRY_BYTES
DIVISOR_BITS = SOFTMAX_SUM_BITS + SOFTMAX_SHIFT_MAX        # D = S · 2^N < 2^62; the numerator stays below too
DISTANCE_BITS = (LUT8_ENTRIES - 1).bit_length()     # m − x of 8-bit elements indexes the 256-entry table
INPUT_BITS = DISTANCE_BITS + 1                       # an int8 or uint8 element, signed


class Pass(IntEnum):
    MAX = 0
    SUM = 1
    DIVIDE = 2


def exp_row_bad(row: Value, first_row: Value) -> Value:
    """Whether a loaded table row holds an exp entry above 2^SOFTMAX_EXP_BITS, or (first row) a zero E[0]."""
    entries = [row.word_select(i, EXP_BITS) for i in range(len(row) // EXP_BITS)]
    return Cat(first_row & (entries[0] == 0), *(entry > (1 << SOFTMAX_EXP_BITS) for entry in entries)).any()


def softmax_violations(config: HardwareConfig, cmd, out_bytes, out_min, out_max, table_bad) -> list:
    """(condition, field) in the interpreter's order: the operands' spans, the overlap, the output stage's
    fields, then the table's entries (data, checked as the command runs)."""
    elements = cmd.rows * cmd.length
    source_size = Mux(cmd.src_buf == Buffer.OUT, config.buffer(Buffer.OUT).bytes, config.buffer(Buffer.ACT).bytes)
    dst_end = cmd.dst_addr + elements * out_bytes
    overlap = (cmd.src_buf == Buffer.OUT) & (cmd.src_addr < dst_end) & (cmd.dst_addr < cmd.src_addr + elements)
    return [(cmd.src_addr + elements > source_size, "src_addr"),
            (cmd.table_addr + SOFTMAX_TABLE_BYTES > config.buffer(Buffer.LUT).bytes, "table_addr"),
            ((dst_end > config.buffer(Buffer.OUT).bytes) | overlap, "dst_addr"),
            ((cmd.out_zero_point < out_min) | (cmd.out_zero_point > out_max), "out_zero_point"),
            ((cmd.qmin < out_min) | (cmd.qmin > out_max), "qmin"),
            ((cmd.qmax < cmd.qmin) | (cmd.qmax > out_max), "qmax"),
            (table_bad, "table_addr")]


class SoftmaxStream(wiring.Component):
    """Streams the SOFTMAX command in ``command`` from the cycle after ``begin``: the source, one element a
    cycle, through its own ``<buffer>_read`` ports (``reading`` while it drives them), the exp table through
    ``lookup_addr`` / ``lookup_data`` (a read port of the local table, which holds the table from row 0), and
    one ``result`` per cycle after the divider: clamp(q + out_zero_point, qmin, qmax), ``last`` on the
    command's last.

    Signature: ``command`` (In: the SOFTMAX word), ``begin`` (In), ``act_read``, ``out_read`` (the source
    ports), ``reading`` (Out), ``lookup_addr`` (Out), ``lookup_data`` (In), ``valid``, ``last``, ``result`` (Out).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({
            "command": In(command_layout(config, Opcode.SOFTMAX)), "begin": In(1),
            **{f"{buffer.name.lower()}_read": Out(read_port(config, buffer)) for buffer in VECTOR_SOURCE_BUFFERS},
            "reading": Out(1), "lookup_addr": Out(range(table_rows(config))), "lookup_data": In(table_row(config)),
            "valid": Out(1), "last": Out(1), "result": Out(LUT_ENTRY_BITS)})

    def elaborate(self, platform) -> Module:
        m = Module()
        config, cmd, begin = self.config, self.command, self.begin
        sources = {buffer: getattr(self, f"{buffer.name.lower()}_read") for buffer in VECTOR_SOURCE_BUFFERS}
        source_log2 = {buffer: word_bytes(config, buffer).bit_length() - 1 for buffer in sources}
        largest = max(config.buffer(buffer).bytes for buffer in sources)
        addr, row_addr = Signal(range(largest + 1)), Signal(range(largest + 1))
        left, rows_left = Signal.like(cmd.length), Signal.like(cmd.rows)
        phase, streaming = Signal(Pass), Signal()
        last_in_row, first_in_row = left == 1, left == cmd.length

        # --- the source, one byte per cycle: the word holding the next element is read every cycle -------
        next_addr = Mux(last_in_row & (phase != Pass.DIVIDE), row_addr, addr + 1)
        read_addr = Mux(begin, cmd.src_addr, next_addr)
        ending = streaming & last_in_row & (rows_left == 1) & (phase == Pass.DIVIDE)    # no element follows
        m.d.comb += self.reading.eq(begin | (streaming & ~ending))
        with m.If(self.reading):
            for buffer, port in sources.items():
                m.d.comb += [port.addr.eq(read_addr >> source_log2[buffer]), port.en.eq(cmd.src_buf == buffer)]
        element = Signal(DISTANCE_BITS)
        with m.Switch(cmd.src_buf):
            for buffer, port in sources.items():
                with m.Case(buffer):
                    m.d.comb += element.eq(port.data.word_select(addr[:source_log2[buffer]], DISTANCE_BITS))
        x = Signal(signed(INPUT_BITS))
        m.d.comb += x.eq(Mux(cmd.in_type == DType.INT8, element.as_signed(), element))

        # --- MAX, and the table read of SUM and DIVIDE ------------------------------------------------------
        maximum = Signal(signed(INPUT_BITS))
        with m.If(streaming & (phase == Pass.MAX) & (first_in_row | (x > maximum))):
            m.d.sync += maximum.eq(x)
        distance = (maximum - x)[:DISTANCE_BITS]           # 0 .. 255 in SUM and DIVIDE
        exps_per_row = entries_per_row(config) * 2 // SOFTMAX_ENTRY_BYTES
        m.d.comb += self.lookup_addr.eq(distance >> (exps_per_row.bit_length() - 1))
        exp = self.lookup_data[:EXP_BITS]
        if exps_per_row > 1:                    # which of the row's entries the lookup returns
            which = Signal(range(exps_per_row))
            m.d.sync += which.eq(distance)
            exp = self.lookup_data.word_select(which, EXP_BITS)

        summing, sum_first, dividing, divide_last = Signal(), Signal(), Signal(), Signal()
        m.d.sync += [summing.eq(streaming & (phase == Pass.SUM)), sum_first.eq(first_in_row),
                     dividing.eq(streaming & (phase == Pass.DIVIDE)), divide_last.eq(last_in_row & (rows_left == 1))]
        total = Signal(SOFTMAX_SUM_BITS)
        with m.If(summing):
            m.d.sync += total.eq(Mux(sum_first, exp, total + exp))

        # --- pass and row control -----------------------------------------------------------------------------
        with m.If(begin):
            m.d.sync += [streaming.eq(1), addr.eq(cmd.src_addr), row_addr.eq(cmd.src_addr), left.eq(cmd.length),
                         rows_left.eq(cmd.rows), phase.eq(Pass.MAX)]
        with m.If(streaming):
            m.d.sync += [addr.eq(next_addr), left.eq(Mux(last_in_row, cmd.length, left - 1))]
            with m.If(last_in_row):
                with m.Switch(phase):
                    with m.Case(Pass.MAX):
                        m.d.sync += phase.eq(Pass.SUM)
                    with m.Case(Pass.SUM):
                        m.d.sync += phase.eq(Pass.DIVIDE)
                    with m.Case(Pass.DIVIDE):
                        m.d.sync += [phase.eq(Pass.MAX), row_addr.eq(addr + 1), rows_left.eq(rows_left - 1)]
                        with m.If(rows_left == 1):
                            m.d.sync += streaming.eq(0)
        self._divide(m, exp, total, dividing, divide_last)
        return m

    def _divide(self, m: Module, exp, total, dividing, divide_last) -> None:
        """DIVIDE: the numerator, then one restoring step per stage, most significant quotient bit first."""
        cmd = self.command

        def stage_signals(k: int) -> dict:
            return dict(remainder=Signal(DIVISOR_BITS, name=f"remainder{k}"),
                        divisor=Signal(DIVISOR_BITS, name=f"divisor{k}"),
                        quotient=Signal(SOFTMAX_QUOTIENT_BITS, name=f"quotient{k}"),
                        valid=Signal(name=f"valid{k}"), last=Signal(name=f"last{k}"))

        stages = [stage_signals(k) for k in range(SOFTMAX_QUOTIENT_BITS + 1)]
        divisor = Signal(unsigned(DIVISOR_BITS))
        m.d.comb += divisor.eq(total << cmd.shift)
        first = stages[0]
        m.d.sync += [first["remainder"].eq(exp * cmd.multiplier + (divisor >> 1)), first["divisor"].eq(divisor),
                     first["quotient"].eq(0), first["valid"].eq(dividing), first["last"].eq(dividing & divide_last)]
        for k, (here, after) in enumerate(zip(stages, stages[1:])):
            bit = SOFTMAX_QUOTIENT_BITS - 1 - k
            fits = (here["remainder"] >> bit) >= here["divisor"]
            m.d.sync += [after["remainder"].eq(Mux(fits, here["remainder"] - (here["divisor"] << bit),
                                                   here["remainder"])),
                         after["quotient"].eq((here["quotient"] << 1) | fits), after["divisor"].eq(here["divisor"]),
                         after["valid"].eq(here["valid"]), after["last"].eq(here["last"])]
        done = stages[-1]
        m.d.comb += [self.valid.eq(done["valid"]), self.last.eq(done["last"]),
                     self.result.eq(clamp(done["quotient"] + cmd.out_zero_point, cmd.qmin, cmd.qmax))]
