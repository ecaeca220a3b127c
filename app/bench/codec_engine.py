"""`aipu bench codec-engine`: the codec's arithmetic engine alone, pure Python against the compiled path.

400 000 bins over 64 skewed contexts with 20 % bypass bins, encoded and decoded by the reference engine
(``codec.reference.engine``) and by the njit engine (``codec.compiled``), which must agree; then 200 000
geometric ``oct_abs_q`` magnitudes through the njit UEGk de-binariser. docs/codec-engine.md §7 has the
figures. It lives here, not beside the njit engine, so that editing it leaves the codec's numba cache alone.
"""
from __future__ import annotations

import time

import numpy as np

from aipu.codec.compiled.aec_decoder import NO_TRACE, decode_program, decode_uegk, new_state
from aipu.codec.compiled.aec_encoder import encode_program, encoder_finish, new_encoder_state, output_capacity
from aipu.codec.compiled.contexts import new_contexts, uegk_params
from aipu.codec.compiled.jit_cache import njit
from aipu.codec.reference.element_coder import ElementEncoder
from aipu.codec.reference.engine import TRACE_BYPASS, AecDecoder, AecEncoder


def run() -> dict:
    """Bins/s of the Python and njit encoders and decoders, njit UEGk values/s (module docstring)."""
    rng = np.random.default_rng(2021)
    count = 400_000
    num_ctx = 64
    p_one = rng.random(num_ctx) ** 3
    is_bypass = rng.random(count) < 0.2
    ctx_ids = rng.integers(0, num_ctx, count)
    ops = np.where(is_bypass, TRACE_BYPASS, ctx_ids).astype(np.int64)
    bins = np.where(is_bypass, rng.integers(0, 2, count), rng.random(count) < p_one[ctx_ids]).astype(np.int64)
    op_list, bin_list = ops.tolist(), bins.tolist()

    def best_of(repeats, func):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            func()
            times.append(time.perf_counter() - start)
        return min(times)

    encoder = AecEncoder()
    start = time.perf_counter()
    for op, bin_val in zip(op_list, bin_list):
        encoder.encode_bypass(bin_val) if op < 0 else encoder.encode_decision(op, bin_val)
    data = encoder.finish()
    encode_s = time.perf_counter() - start

    def python_decode():
        decoder = AecDecoder(data)
        for op in op_list:
            decoder.decode_bypass() if op < 0 else decoder.decode_decision(op)

    buffer = np.frombuffer(data, dtype=np.uint8)
    out = np.zeros(count, dtype=np.int64)

    def njit_decode():
        decode_program(new_state(buffer), new_contexts(), buffer, NO_TRACE, ops, out)

    def njit_encode():
        state, ctx = new_encoder_state(), new_contexts()
        out_bytes = np.zeros(output_capacity(count), dtype=np.uint8)
        encode_program(state, ctx, out_bytes, ops, bins)
        return out_bytes[:encoder_finish(state, out_bytes)].tobytes()

    if njit_encode() != data:
        raise AssertionError("njit encoder disagrees with the Python encoder")
    njit_encode_s = best_of(3, njit_encode)
    njit_decode()                      # compile / load the cache outside the timing
    python_s = best_of(1, python_decode)
    njit_s = best_of(3, njit_decode)
    if not np.array_equal(out, bins):
        raise AssertionError("njit decoder disagrees with the encoded bins")

    # oct_abs_q-like magnitudes (geometric, mostly small) through the njit UEGk de-binariser
    values = rng.geometric(0.3, 200_000).tolist()
    encoder = AecEncoder()
    writer = ElementEncoder(encoder)
    for value in values:
        writer.write("oct_abs_q", value, sign=0)
    uegk_data = np.frombuffer(encoder.finish(), dtype=np.uint8)
    start_idx, rule, c_max, k = uegk_params("oct_abs_q")
    values_array = np.array(values, dtype=np.int64)

    def njit_uegk():
        _uegk_many(new_state(uegk_data), new_contexts(), uegk_data, NO_TRACE, start_idx, rule, c_max, k,
                   values_array)

    njit_uegk()
    uegk_s = best_of(3, njit_uegk)
    return {
        "bins": count,
        "bits_per_bin": round(8 * len(data) / count, 4),
        "python_encode_bins_per_s": round(count / encode_s),
        "python_decode_bins_per_s": round(count / python_s),
        "njit_encode_bins_per_s": round(count / njit_encode_s),
        "njit_decode_bins_per_s": round(count / njit_s),
        "njit_uegk_values_per_s": round(len(values) / uegk_s),
    }


@njit
def _uegk_many(state, ctx, data, trace, ctx_start, rule, c_max, k, expected):
    """Decode len(expected) UEGk values; raises if one differs (benchmark helper)."""
    for i in range(expected.shape[0]):
        if decode_uegk(state, ctx, data, trace, ctx_start, rule, 0, c_max, k) != expected[i]:
            raise ValueError("njit UEGk decode disagrees with the encoded values")
