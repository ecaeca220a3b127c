"""The checks name the interpreter's first refusal: the regions, then the records, leaky in FLOAT32, dual in
FLOAT32 or with leaky, odd channels for INT4, each mode's clamp and zero point checks in golden's order,
out_addr; what golden never reads is not refused."""
from __future__ import annotations

import pytest

from aipu.rtl.requant import RequantUnit
from aipu.rtl.requant_parts.checks import RequantChecks
from aipu.sim.machine.arch import DEFAULT, Buffer, DType
from aipu.sim.machine.isa import Opcode, RequantMode
from tests.rtl.parts import command_word
from tests.rtl.simulate import simulate

ACC, OUT = DEFAULT.buffer_units(Buffer.ACC), DEFAULT.buffer_units(Buffer.OUT)
FLOAT = dict(mode=RequantMode.FLOAT32)
INT8_RANGE = dict(qmin=-128, qmax=127)
INT4 = dict(out_type=DType.INT4, qmin=-8, qmax=7)
CASES = [   # (command fields, record flags raised, the region check's name, the verdict's name)
    (dict(acc_addr=ACC - 4, pixels=5), (), "acc_addr", None),
    (dict(param_index=DEFAULT.buffer_units(Buffer.PARAM) - 2, channels=3), (), "param_index", None),
    (dict(out_addr=OUT - 1, out_type=DType.INT16), ("reserved",), None, "param_reserved"),
    (dict(leaky=1, **FLOAT), ("shift",), None, "leaky"),
    (dict(qmin=-200, out_zero_point=300), ("scale",), None, "qmin"),            # NATIVE: the clamp first
    (dict(qmin=-200, out_zero_point=300, **FLOAT), ("shift",), None, "out_zero_point"),   # FLOAT32: zp first
    (dict(qmax=-1, qmin=0), (), None, "qmin"),
    (dict(qmax=128), ("negative_shift",), None, "qmax"),                          # no leaky: N- unread
    (dict(leaky=1), ("negative_shift",), None, "param_negative_shift"),
    (dict(), ("shift",), None, "param_shift"),
    (dict(**FLOAT), ("scale",), None, "param_scale"),
    (dict(out_addr=OUT - 3, pixels=2, out_type=DType.INT16), (), None, "out_addr"),
    (dict(acc_addr=ACC - 6, pixels=2, channels=3, out_type=DType.UINT8, qmin=0, qmax=255), (), None, None),
    (dict(acc_addr=ACC - 9, pixels=1, channels=5, dual=1), (), "acc_addr", None),       # two entries an output
    (dict(acc_addr=ACC - 10, pixels=1, channels=5, dual=1), (), None, None),
    (dict(dual=1, leaky=1, **FLOAT), (), None, "leaky"),
    (dict(dual=1, **FLOAT), ("shift",), None, "dual"),
    (dict(dual=1, leaky=1, channels=3, **INT4), ("shift",), None, "dual"),
    (dict(channels=3, **{**INT4, "qmin": -9}), ("shift",), None, "channels"),
    (dict(channels=4, **{**INT4, "qmin": -9}), (), None, "qmin"),
    (dict(channels=4, out_zero_point=8, **INT4), (), None, "out_zero_point"),
    (dict(channels=4, out_zero_point=-9, **INT4, **FLOAT), (), None, "out_zero_point"),
    (dict(dual=1), ("negative_shift_set",), None, "param_negative_shift"),
    (dict(dual=1), ("shift", "negative_shift_set"), None, "param_shift"),
    (dict(), ("negative_shift_set",), None, None),                                   # read only with dual
    (dict(leaky=1), ("negative_shift_set",), None, None),
    (dict(out_addr=OUT - 2, pixels=1, channels=4, **INT4), (), None, None),          # two a byte
    (dict(out_addr=OUT - 2, pixels=1, channels=6, **INT4), (), None, "out_addr"),
]


@pytest.mark.parametrize("fields, flags, region, verdict", CASES)
def test_the_first_refusal_is_named(fields, flags, region, verdict):
    names = RequantUnit.unit_error_names()
    dut = RequantChecks(DEFAULT, names)

    async def testbench(ctx):
        ctx.set(dut.command.as_value(), command_word(DEFAULT, Opcode.REQUANT, **{**INT8_RANGE, **fields}))
        for flag in flags:
            ctx.set(getattr(dut.flags, flag), 1)
        for fault, field, name in ((dut.region_fault, dut.region_field, region),
                                   (dut.verdict_fault, dut.verdict_field, verdict)):
            assert ctx.get(fault) == (name is not None)
            if name is not None:
                assert names[ctx.get(field)] == name

    simulate(dut, testbench)
