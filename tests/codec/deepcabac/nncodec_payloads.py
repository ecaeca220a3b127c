"""Runs inside NNCodec's own environment (app/bench/nncodec_env.py), never in the project's: it imports only
numpy and NNCodec 2.1.3's DeepCABAC extension.

Usage: ``python nncodec_payloads.py encode|decode IN.npz OUT.npz``. IN holds, per case NAME, ``levels_NAME``
(int32), ``unary_NAME`` (cabac_unary_length) and ``optimise_NAME`` (param_opt), and for ``decode`` also
``payload_NAME`` (uint8). ``encode`` writes ``payload_NAME``: NNCodec's payload of the levels as one layer
(profile 0, scan order 0, no dependent quantisation, no codebook, as app/bench/nncodec_worker.py codes);
``decode`` writes ``levels_NAME``: NNCodec's decode of the payload into the levels' shape.
"""
import sys

import numpy as np
from nncodec.extensions import deepCABAC

HDSP_OFF = (deepCABAC.HdspMode.AlwaysOff, np.array((0, 0), np.int8))


def encode(levels, unary_length, optimise):
    encoder = deepCABAC.Encoder()
    encoder.initCtxModels(unary_length, optimise)
    encoder.encodeLayer(levels, 0, 0, 0, 0, 0, np.zeros(levels.shape[0], np.int32), *HDSP_OFF, 0, 0)
    return np.frombuffer(bytes(encoder.finish()), np.uint8)


def decode(payload, shape, unary_length):
    decoder = deepCABAC.Decoder()
    decoder.setStream(payload)
    decoder.initCtxModels(unary_length)
    levels = np.zeros(shape, np.int32)
    decoder.decodeLayer(levels, 0, 0, 0, 0, *HDSP_OFF, 0, 0)
    decoder.finish()
    return levels


def main(mode, source, target):
    with np.load(source) as archive:
        cases = {name.removeprefix("levels_"): archive for name in archive.files if name.startswith("levels_")}
        results = {}
        for name in cases:
            levels = np.ascontiguousarray(archive[f"levels_{name}"].astype(np.int32))
            unary_length = int(archive[f"unary_{name}"])
            if mode == "encode":
                results[f"payload_{name}"] = encode(levels, unary_length, int(archive[f"optimise_{name}"]))
            else:
                payload = np.ascontiguousarray(archive[f"payload_{name}"].astype(np.uint8))
                results[f"levels_{name}"] = decode(payload, levels.shape, unary_length)
    np.savez(target, **results)


if __name__ == "__main__":
    main(*sys.argv[1:4])
