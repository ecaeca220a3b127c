"""The DRAM timing core on its own, driven edge by edge: error responses (every R beat, B, memory left as it
was), addresses beyond the DRAM, byte strobes, and the protocol errors (4 KiB boundary, FIXED and WRAP, narrow
beats, a misplaced wlast) raised with a message naming the burst."""
from __future__ import annotations

import pytest

from aipu.sim.cosim.dram.model import AxiProtocolError, DramModel, DramParams, ErrorRange, Resp

PARAMS = DramParams(size=1 << 13, data_bytes=16, read_latency=3, write_latency=2,
                    errors=(ErrorRange(0x400, 0x410, Resp.SLVERR), ErrorRange(0x800, 0xC00, Resp.DECERR)))
IDLE = {"rready": 1, "bready": 1}


def step(model: DramModel, **inputs) -> dict:
    values = {**IDLE, **inputs}
    model.step(lambda name: values.get(name, model.defaults.get(name, 0)))
    return dict(model.outputs)


def read(model: DramModel, address: int, length: int) -> list[tuple[int, int, int, int]]:
    """(edge, rdata, rresp, rlast) of each beat of one burst issued at the next edge."""
    beats, edge = [], model.edge + 1
    out = step(model, arvalid=1, araddr=address, arlen=length)
    while len(beats) <= length:
        if out["rvalid"]:
            beats.append((model.edge + 1 - edge, out["rdata"], out["rresp"], out["rlast"]))
        out = step(model)
    return beats


def write(model: DramModel, address: int, words: list[int], strobe: int | None = None) -> tuple[int, int]:
    """AW then its W beats back to back; (edges from AW to B, bresp)."""
    first = model.edge + 1
    step(model, awvalid=1, awaddr=address, awlen=len(words) - 1)
    for index, word in enumerate(words):
        wstrb = model.defaults["wstrb"] if strobe is None else strobe
        step(model, wvalid=1, wdata=word, wstrb=wstrb, wlast=int(index == len(words) - 1))
    out = dict(model.outputs)
    while not out["bvalid"]:
        out = step(model)
    return model.edge + 1 - first, out["bresp"]


def test_reads_come_after_the_latency_and_carry_the_memory():
    model = DramModel(PARAMS)
    model.write(0x100, bytes(range(48)))
    beats = read(model, 0x105, 2)          # unaligned: the beats of the words it falls in
    assert [edge for edge, *_ in beats] == [3, 4, 5]
    assert beats[0][1] == int.from_bytes(bytes(range(16)), "little") and beats[2][3] == 1


def test_an_error_range_answers_every_beat_and_leaves_memory_alone():
    model = DramModel(PARAMS)
    model.write(0x3F0, b"\x55" * 48)
    assert [(resp, data) for _, data, resp, _ in read(model, 0x3F0, 2)] == [(Resp.SLVERR, 0)] * 3
    assert [resp for _, _, resp, _ in read(model, 0x3E0, 0)] == [Resp.OKAY]
    edges, resp = write(model, 0x400, [0xAA])
    assert (edges, resp) == (1 + 2, Resp.SLVERR) and model.read(0x400, 16) == b"\x55" * 16
    assert write(model, 0xBF0, [1, 2])[1] == Resp.DECERR
    assert [resp for _, _, resp, _ in read(model, 0x800, 0)] == [Resp.DECERR]


def test_beyond_the_dram_answers_decerr():
    size = 0x1800
    model = DramModel(DramParams(size=size))
    assert [resp for _, _, resp, _ in read(model, size - 16, 1)] == [Resp.DECERR] * 2
    assert write(model, size, [7])[1] == Resp.DECERR
    assert [resp for _, _, resp, _ in read(model, size - 16, 0)] == [Resp.OKAY]


def test_strobes_write_only_their_bytes():
    model = DramModel(PARAMS)
    model.write(0x200, b"\x11" * 16)
    assert write(model, 0x200, [int.from_bytes(b"\x22" * 16, "little")], strobe=0b1000_0000_0000_0101)[1] == 0
    assert model.read(0x200, 16) == b"\x22\x11\x22" + b"\x11" * 12 + b"\x22"


@pytest.mark.parametrize("channel", ["ar", "aw"])
def test_a_burst_across_4_kib_is_a_protocol_error(channel):
    model = DramModel(PARAMS)
    step(model, **{f"{channel}valid": 1, f"{channel}addr": 0xF00, f"{channel}len": 15})   # ends at the boundary
    with pytest.raises(AxiProtocolError, match=r"burst at 0xf10 \(len 15\): crosses the 4 KiB boundary at 0x1000"):
        step(model, **{f"{channel}valid": 1, f"{channel}addr": 0xF10, f"{channel}len": 15})


@pytest.mark.parametrize("field, value, message", [("burst", 0, "FIXED bursts are not supported"),
                                                   ("burst", 2, "WRAP bursts are not supported"),
                                                   ("size", 2, "narrower than the 16-byte bus")])
def test_refused_bursts_are_protocol_errors(field, value, message):
    with pytest.raises(AxiProtocolError, match=message):
        step(DramModel(PARAMS), arvalid=1, araddr=0, arlen=0, **{f"ar{field}": value})


def test_a_misplaced_wlast_is_a_protocol_error():
    model = DramModel(PARAMS)
    step(model, awvalid=1, awaddr=0, awlen=1)
    with pytest.raises(AxiProtocolError, match="W beat 0 of the burst at 0x0 \\(len 1\\): wlast is 1, expected 0"):
        step(model, wvalid=1, wdata=0, wlast=1)


def test_parameters_are_checked():
    with pytest.raises(ValueError, match="read_latency"):
        DramParams(size=64, read_latency=0)
    with pytest.raises(ValueError, match="multiple of data_bytes"):
        DramParams(size=24)
    with pytest.raises(ValueError, match="SLVERR or DECERR"):
        ErrorRange(0, 16, Resp.OKAY)
    assert (DramParams(size=64, read_latency=7).read_depth, DramParams(size=64, write_latency=3).write_depth) == (8, 5)
