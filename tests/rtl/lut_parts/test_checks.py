"""The checks name the interpreter's first refusal of a LUT or SOFTMAX command (docs/rtl-lut.md, "Faults"),
and decode the operands the other parts share."""
from __future__ import annotations

import pytest

from aipu.rtl.lut import LutUnit
from aipu.rtl.lut_parts.checks import CommandChecks
from aipu.sim.machine.arch import DEFAULT, DTYPE_BYTES, Buffer, DType
from aipu.sim.machine.isa import LutMode, Opcode
from aipu.sim.timing.lut import group_elements
from tests.rtl.parts import command_word
from tests.rtl.simulate import simulate

ACT, OUT, LUT = (DEFAULT.buffer(b).bytes for b in (Buffer.ACT, Buffer.OUT, Buffer.LUT))
DIRECT8 = dict(mode=LutMode.DIRECT8, table_log2=0, index_shift=0, input_min=0, qmin=0, qmax=0, in_type=DType.INT8,
               out_type=DType.INT8, count=16, src_addr=64, dst_addr=0)
INTERP16 = dict(DIRECT8, mode=LutMode.INTERP16, in_type=DType.INT16, out_type=DType.INT16, table_log2=4,
                index_shift=3, qmin=-100, qmax=100)
SOFTMAX = dict(rows=2, length=10, in_type=DType.INT8, out_type=DType.INT8, src_addr=64, dst_addr=0, qmin=-128,
               qmax=127)
CASES = [   # (opcode, fields, entries_bad, the field named or None)
    (Opcode.LUT, dict(DIRECT8, src_addr=ACT - 8), False, "src_addr"),
    (Opcode.LUT, dict(DIRECT8, index_shift=1, qmin=1), False, "index_shift"),
    (Opcode.LUT, dict(DIRECT8, table_addr=LUT - 511), True, "table_addr"),
    (Opcode.LUT, dict(DIRECT8), True, "out_type"),
    (Opcode.LUT, dict(DIRECT8, in_type=DType.INT16, dst_addr=OUT - 1), False, "in_type"),
    (Opcode.LUT, dict(INTERP16, table_log2=0), False, "table_log2"),
    (Opcode.LUT, dict(INTERP16, out_type=DType.INT8, qmin=-200, qmax=200), False, "qmin"),
    (Opcode.LUT, dict(INTERP16, out_type=DType.UINT8, qmin=0, qmax=256), False, "qmax"),
    (Opcode.LUT, dict(INTERP16, qmin=50, qmax=10), True, "qmin"),
    (Opcode.LUT, dict(INTERP16, dst_addr=OUT - 31), False, "dst_addr"),
    (Opcode.LUT, dict(DIRECT8, src_buf=Buffer.OUT, src_addr=8, dst_addr=9), False, "dst_addr"),
    (Opcode.LUT, dict(DIRECT8, src_buf=Buffer.OUT, src_addr=8, dst_addr=8, out_type=DType.INT16), False, "dst_addr"),
    (Opcode.LUT, dict(INTERP16, src_buf=Buffer.OUT, src_addr=8, dst_addr=8, out_type=DType.INT8, qmin=-1, qmax=1),
     False, None),
    (Opcode.LUT, dict(DIRECT8, table_addr=LUT - 512), False, None),
    (Opcode.SOFTMAX, dict(SOFTMAX, src_addr=ACT - 19), True, "src_addr"),
    (Opcode.SOFTMAX, dict(SOFTMAX, table_addr=LUT - 1023), False, "table_addr"),
    (Opcode.SOFTMAX, dict(SOFTMAX, src_buf=Buffer.OUT, src_addr=5, dst_addr=0), False, "dst_addr"),
    (Opcode.SOFTMAX, dict(SOFTMAX, out_zero_point=128, qmax=-129), False, "out_zero_point"),
    (Opcode.SOFTMAX, dict(SOFTMAX, qmin=5, qmax=4), False, "qmax"),
    (Opcode.SOFTMAX, dict(SOFTMAX), True, "table_addr"),
    (Opcode.SOFTMAX, dict(SOFTMAX, table_addr=LUT - 1024), False, None),
]


@pytest.mark.parametrize("opcode, fields, entries_bad, named", CASES)
def test_the_first_refusal_is_named(opcode, fields, entries_bad, named):
    names = LutUnit.unit_error_names()
    dut = CommandChecks(DEFAULT, names)

    async def testbench(ctx):
        ctx.set(dut.command, command_word(DEFAULT, opcode, **fields))
        ctx.set(dut.entries_bad, entries_bad)
        assert ctx.get(dut.fault) == (named is not None)
        if named is not None:
            assert names[ctx.get(dut.field)] == named

    simulate(dut, testbench)


@pytest.mark.parametrize("src_buf", [Buffer.ACT, Buffer.OUT])
@pytest.mark.parametrize("in_type, out_type", [(DType.INT8, DType.INT8), (DType.UINT8, DType.INT16),
                                               (DType.INT16, DType.UINT8), (DType.INT16, DType.INT16)])
def test_operands_of_a_lut_command(src_buf, in_type, out_type):
    dut = CommandChecks(DEFAULT, LutUnit.unit_error_names())
    ranges = {DType.INT8: (-128, 127), DType.UINT8: (0, 255), DType.INT16: (-32768, 32767)}

    async def testbench(ctx):
        ctx.set(dut.command, command_word(DEFAULT, Opcode.LUT, **dict(INTERP16, src_buf=src_buf, in_type=in_type,
                                                                       out_type=out_type, table_addr=6)))
        got = {name: ctx.get(getattr(dut.operands, name)) for name in
               ("is_softmax", "interp", "in_log2", "out_log2", "out_min", "out_max", "table_addr", "from_out",
                "entries")}
        assert got == dict(is_softmax=0, interp=1, in_log2=DTYPE_BYTES[in_type] // 2,
                           out_log2=DTYPE_BYTES[out_type] // 2, out_min=ranges[out_type][0],
                           out_max=ranges[out_type][1], table_addr=6, from_out=src_buf == Buffer.OUT, entries=17)
        assert 1 << ctx.get(dut.operands.group_log2) == group_elements(DEFAULT, src_buf, in_type, out_type)

    simulate(dut, testbench)
