"""The engine decodes the software engine's bins (codec/reference/engine.py) on encoded bins, random bytes and
long zero runs, up to a bin a lane a cycle, and stops at the bin where the software reads past the stream's
end."""
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
LANES = pytest.mark.parametrize("lanes", [1, 2, 4])


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


def _cycle_requests(requests: list[int], lanes: int) -> list[int]:
    """The requests of one cycle: up to ``lanes``, up to the first whose context an earlier one has (the
    contexts of a cycle's lanes are distinct, as a leaf's are)."""
    chosen: list[int] = []
    for request in requests[:lanes]:
        if request >= 0 and request in chosen:
            break
        chosen.append(request)
    return chosen


def _hardware(stream: bytes, requests: list[int], lanes: int) -> tuple[list[int], bool]:
    """The engine's bins for ``requests``, its bits served from ``stream`` and its contexts from a software
    model, and whether it got through them (False: it reported an overrun)."""
    dut = ArithmeticDecoder(lanes)
    view = lanes * NEED_BITS
    contexts = ContextModels()
    total = 8 * len(stream)
    padded = int.from_bytes(stream + bytes(view // 8 + 1), "big")
    padded_bits = total + 8 * (view // 8 + 1)
    bins: list[int] = []
    outcome = {"through": True}

    async def testbench(ctx):
        position = 0

        async def cycle(start: int, asked: list[int]) -> int:
            """One cycle: the window's bits at ``position``, ``asked`` on the lanes; returns the overrun."""
            nonlocal position
            ctx.set(dut.bits.ready, 1)
            ctx.set(dut.bits.avail, min(total - position, view))
            ctx.set(dut.bits.bits, (padded >> (padded_bits - position - view)) & ((1 << view) - 1))
            ctx.set(dut.bins.start, start)
            for lane, port in zip(dut.lanes, dut.context):
                request = asked[0] if asked else None
                asked = asked[1:]
                ctx.set(lane.decode, request is not None)
                ctx.set(lane.kind, KINDS.get(request, BinKind.CONTEXT))
                ctx.set(lane.context, max(request or 0, 0))
                index = ctx.get(port.index)
                ctx.set(port.mps, contexts.mps[index])
                ctx.set(port.lg, contexts.lg_pmps[index])
            overrun, consumed = ctx.get(dut.bins.overrun), ctx.get(dut.bits.consume)
            for port, trace in zip(dut.context, dut.trace):
                if ctx.get(port.update):
                    contexts.update(ctx.get(port.index), ctx.get(port.bin))
                if ctx.get(trace.valid):
                    bins.append(ctx.get(trace.bin))
            position += consumed
            await ctx.tick()
            return overrun

        if await cycle(1, []):
            outcome["through"] = False
            return
        while len(bins) < len(requests):
            if await cycle(0, _cycle_requests(requests[len(bins):], lanes)):
                outcome["through"] = False
                return

    simulate(dut, testbench)
    return bins, outcome["through"]


def _requests(rng, count: int) -> list[int]:
    return [int(rng.choice((*CONTEXTS, TRACE_BYPASS))) for _ in range(count)] + [TRACE_STUFFING]


@LANES
def test_bins_of_an_encoded_sequence(lanes):
    rng = np.random.default_rng(6)
    requests = _requests(rng, 300)
    sent = [int(rng.random() < (0.9 if request == 17 else 0.5)) for request in requests[:-1]] + [1]
    assert _hardware(encode_ops(list(zip(requests, sent))), requests, lanes) == (sent, True)


@LANES
@pytest.mark.parametrize("stream", [bytes(40), b"\xff" * 12, b"\x00\x01" * 20, b"\x80" + bytes(30), b"\x01"],
                         ids=["zeros", "ones", "zero-runs", "one-then-zeros", "short"])
def test_bins_of_extreme_streams_and_where_they_stop(stream, lanes):
    requests = _requests(np.random.default_rng(len(stream)), 60)
    assert _hardware(stream, requests, lanes) == _software(stream, requests)


@LANES
def test_bins_of_random_bytes(lanes):
    rng = np.random.default_rng(8)
    for _ in range(4):
        stream = rng.integers(0, 256, size=int(rng.integers(2, 30)), dtype=np.uint8).tobytes()
        requests = _requests(rng, 120)
        assert _hardware(stream, requests, lanes) == _software(stream, requests)
