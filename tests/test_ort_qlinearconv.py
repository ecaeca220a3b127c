"""Golden model against onnxruntime QLinearConv on random int8/uint8 problems.

* The ONNX-compatible float32 requant mode (docs/arithmetic.md §4.5, D12) must match onnxruntime exactly.
* The native M/2^N mode (§4.4) is measured against onnxruntime: every output may differ by at most one
  LSB, and only where the exact real result lies within the documented distance of a rounding boundary.
"""
from __future__ import annotations

import numpy as np
import pytest

from sim import golden
from sim.arch import MULTIPLIER_BITS
from sim.onnx_ops import run_node
from sim.ort_compare import qlinear_conv_model, random_qlinear_conv_case, run_qlinear_conv_ort

CHUNKS = 10
CASES_PER_CHUNK = 100           # 1000 random cases in all, split so that pytest-xdist spreads them


def _cases(chunk: int):
    rng = np.random.default_rng(1000 + chunk)
    return [random_qlinear_conv_case(rng) for _ in range(CASES_PER_CHUNK)]


def _golden_via_onnx_node(case) -> np.ndarray:
    model = qlinear_conv_model(case)
    inits = {init.name: init for init in model.graph.initializer}
    from onnx import numpy_helper

    node = model.graph.node[0]
    inputs = [case.x if name == "x" else numpy_helper.to_array(inits[name]) for name in node.input]
    return run_node(node, inputs)[0]


def _native_accumulator(case) -> np.ndarray:
    return golden.conv2d(case.x, case.w, x_zero_point=case.x_zero_point,
                         w_zero_point=case.w_zero_point if case.w_zero_point.ndim else int(case.w_zero_point),
                         stride=case.strides, padding=case.pads, dilation=case.dilations, groups=case.group)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_float32_mode_matches_onnxruntime_exactly(chunk):
    for case in _cases(chunk):
        expected = run_qlinear_conv_ort(case)
        actual = _golden_via_onnx_node(case)
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, case.description
        mismatches = np.count_nonzero(actual != expected)
        assert mismatches == 0, f"{case.description}: {mismatches} of {expected.size} outputs differ"


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_native_mode_error_is_within_the_documented_bound(chunk):
    relative_bound = 2.0 ** -MULTIPLIER_BITS      # |M/2^N - scale| / scale, docs/arithmetic.md §4.4
    float32_bound = 2.0 ** -22                    # fp32(t) and fp32(f*scale): two RNE steps of 2^-24 each, doubled
    outputs = mismatches = 0
    for case in _cases(chunk):
        expected = run_qlinear_conv_ort(case).astype(np.int64)
        acc = _native_accumulator(case)
        scale = case.requant_scale()
        multiplier, shift = golden.quantize_multiplier(scale)
        info = np.iinfo(case.y_dtype)
        native = golden.requantize(acc, bias=case.bias, multiplier=multiplier, shift=shift,
                                   out_zero_point=case.y_zero_point, qmin=info.min, qmax=info.max,
                                   rounding="half_to_even", out_dtype=case.y_dtype).astype(np.int64)
        error = np.abs(native - expected)
        assert error.max(initial=0) <= 1, f"{case.description}: native output off by {error.max()} LSB"
        # Each differing output must have its exact real value within the bound of a .5 boundary.
        exact = (acc.astype(np.float64) + case.bias.reshape(1, -1, 1, 1)) * scale.astype(np.float64).reshape(1, -1, 1, 1)
        distance_to_boundary = np.abs(exact - np.floor(exact) - 0.5)
        allowed = np.abs(exact) * (relative_bound + float32_bound) + 1e-9
        unexplained = (error == 1) & (distance_to_boundary > allowed)
        assert not unexplained.any(), (
            f"{case.description}: {np.count_nonzero(unexplained)} outputs differ farther from a rounding "
            f"boundary than the documented bound allows")
        outputs += expected.size
        mismatches += int(np.count_nonzero(error))
    # Aggregate: with int8 outputs the band is ~|y|*2^-15 wide, so well below one percent differ.
    assert mismatches / outputs < 0.01, f"native mode differs on {mismatches} of {outputs} outputs"
