"""The engine decodes the software engine's bins (codec/reference/engine.py) on encoded bins, random bytes and
long zero runs, and stops at the bin where the software reads past the stream's end."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.codec import CodecError
from aipu.codec.reference.engine import TRACE_BYPASS, TRACE_STUFFING, AecDecoder, ContextModels
from aipu.rtl.wdec_parts.engine import ArithmeticDecoder
from aipu.rtl.wdec_parts.interfaces import NEED_BITS, BinKind
from tests.codec.bin_streams import encode_ops
from tests.rtl.simulate import simulate

CONTEXTS = (0, 5, 17, 400)
KINDS = {TRACE_BYPASS: BinKind.BYPASS, TRACE_STUFFING: BinKind.STUFFING}


def _software(stream: bytes, requests: list[int]) -> tuple[list[int], bool]:
    """The reference decoder's bins for ``requests`` (ctxIdx, -1 bypass, -2 stuffing), and whether it got
    through them without reading past the end (its 9 first bits included)."""
    bins: list[int] = []
    try:
        decoder = AecDecoder(stream)
        for request in requests:
            bins.append(decoder.decode_bypass() if request == TRACE_BYPASS else
                        decoder.decode_stuffing_bit() if request == TRACE_STUFFING else
                        decoder.decode_decision(request))
    except CodecError:
        return bins, False
    return bins, True


def _hardware(stream: bytes, requests: list[int]) -> tuple[list[int], bool]:
    """The engine's bins for ``requests``, its bits served from ``stream`` and its contexts from a software
    model, and whether it got through them (False: it reported an overrun)."""
    dut = ArithmeticDecoder()
    contexts = ContextModels()
    total = 8 * len(stream)
    padded = int.from_bytes(stream + bytes(NEED_BITS // 8 + 1), "big")
    padded_bits = total + 8 * (NEED_BITS // 8 + 1)
    bins: list[int] = []
    outcome = {"through": True}

    async def testbench(ctx):
        position = 0

        async def cycle(**requests) -> int:
            """One cycle of a request: the window's bits at ``position``; returns the bits consumed."""
            nonlocal position
            ctx.set(dut.bits.ready, 1)
            ctx.set(dut.bits.avail, min(total - position, NEED_BITS))
            ctx.set(dut.bits.bits, (padded >> (padded_bits - position - NEED_BITS)) & ((1 << NEED_BITS) - 1))
            for name, value in requests.items():
                ctx.set(getattr(dut.bins, name), value)
            index = ctx.get(dut.context.index)
            ctx.set(dut.context.mps, contexts.mps[index])
            ctx.set(dut.context.lg, contexts.lg_pmps[index])
            overrun, consumed = ctx.get(dut.bins.overrun), ctx.get(dut.bits.consume)
            if ctx.get(dut.context.update):
                contexts.update(index, ctx.get(dut.context.bin))
            if ctx.get(dut.trace.valid):
                bins.append(ctx.get(dut.trace.bin))
            position += consumed
            await ctx.tick()
            return overrun

        if await cycle(start=1):
            outcome["through"] = False
            return
        for request in requests:
            kind = KINDS.get(request, BinKind.CONTEXT)
            decoded = len(bins) + 1
            while len(bins) < decoded:
                if await cycle(start=0, decode=1, kind=kind, context=max(request, 0)):
                    outcome["through"] = False
                    return

    simulate(dut, testbench)
    return bins, outcome["through"]


def _requests(rng, count: int) -> list[int]:
    return [int(rng.choice((*CONTEXTS, TRACE_BYPASS))) for _ in range(count)] + [TRACE_STUFFING]


def test_bins_of_an_encoded_sequence():
    rng = np.random.default_rng(6)
    requests = _requests(rng, 300)
    sent = [int(rng.random() < (0.9 if request == 17 else 0.5)) for request in requests[:-1]] + [1]
    assert _hardware(encode_ops(list(zip(requests, sent))), requests) == (sent, True)


@pytest.mark.parametrize("stream", [bytes(40), b"\xff" * 12, b"\x00\x01" * 20, b"\x80" + bytes(30), b"\x01"],
                         ids=["zeros", "ones", "zero-runs", "one-then-zeros", "short"])
def test_bins_of_extreme_streams_and_where_they_stop(stream):
    requests = _requests(np.random.default_rng(len(stream)), 60)
    assert _hardware(stream, requests) == _software(stream, requests)


def test_bins_of_random_bytes():
    rng = np.random.default_rng(8)
    for _ in range(4):
        stream = rng.integers(0, 256, size=int(rng.integers(2, 30)), dtype=np.uint8).tobytes()
        requests = _requests(rng, 120)
        assert _hardware(stream, requests) == _software(stream, requests)
