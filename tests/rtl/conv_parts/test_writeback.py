"""The write-back puts a pixel's first ``cols`` sums at its ACC entries, two words a cycle over ``acc_beats``
cycles, and leaves every other byte of the words alone; pixels may come every ``acc_beats`` cycles."""
from __future__ import annotations

import numpy as np

from aipu.rtl.conv_parts.writeback import AccWriteBack
from aipu.sim.machine.arch import Buffer
from aipu.sim.timing.conv import acc_beats
from tests.rtl.configs import EVERY_CONFIG
from tests.rtl.simulate import simulate


@EVERY_CONFIG
def test_pixels_land_at_their_entries_only(config):
    dut = AccWriteBack(config)
    cols, beats = config.mac.cols, acc_beats(config)
    port_bytes, acc_bytes = config.buffer(Buffer.ACC).port_bytes, config.buffer(Buffer.ACC).bytes
    rng = np.random.default_rng(cols + beats)
    acc = rng.integers(0, 256, size=acc_bytes, dtype=np.uint8)
    expected = acc.copy()
    pixels = []
    for _ in range(8):
        entry = int(rng.integers(0, acc_bytes // 4 - cols))
        sums = rng.integers(0, 256, size=4 * cols, dtype=np.uint8)
        count = int(rng.integers(1, cols + 1))
        pixels.append((entry, sums, count))
        expected[4 * entry:4 * (entry + count)] = sums[:4 * count]

    async def testbench(ctx):
        for cycle in range(len(pixels) * beats + beats + 1):
            pixel = cycle // beats
            arrives = cycle % beats == 0 and pixel < len(pixels)
            ctx.set(dut.place.valid, arrives)
            if arrives:
                entry, sums, count = pixels[pixel]
                ctx.set(dut.place.acc_word, 4 * entry // port_bytes)
                ctx.set(dut.place.acc_offset, 4 * entry % port_bytes)
                ctx.set(dut.place.cols, count)
                ctx.set(dut.sums, int.from_bytes(sums.tobytes(), "little"))
            for port in (dut.acc_write, dut.acc_write_b):
                if ctx.get(port.en):
                    data, mask = ctx.get(port.data).to_bytes(port_bytes, "little"), ctx.get(port.mask)
                    for i in range(port_bytes):
                        if mask >> i & 1:
                            acc[ctx.get(port.addr) * port_bytes + i] = data[i]
            await ctx.tick()

    simulate(dut, testbench)
    assert np.array_equal(acc, expected)
