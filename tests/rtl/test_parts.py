"""FirstFault names the earliest check that holds, whatever the later ones say."""
from __future__ import annotations

import itertools

from aipu.rtl.parts import FirstFault
from tests.rtl.simulate import simulate

ERROR_NAMES = ("opcode", "reserved", "src_addr", "dst_addr", "qmin", "qmax")
CHECKS = ["dst_addr", "qmin", "src_addr", "qmin", "qmax"]      # a name may come back later in the order


def test_the_earliest_check_that_holds_is_named():
    dut = FirstFault(CHECKS, ERROR_NAMES)

    async def testbench(ctx):
        for bits in itertools.product((0, 1), repeat=len(CHECKS)):
            ctx.set(dut.conditions, sum(bit << i for i, bit in enumerate(bits)))
            assert ctx.get(dut.fault) == any(bits)
            if any(bits):
                assert ERROR_NAMES[ctx.get(dut.field)] == CHECKS[bits.index(1)]

    simulate(dut, testbench)
