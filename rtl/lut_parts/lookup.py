"""LUT's lane: one element's table lookup, DIRECT8 or INTERP16, over two pipeline stages."""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.arith import clamp, rounding_shift_right
from aipu.rtl.commands import command_layout
from aipu.rtl.lut_parts.interfaces import log2, table_row, table_rows
from aipu.sim.machine.arch import LUT16_INPUT_BITS, LUT_ENTRY_BITS, HardwareConfig
from aipu.sim.machine.isa import Opcode, Rounding
from aipu.sim.timing.lut import entries_per_row

FIELDS = ("index_shift", "table_log2", "input_min", "qmin", "qmax")


class LaneLookup(wiring.Component):
    """Stage 1: the element's table index i (DIRECT8: the ``raw`` byte; INTERP16: u = clamp(``sample`` -
    input_min, 0, 2^(table_log2 + index_shift)), i = u >> index_shift and the fraction u's low bits) and the
    table rows holding entries i and i + 1 (``row_a``, ``row_b``). Stage 2, a cycle later, from those rows
    (``data_a``, ``data_b``): ``value`` = T[i] + round_half_up((T[i+1] - T[i]) * fraction / 2^index_shift),
    clamped to [qmin, qmax] in INTERP16 (DIRECT8 has fraction and shift 0: T[i]).

    Signature: ``raw``, ``sample``, ``interp`` and the command's ``index_shift``, ``table_log2``,
    ``input_min``, ``qmin``, ``qmax`` (In), ``row_a``, ``row_b`` (Out), ``data_a``, ``data_b`` (In),
    ``value`` (Out: the low LUT_ENTRY_BITS bits).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        layout = command_layout(config, Opcode.LUT)
        rows = range(table_rows(config))
        super().__init__({"raw": In(8), "sample": In(signed(LUT16_INPUT_BITS)), "interp": In(1),
                          **{name: In(layout[name].shape) for name in FIELDS},
                          "row_a": Out(rows), "row_b": Out(rows), "data_a": In(table_row(config)),
                          "data_b": In(table_row(config)), "value": Out(LUT_ENTRY_BITS)})

    def elaborate(self, platform) -> Module:
        m = Module()
        row_entries, shift, interp = entries_per_row(self.config), self.index_shift, self.interp
        top = Const(1) << (self.table_log2 + shift)
        clamped = clamp(self.sample - self.input_min, 0, top)
        index = Mux(interp, clamped >> shift, self.raw)
        fraction = Signal(LUT16_INPUT_BITS)
        select, next_select = Signal(range(row_entries)), Signal(range(row_entries))
        m.d.comb += [self.row_a.eq(index >> log2(row_entries)), self.row_b.eq((index + 1) >> log2(row_entries))]
        m.d.sync += [fraction.eq(Mux(interp, clamped & ((Const(1) << shift) - 1), 0)),
                     select.eq(index), next_select.eq(index + 1)]

        base = self.data_a.word_select(select, LUT_ENTRY_BITS).as_signed()
        following = self.data_b.word_select(next_select, LUT_ENTRY_BITS).as_signed()
        value = base + rounding_shift_right((following - base) * fraction, shift, Rounding.HALF_UP)
        m.d.comb += self.value.eq(Mux(interp, clamp(value, self.qmin, self.qmax), value))
        return m
