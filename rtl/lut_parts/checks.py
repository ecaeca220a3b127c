"""LUT's command checks: the operands the parts share, and every fault of LUT and SOFTMAX in the
interpreter's order."""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Const, Module, Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.lut_parts.interfaces import log2, operands, source_bytes, table_entries, views
from aipu.rtl.lut_parts.softmax import softmax_violations
from aipu.rtl.parts import by_type, first_fault
from aipu.rtl.ports import word_bytes
from aipu.sim.machine.arch import (DTYPE_BYTES, DTYPE_NUMPY, LUT16_INDEX_BITS_MIN, LUT16_INPUT_BITS, Buffer,
                                   HardwareConfig, storage_dtype)
from aipu.sim.machine.isa import COMMAND_BITS, LutMode, Opcode
from aipu.sim.timing.lut import ENTRY_BYTES

DIRECT8_ZERO_FIELDS = ("table_log2", "index_shift", "input_min", "qmin", "qmax")   # the interpreter's order
INTERP16_INPUT = next(d for d, t in DTYPE_NUMPY.items() if t == storage_dtype(LUT16_INPUT_BITS, signed=True))
TYPE_RANGES = {dtype: np.iinfo(numpy_type) for dtype, numpy_type in DTYPE_NUMPY.items()}
SIZE_LOG2 = {dtype: log2(size) for dtype, size in DTYPE_BYTES.items()}


class CommandChecks(wiring.Component):
    """Decodes the ``operands`` of the LUT or SOFTMAX command in ``command`` and decides, combinationally,
    whether it is refused: ``fault`` for the first check that holds, in the interpreter's order for its
    opcode (docs/rtl-lut.md, "Faults"), ``field`` naming it (an index into ``error_names``). The table's
    entries are data: ``entries_bad`` (a DIRECT8 entry outside ``out_type``, a bad exp entry) is complete
    only after the load, which is when the unit reads ``fault``.

    Signature: ``command`` (In: the word), ``entries_bad`` (In), ``operands`` (Out), ``fault``, ``field`` (Out).
    """

    def __init__(self, config: HardwareConfig, error_names: tuple[str, ...]):
        self.config, self.error_names = config, error_names
        super().__init__({"command": In(COMMAND_BITS), "entries_bad": In(1), "operands": Out(operands(config)),
                          "fault": Out(1), "field": Out(range(len(error_names)))})

    def elaborate(self, platform) -> Module:
        m = Module()
        config, ops = self.config, self.operands
        cmd, exp_cmd = views(config, self.command)
        is_softmax = cmd.opcode == Opcode.SOFTMAX
        out_type = Mux(is_softmax, exp_cmd.out_type, cmd.out_type)
        sizes, out_word_bytes = source_bytes(config), word_bytes(config, Buffer.OUT)
        source_log2 = Mux(cmd.src_buf == Buffer.OUT, log2(sizes[Buffer.OUT]), log2(sizes[Buffer.ACT]))
        in_log2, out_log2 = ops.in_log2, ops.out_log2
        m.d.comb += [
            ops.is_softmax.eq(is_softmax), ops.interp.eq(cmd.mode == LutMode.INTERP16),
            in_log2.eq(by_type(cmd.in_type, SIZE_LOG2)), out_log2.eq(by_type(out_type, SIZE_LOG2)),
            ops.out_min.eq(by_type(out_type, {d: int(t.min) for d, t in TYPE_RANGES.items()})),
            ops.out_max.eq(by_type(out_type, {d: int(t.max) for d, t in TYPE_RANGES.items()})),
            ops.table_addr.eq(Mux(is_softmax, exp_cmd.table_addr, cmd.table_addr)),
            ops.dst_addr.eq(Mux(is_softmax, exp_cmd.dst_addr, cmd.dst_addr)),
            ops.from_out.eq(cmd.src_buf == Buffer.OUT), ops.source_log2.eq(source_log2),
            ops.group_log2.eq(Mux(source_log2 - in_log2 < log2(out_word_bytes) - out_log2,
                                  source_log2 - in_log2, log2(out_word_bytes) - out_log2)),
            ops.entries.eq(table_entries(cmd, is_softmax))]
        lut = first_fault(m, "lut", self._violations(cmd), self.error_names)
        softmax = first_fault(m, "softmax", softmax_violations(config, exp_cmd, Const(1) << out_log2, ops.out_min,
                                                               ops.out_max, self.entries_bad), self.error_names)
        m.d.comb += [self.fault.eq(Mux(is_softmax, softmax.fault, lut.fault)),
                     self.field.eq(Mux(is_softmax, softmax.field, lut.field))]
        return m

    def _violations(self, cmd) -> list:
        """(condition, field) of a LUT command in the interpreter's order (docs/rtl-lut.md, "Faults")."""
        config, ops = self.config, self.operands
        interp, direct = cmd.mode == LutMode.INTERP16, cmd.mode == LutMode.DIRECT8
        source_size = Mux(ops.from_out, config.buffer(Buffer.OUT).bytes, config.buffer(Buffer.ACT).bytes)
        src_len, dst_len = cmd.count << ops.in_log2, cmd.count << ops.out_log2
        overlap = ops.from_out & (cmd.src_addr < cmd.dst_addr + dst_len) & (cmd.dst_addr < cmd.src_addr + src_len)
        outside = {name: (getattr(cmd, name) < ops.out_min) | (getattr(cmd, name) > ops.out_max)
                   for name in ("qmin", "qmax")}
        return [
            (cmd.src_addr + src_len > source_size, "src_addr"),
            *[(direct & (getattr(cmd, name) != 0), name) for name in DIRECT8_ZERO_FIELDS],
            (cmd.table_addr + (ops.entries << log2(ENTRY_BYTES)) > config.buffer(Buffer.LUT).bytes, "table_addr"),
            (direct & self.entries_bad, "out_type"),
            ((direct & (ops.in_log2 != 0)) | (interp & (cmd.in_type != INTERP16_INPUT)), "in_type"),
            (interp & (cmd.table_log2 < LUT16_INDEX_BITS_MIN), "table_log2"),
            (interp & outside["qmin"], "qmin"),
            (interp & outside["qmax"], "qmax"),
            (interp & (cmd.qmin > cmd.qmax), "qmin"),
            ((cmd.dst_addr + dst_len > config.buffer(Buffer.OUT).bytes)
             | overlap & ((cmd.dst_addr > cmd.src_addr) | (ops.out_log2 > ops.in_log2)), "dst_addr"),
        ]
