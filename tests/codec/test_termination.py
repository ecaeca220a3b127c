"""The end of a stream (docs/codec-engine.md, "Termination"): the standard defines none, so by default the
decoders accept whatever follows the terminating stuffing bin of 1, as a conforming decoder does: streams
flushed the way AVS2 encoders flush them (tests/codec/avs2_encoder.py) and streams with trailing bytes decode
to the same levels. ``strict`` keeps this encoder's own end (zero padding, nothing after it), and the npu
profile, what the hardware checks, stays strict."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import zlib

import numpy as np
import pytest

from aipu.codec import CodecError, api, encode
from aipu.codec.compiled.aec_decoder import FastDecoder
from aipu.codec.container import index_json, pack_container, read_index
from aipu.codec.npu_profile import decode_profile_stream, encode_profile_stream
from aipu.codec.reference.engine import AecDecoder

from .avs2_encoder import Avs2Encoder
from .bin_streams import STUFFING, decode_ops, feed_ops, random_ops


def _avs2_terminated(stream: bytes) -> bytes:
    """The same bins as ``stream`` (a whole nnc() stream), ended as AVS2 ends a slice."""
    trace: list[tuple[int, int]] = []
    api.decode_stream(stream, trace=trace, strict=True)
    assert trace[-1] == (STUFFING, 1)
    encoder = Avs2Encoder()
    feed_ops(encoder, trace[:-1])
    return encoder.finish()


@pytest.mark.parametrize("engine", [AecDecoder, FastDecoder], ids=["reference", "compiled"])
def test_avs2_flushed_bin_streams_end_leniently_and_mostly_not_strictly(engine):
    rng, strict_ends = random.Random(49), 0
    for _ in range(150):
        ops = random_ops(rng, rng.randint(0, 600), num_ctx=rng.choice([1, 4, 64]),
                         bypass_share=rng.choice([0.0, 0.2, 0.9]))
        encoder = Avs2Encoder()
        feed_ops(encoder, ops)
        data = encoder.finish()
        lenient = engine(data)
        assert decode_ops(lenient, [ctx for ctx, _ in ops]) == ops
        assert lenient.finish(strict=False) <= 8 * len(data) + 16
        strict = engine(data)
        decode_ops(strict, [ctx for ctx, _ in ops])
        try:
            strict_ends += strict.finish() == 8 * len(data)
        except CodecError:
            pass
    assert strict_ends < 50          # this encoder's own end is a different flush


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"conv.weight": np.round(rng.laplace(0, 5, (8, 4, 3, 3))).astype(np.int8),
            "fc.weight": rng.normal(0, 0.1, (10, 32)).astype(np.float32)}


def _rebuilt(data: bytes, transform) -> bytes:
    """The container ``data`` with every layer's stream replaced by ``transform(stream)``, its index updated."""
    infos, payload = read_index(data)
    streams, layers, offset = [], [], 0
    index = json.loads(index_json(data))
    for info, entry in zip(infos, index["layers"]):
        stream = transform(data[payload + info.offset:payload + info.offset + info.length])
        layers.append({**entry, "length": len(stream), "crc32": zlib.crc32(stream)})
        streams.append(stream)
        offset += len(stream)
    return pack_container(json.dumps({**index, "layers": layers}).encode(), b"".join(streams))


@pytest.mark.parametrize("ending", ["avs2", "trailing bytes"])
def test_containers_of_foreign_endings_decode_by_default_and_strict_refuses_them(ending):
    tensors = _weights(3)
    container = encode(tensors)
    transform = _avs2_terminated if ending == "avs2" else (lambda stream: stream + b"\x5a\xff\x00")
    foreign = _rebuilt(container, transform)
    assert foreign != container
    decoded, expected = api.decode(foreign), api.decode(container)
    assert decoded.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(decoded[name], expected[name])
    if ending == "trailing bytes":
        with pytest.raises(CodecError, match="left after the end"):
            api.decode(foreign, strict=True)


def test_a_stuffing_bin_of_zero_is_refused_either_way():
    stream = encode_profile_stream(np.ones((2, 2, 1, 1), np.int8))
    for strict in (False, True):
        with pytest.raises(CodecError, match="stuffing bin is 0|terminator"):
            api.decode_stream(stream[:-2] + bytes(2), strict=strict)


def test_the_npu_profile_stays_strict():
    stream = encode_profile_stream(np.arange(-8, 8, dtype=np.int8).reshape(4, 4, 1, 1))
    with pytest.raises(CodecError, match="left after the end"):
        decode_profile_stream(stream + b"\0", (4, 4, 1, 1))


def test_cli_decodes_a_foreign_ending_and_refuses_it_with_strict(tmp_path):
    source = tmp_path / "w.npz"
    np.savez(source, **_weights(4))
    subprocess.run([sys.executable, "-m", "aipu.app.cli", "codec", "encode", str(source), "-o",
                    str(tmp_path / "w.nnr")], check=True, capture_output=True)
    foreign = tmp_path / "foreign.nnr"
    foreign.write_bytes(_rebuilt((tmp_path / "w.nnr").read_bytes(), lambda stream: stream + b"\x01"))
    run = [sys.executable, "-m", "aipu.app.cli", "codec", "decode", str(foreign), "-o", str(tmp_path / "out.npz")]
    assert subprocess.run(run, capture_output=True).returncode == 0
    refused = subprocess.run(run + ["--strict"], capture_output=True, text=True)
    assert refused.returncode == 2 and "1 byte left after the end" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and str(foreign) in refused.stderr
