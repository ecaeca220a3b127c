"""The bit window shows the stream's next B·NEED_BITS bits (zero past its end) however many the engine takes
a cycle, never makes the engine wait once it is ready, and checks the zero padding at the stream's end."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.rtl.wdec_parts.interfaces import NEED_BITS
from aipu.rtl.wdec_parts.window import BitWindow
from tests.rtl.configs import CONFIGS, SMALL, wdec_cascade
from tests.rtl.simulate import simulate


def _next_bits(stream: bytes, position: int, view: int) -> int:
    """``view`` stream bits from ``position``, MSB first, zero past the end."""
    value = int.from_bytes(stream + bytes(view // 8 + 2), "big")
    total = 8 * (len(stream) + view // 8 + 2)
    return (value >> (total - position - view)) & ((1 << view) - 1)


def _read(config, stream: bytes, dram_addr: int, rng, keep: int) -> tuple[str, int]:
    """Consume the stream at random paces down to ``keep`` bits, checking every view on the way; then ask for
    its end. Returns (the end's answer, bits consumed)."""
    dut = BitWindow(config)
    view = config.wdec.bins_per_cycle * NEED_BITS
    nbytes = config.dram.bytes_per_cycle
    image = bytes(dram_addr) + stream + bytes(nbytes)
    first, last = dram_addr // nbytes, (dram_addr + len(stream) - 1) // nbytes
    words = [int.from_bytes(image[i * nbytes:(i + 1) * nbytes], "little") for i in range(first, last + 1)]
    outcome = {}

    async def testbench(ctx):
        ctx.set(dut.span.dram_addr, dram_addr)
        ctx.set(dut.span.length, len(stream))
        ctx.set(dut.span.begin, 1)
        await ctx.tick()
        ctx.set(dut.span.begin, 0)
        position, sent, waited, was_ready = 0, 0, 0, False
        for _ in range(8 * len(stream) + 4 * len(words) + 20):
            ctx.set(dut.words.valid, sent < len(words))
            ctx.set(dut.words.payload, words[sent] if sent < len(words) else 0)
            ctx.set(dut.drained, sent == len(words))
            left = 8 * len(stream) - position
            if ctx.get(dut.bits.ready):
                was_ready = True
                assert ctx.get(dut.bits.bits) == _next_bits(stream, position, view)
                assert ctx.get(dut.bits.avail) == min(left, view)
                take = min(int(rng.integers(0, view + 1)), left - keep)
                if take == 0 and left == keep:
                    ctx.set(dut.bits.consume, 0)
                    ctx.set(dut.end.check, 1)
                    outcome["end"] = ("ended" if ctx.get(dut.end.ended) else
                                      "malformed" if ctx.get(dut.end.malformed) else "neither")
                    break
                ctx.set(dut.bits.consume, take)
                position += take
            else:
                waited += was_ready
                ctx.set(dut.bits.consume, 0)
            if ctx.get(dut.words.valid) and ctx.get(dut.words.ready):
                sent += 1
            await ctx.tick()
        assert waited == 0, "the engine waited for bits after the window was first ready"
        outcome["position"] = position

    simulate(dut, testbench)
    return outcome["end"], outcome["position"]


@pytest.mark.parametrize("config", [wdec_cascade(config, bins) for bins in (1, 2, 4) for config in CONFIGS.values()],
                         ids=[f"{name}-b{bins}" for bins in (1, 2, 4) for name in CONFIGS])
def test_every_view_at_any_pace_and_the_end(config):
    rng = np.random.default_rng(2)
    stream = bytearray(rng.integers(0, 256, size=60, dtype=np.uint8).tobytes())
    stream[-1] &= 0xF8                     # the last three bits: padding
    end, position = _read(config, bytes(stream), dram_addr=5, rng=rng, keep=3)
    assert end == "ended" and position == 8 * len(stream) - 3


def test_padding_that_is_not_zero_or_not_the_end_is_malformed():
    rng = np.random.default_rng(3)
    stream = bytearray(rng.integers(0, 256, size=20, dtype=np.uint8).tobytes())
    stream[-1] = (stream[-1] & 0xF8) | 0x02
    assert _read(SMALL, bytes(stream), dram_addr=2, rng=rng, keep=3)[0] == "malformed"
    stream[-1] &= 0xF8
    assert _read(SMALL, bytes(stream), dram_addr=2, rng=rng, keep=11)[0] == "malformed"   # a byte left over
