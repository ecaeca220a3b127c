"""Runs inside NNCodec's own environment (app/bench/nncodec_env.py), never in the project's: it imports only
numpy and NNCodec 2.1.3's DeepCABAC extension, not aipu.

Usage: ``python nncodec_worker.py TENSORS.npz RESULT.json REPEATS``. Every integer tensor of the archive is
coded losslessly as one NNCodec layer, with the settings NNCodec's own pipeline uses by default
(cabac_unary_length 11, context parameter optimisation on, profile 0, scan order 0, no dependent
quantisation); the decode is checked against the input. The result holds, per tensor, the payload bytes and
the best encode and decode seconds of REPEATS runs.
"""
import json
import sys
import time

import numpy as np
from nncodec.extensions import deepCABAC

UNARY_LENGTH = 11          # NNCodec's default cabac_unary_length_minus1 = 10
PARAM_OPT = 1              # NNCodec's default param_opt=True: adaptation rates chosen per context
HDSP_OFF = (deepCABAC.HdspMode.AlwaysOff, np.array((0, 0), np.int8))


def encode(levels):
    encoder = deepCABAC.Encoder()
    encoder.initCtxModels(UNARY_LENGTH, PARAM_OPT)
    encoder.encodeLayer(levels, 0, 0, 0, 0, 0, np.zeros(levels.shape[0], np.int32), *HDSP_OFF, 0, 0)
    return bytes(encoder.finish())


def decode(stream, shape):
    decoder = deepCABAC.Decoder()
    decoder.setStream(np.frombuffer(stream, np.uint8).copy())
    decoder.initCtxModels(UNARY_LENGTH)
    levels = np.zeros(shape, np.int32)
    decoder.decodeLayer(levels, 0, 0, 0, 0, *HDSP_OFF, 0, 0)
    decoder.finish()
    return levels


def best_seconds(call, repeats):
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - started)
    return result, min(times)


def main(npz_path, result_path, repeats):
    results = {}
    with np.load(npz_path) as archive:
        for name in archive.files:
            levels = np.ascontiguousarray(archive[name].astype(np.int32))
            stream, encode_seconds = best_seconds(lambda: encode(levels), repeats)
            decoded, decode_seconds = best_seconds(lambda: decode(stream, levels.shape), repeats)
            if not np.array_equal(decoded, levels):
                raise SystemExit(f"NNCodec did not decode tensor {name!r} losslessly")
            results[name] = {"bytes": len(stream), "encode_seconds": encode_seconds,
                             "decode_seconds": decode_seconds}
    with open(result_path, "w") as out:
        json.dump({"nncodec": deepCABAC.__name__, "tensors": results}, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
