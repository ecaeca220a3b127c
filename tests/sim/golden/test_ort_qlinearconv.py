"""Golden model against an exact QLinearConv and onnxruntime on random int8/uint8 problems.

* The ONNX-compatible float32 requant mode (docs/arithmetic.md §4.5, D12) must equal the exact int64 QLinearConv
  on full-range operands, and onnxruntime wherever onnxruntime is exact on every CPU (int8 weights in
  ORT_EXACT_INT8_WEIGHTS; its u8 x s8 kernels saturate 16-bit pair sums on CPUs without AVX-512 VNNI).
  A disagreement names the side that is wrong, with golden, onnxruntime and exact values side by side.
* The native M/2^N mode (§4.4) is measured against the exact float32 result: every output may differ by at
  most one LSB, and only where the exact real result lies within the documented distance of a rounding boundary.
"""
from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import numpy_helper

from aipu.sim import golden
from aipu.sim.machine.arch import MULTIPLIER_BITS
from aipu.compiler.onnx_ops import run_node
from aipu.app.ort_compare import (
    ORT_EXACT_INT8_WEIGHTS,
    QLinearConvCase,
    disagreement,
    exact_qlinear_conv,
    qlinear_conv_model,
    random_qlinear_conv_case,
    run_qlinear_conv_ort,
)

CHUNKS = 10
CASES_PER_CHUNK = 100           # 1000 random cases per test, split so that pytest-xdist spreads them


def _cases(chunk: int, *, ort_exact: bool) -> list[QLinearConvCase]:
    rng = np.random.default_rng((1000 if ort_exact else 2000) + chunk)
    return [random_qlinear_conv_case(rng, ort_exact=ort_exact) for _ in range(CASES_PER_CHUNK)]


def _golden_via_onnx_node(case: QLinearConvCase) -> np.ndarray:
    model = qlinear_conv_model(case)
    inits = {init.name: init for init in model.graph.initializer}
    node = model.graph.node[0]
    inputs = [case.x if name == "x" else numpy_helper.to_array(inits[name]) for name in node.input]
    return run_node(node, inputs)[0]


def _native_accumulator(case: QLinearConvCase) -> np.ndarray:
    return golden.conv2d(case.x, case.w, x_zero_point=case.x_zero_point,
                         w_zero_point=case.w_zero_point if case.w_zero_point.ndim else int(case.w_zero_point),
                         stride=case.strides, padding=case.pads, dilation=case.dilations, groups=case.group)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_float32_mode_equals_the_exact_qlinear_conv_on_full_range_operands(chunk):
    for case in _cases(chunk, ort_exact=False):
        exact = exact_qlinear_conv(case)
        actual = _golden_via_onnx_node(case)
        assert actual.dtype == exact.dtype and actual.shape == exact.shape, case.description
        mismatches = np.count_nonzero(actual != exact)
        assert mismatches == 0, f"{case.description}: {mismatches} of {exact.size} outputs differ from exact"


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_float32_mode_matches_onnxruntime_where_onnxruntime_is_exact(chunk):
    for case in _cases(chunk, ort_exact=True):
        expected = run_qlinear_conv_ort(case)
        actual = _golden_via_onnx_node(case)
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, case.description
        problem = disagreement(actual, expected, exact_qlinear_conv(case), "onnxruntime")
        assert not problem, f"{case.description}: {problem}"


def test_ort_exact_cases_cover_every_operand_type_and_the_weight_extremes():
    cases = [case for chunk in range(CHUNKS) for case in _cases(chunk, ort_exact=True)]
    kinds = {(case.x.dtype.name, case.w.dtype.name) for case in cases}
    assert kinds == {("int8", "int8"), ("uint8", "int8"), ("uint8", "uint8")}
    int8_weights = np.concatenate([case.w.ravel() for case in cases if case.w.dtype == np.int8])
    assert (int8_weights.min(), int8_weights.max()) == ORT_EXACT_INT8_WEIGHTS


def test_exact_reference_is_the_definition_on_a_hand_case():
    # 1x1 input channel, 2x2 kernel, no padding: y = rint((sum (x - 3) * (w - 0) + bias) * scale) + y_zp
    x = np.array([[[[10, 20, 30], [40, 50, 60], [70, 80, 90]]]], np.uint8)
    w = np.array([[[[1, -2], [3, -4]]]], np.int8)
    case = QLinearConvCase(x=x, w=w, bias=np.array([5], np.int32), x_scale=np.float32(0.5), x_zero_point=3,
                           w_scale=np.array(0.5, np.float32), w_zero_point=np.array(0, np.int8),
                           y_scale=np.float32(1.0), y_zero_point=100)
    sums = [[(7 - 34 + 111 - 188), (17 - 54 + 141 - 228)], [(37 - 94 + 201 - 308), (47 - 114 + 231 - 348)]]
    expected = np.rint((np.array(sums) + 5) * 0.25).astype(np.int64) + 100
    np.testing.assert_array_equal(exact_qlinear_conv(case)[0, 0], np.clip(expected, 0, 255))


def test_disagreement_blames_the_side_that_differs_from_exact():
    exact = np.array([1, 2, 3], np.uint8)
    assert disagreement(exact, exact.copy(), exact, "onnxruntime") == ""
    wrong_reference = disagreement(exact, np.array([1, 9, 3], np.uint8), exact, "onnxruntime")
    assert "onnxruntime is wrong on 1 outputs, not the golden model" in wrong_reference
    assert "index (1,): golden 2, onnxruntime 9, exact 2" in wrong_reference
    assert disagreement(np.array([0, 2, 3], np.uint8), exact, exact, "onnxruntime").startswith(
        "the golden model is wrong on 1 outputs")


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_native_mode_error_is_within_the_documented_bound(chunk):
    relative_bound = 2.0 ** -MULTIPLIER_BITS      # |M/2^N - scale| / scale, docs/arithmetic.md §4.4
    float32_bound = 2.0 ** -22                    # fp32(t) and fp32(f*scale): two RNE steps of 2^-24 each, doubled
    outputs = mismatches = 0
    for case in _cases(chunk, ort_exact=False):
        expected = exact_qlinear_conv(case).astype(np.int64)
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


AVX2_ONLY_CPU = "EPYC-Rome"     # AVX2 without AVX-512 VNNI, emulated by qemu-user


def _under_avx2_only_cpu(*args: str) -> subprocess.CompletedProcess:
    qemu = shutil.which("qemu-x86_64")
    if qemu is None or platform.machine() != "x86_64":
        pytest.skip("needs qemu-user on x86-64 (apt-get install qemu-user) to emulate an AVX2-only CPU")
    return subprocess.run([qemu, "-cpu", AVX2_ONLY_CPU, sys.executable, *args], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[3], timeout=1200)


@pytest.mark.slow
def test_onnxruntime_comparison_holds_on_an_avx2_only_cpu():
    """The ORT-exact cases pass on an emulated AVX2-only CPU, where full-range u8 x s8 cases show the saturation."""
    hazard = _under_avx2_only_cpu("-c", (
        "import numpy as np\n"
        "from aipu.app.ort_compare import random_qlinear_conv_case, run_qlinear_conv_ort, exact_qlinear_conv\n"
        "rng = np.random.default_rng(7)\n"
        "cases = [random_qlinear_conv_case(rng) for _ in range(60)]\n"
        "print(sum(not np.array_equal(run_qlinear_conv_ort(c), exact_qlinear_conv(c)) for c in cases))\n"))
    assert hazard.returncode == 0, hazard.stderr[-2000:]
    assert int(hazard.stdout.split()[-1]) > 0, "the emulated CPU does not show onnxruntime's u8 x s8 saturation"
    run = _under_avx2_only_cpu("-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-m", "not slow",
                               "-k", "onnxruntime_where_onnxruntime_is_exact", __file__)
    assert run.returncode == 0, run.stdout[-3000:]
