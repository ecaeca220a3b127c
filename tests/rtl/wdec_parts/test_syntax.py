"""The syntax walk, with the software decoder's bins as the engine's answers, asks for exactly the software's
bins (kind and context), a leaf's up to a bin a lane a cycle, writes every level at its [O][KH][KW][I] byte and
stops on each fault by name."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.codec import CodecError
from aipu.codec.npu_profile import decode_profile_stream, encoder_options
from aipu.codec.reference.engine import TRACE_BYPASS, TRACE_STUFFING
from aipu.rtl.wdec_parts.interfaces import BinKind
from aipu.rtl.wdec_parts.syntax import SyntaxWalk
from aipu.sim.cosim.stimulus.wdec import layer_stream, random_weights
from aipu.sim.machine.arch import DEFAULT, Buffer
from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.program import Command
from tests.rtl.configs import SMALL, wdec_cascade
from tests.rtl.simulate import simulate

ERROR_NAMES = ("parts", "wgt_addr", "dram_addr", "k_h", "k_w", "in_c", "out_c", "stream", "profile", "levels")
TRACE_KINDS = {BinKind.BYPASS: TRACE_BYPASS, BinKind.STUFFING: TRACE_STUFFING}


def _walk(config, stream: bytes, shape, *, overrun_at: int | None = None, **fields) -> tuple[bytearray, str | None]:
    """(WEIGHT after the command, the fault's name or None) of one command whose engine answers every lane it
    asks for with the software's bins of ``stream`` (an overrun instead of bin ``overrun_at``); ``fields``
    override the command's."""
    trace: list[tuple[int, int]] = []
    try:
        decode_profile_stream(stream, shape, trace)
    except CodecError:
        pass
    out_c, in_c, k_h, k_w = shape
    command = Command.make(Opcode.WDEC, **{"dram_addr": 0, "length": len(stream), "wgt_addr": 0, "out_c": out_c,
                                           "in_c": in_c, "k_h": k_h, "k_w": k_w, **fields})
    dut = SyntaxWalk(config, ERROR_NAMES)
    weight = bytearray(config.buffer(Buffer.WEIGHT).bytes)
    outcome = {"fault": None}

    async def testbench(ctx):
        ctx.set(dut.command.as_value(), int.from_bytes(command.encode(config), "little"))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        asked = 0
        for _ in range(4 * len(trace) + 100):
            ctx.set(dut.bins.started, ctx.get(dut.bins.start))
            ctx.set(dut.end.ended, ctx.get(dut.end.check))
            overrun, going = False, True
            for lane in dut.lanes:         # lane j's request may depend on lane j-1's bin
                answer = going and ctx.get(lane.decode)
                if answer:
                    kind, context = ctx.get(lane.kind), ctx.get(lane.context)
                    assert (TRACE_KINDS.get(kind, context), asked) == (trace[asked][0], asked)
                overrun |= answer and asked == overrun_at
                going = answer and asked != overrun_at
                ctx.set(lane.decoded, going)
                ctx.set(lane.bin, trace[asked][1] if going else 0)
                asked += going
            ctx.set(dut.bins.overrun, overrun)
            leaf = dut.leaf
            if ctx.get(leaf.valid):         # the level at its [O][KH][KW][I] byte (the stager writes it there)
                kernel, tap, channel, taps = (ctx.get(getattr(leaf, name)) for name in ("kernel", "tap", "channel", "taps"))
                weight[command.wgt_addr + (kernel * taps + tap) * command.in_c + channel] = ctx.get(leaf.level)
            if ctx.get(dut.fault):
                outcome["fault"] = ERROR_NAMES[ctx.get(dut.fault_field)]
                break
            if ctx.get(dut.done):
                assert asked == len(trace)
                break
            await ctx.tick()
        else:
            pytest.fail("the walk neither finished nor stopped")

    simulate(dut, testbench)
    return weight, outcome["fault"]


def _transposed(weights: np.ndarray) -> bytes:
    return weights.transpose(0, 2, 3, 1).astype(np.int8).tobytes()


@pytest.mark.parametrize("bins", [1, 4])
@pytest.mark.parametrize("config,shape,ctu", [(SMALL, (2, 20, 1, 2), 16), (DEFAULT, (10, 2, 3, 3), 8),
                                              (SMALL, (4, 3, 1, 1), 64)], ids=["small", "default", "one-ctu"])
def test_every_level_lands_at_its_byte(config, shape, ctu, bins):
    config = wdec_cascade(config, bins)
    weights = random_weights(np.random.default_rng(sum(shape)), shape)
    weight, fault = _walk(config, layer_stream(weights, ctu), shape, wgt_addr=7)
    assert fault is None
    size = weights.size
    assert weight[7:7 + size] == _transposed(weights) and not any(weight[:7]) and not any(weight[7 + size:])


@pytest.mark.parametrize("bins", [1, 2])
def test_faults_by_name(bins):
    config = wdec_cascade(SMALL, bins)
    rng = np.random.default_rng(9)
    shape = (4, 3, 2, 2)
    weights = random_weights(rng, shape)
    stream = layer_stream(weights)
    assert _walk(config, stream, shape, k_w=1)[1] == "k_w"
    assert _walk(config, stream, shape, overrun_at=40)[1] == "stream"
    wide = weights.astype(np.int16)
    wide[1, 2, 1, 0] = 200
    assert _walk(config, layer_stream(wide), shape)[1] == "levels"
    full_syntax = layer_stream(weights, options=encoder_options().__class__())
    assert _walk(config, full_syntax, shape)[1] == "profile"
