"""The word window cuts a run of bytes at any offset out of the words read two a cycle over ``beats`` cycles."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.conv_parts.window import WordWindow
from tests.rtl.simulate import simulate


@pytest.mark.parametrize("port_bytes, beats, length", [(4, 1, 4), (4, 2, 16), (2, 3, 9), (16, 1, 16), (1, 2, 3)])
def test_a_run_at_every_offset(port_bytes, beats, length):
    dut = WordWindow(port_bytes, beats, length)
    rng = np.random.default_rng(port_bytes * 10 + beats)

    async def testbench(ctx):
        for offset in range(port_bytes):
            window = rng.integers(0, 256, size=2 * beats * port_bytes, dtype=np.uint8)
            words = [int.from_bytes(window[i * port_bytes:(i + 1) * port_bytes].tobytes(), "little")
                     for i in range(2 * beats)]
            ctx.set(dut.offset, offset)
            for beat in range(beats):
                ctx.set(dut.valid, 1)
                ctx.set(dut.beat, beat)
                ctx.set(dut.a, words[2 * beat])
                ctx.set(dut.b, words[2 * beat + 1])
                if beat < beats - 1:
                    await ctx.tick()
            expected = np.zeros(length, np.uint8)
            available = window[offset:offset + length]
            expected[:len(available)] = available
            assert ctx.get(dut.run) == int.from_bytes(expected.tobytes(), "little"), f"offset {offset}"

    simulate(dut, testbench)
