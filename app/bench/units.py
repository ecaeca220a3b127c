"""`aipu bench units`: the golden model's units other than conv (requant, LUT, pooling, element-wise) next to
the onnxruntime operator that does the same job, on MobileNetV2/V3 and ResNet-18 feature maps, batch 1.

Both sides run on one thread in the same process, as in `aipu bench golden` (whose ``best_seconds_paired`` times
them). The pairs, and whether their results must be equal:

* requant: ``requantize_float32`` (int32 accumulator, per-channel float32 scale, bias) against
  DequantizeLinear(acc, scale, zero point = -bias, axis 1) -> QuantizeLinear(scale 1, zp). onnxruntime has no
  requant operator of its own; this pair is how a QDQ model writes one, onnxruntime accepts the per-channel
  int32 zero point (ONNX asks for 0 there), which folds the bias in without an Add node (its cheapest form of the
  job), and with a unit output scale it is D12 step for step (fp32(acc + bias) * scale in float32, round half to even, + zp, saturate): bit-exact. The native
  ``requantize`` (M / 2**N, half up) is timed against the same graph; it differs from float32 by at most one LSB
  (docs/arithmetic.md §4.4).
* LUT: ``lut8`` against com.microsoft QLinearSigmoid and QLinearLeakyRelu (onnxruntime builds a 256-entry
  table when the model loads and looks every byte up in it) and, for hardswish, which has no quantized
  operator, DequantizeLinear -> HardSwish -> QuantizeLinear. ``build_lut8`` evaluates the function in float64
  and rounds half away from zero, onnxruntime in float32 rounding half to even, so a few table entries may
  differ; the lookup itself is checked exactly by looking up onnxruntime's own table (read back from it on all
  256 bytes). ``lut16`` (int16, interpolated) against DequantizeLinear -> Tanh -> QuantizeLinear on int16:
  interpolation against the float function, not comparable.
* pooling: ``max_pool2d`` against MaxPool on int8/uint8 (bit-exact); ``avg_pool2d`` and ``global_avg_pool``
  against com.microsoft QLinearAveragePool / QLinearGlobalAveragePool with equal input and output
  quantization, which average dequantized floats and round half to even where the golden model divides the
  integer sum exactly and rounds half up: not comparable.
* element-wise: ``eltwise`` add and mul and ``concat`` with rescale against com.microsoft QLinearAdd,
  QLinearMul and QLinearConcat, which scale in float32 where the golden model multiplies by M / 2**N and rounds
  once: not comparable.

Where results are not comparable the outputs still have the same shape and type (equal work), and their
largest difference is reported and checked against the bound the definitions allow, which catches a pair
that was wired up to do different jobs.

JSON: per case the golden and onnxruntime milliseconds (best of up to 200 runs), golden_over_ort, exact_match
(true or "not comparable: why"), max_abs_diff, and for lut8 lookup_exact_with_ort_table and
table_entries_differing; then the geomean of the ratios, goal_max_ratio and the cases over it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

GOAL_MAX_RATIO = 1.0     # each golden unit no slower than the onnxruntime operator doing the same job
EXACT = True
NOT_COMPARABLE_FLOAT_SCALE = "not comparable: onnxruntime scales in float32, the golden model by M / 2**N"
NOT_COMPARABLE_TABLE = ("not comparable: build_lut8 rounds the float64 function half away from zero, onnxruntime "
                        "the float32 one half to even")
NOT_COMPARABLE_AVERAGE = ("not comparable: onnxruntime averages dequantized floats and rounds half to even, the "
                          "golden model divides the integer sum exactly and rounds half up")


@dataclass
class Setup:
    """One problem: the golden call to time, the onnxruntime model and its inputs, and how to compare them."""

    golden: Callable[[], np.ndarray]
    model: object                       # onnx.ModelProto
    feeds: dict[str, np.ndarray]
    exact_match: bool | str             # True, or "not comparable: why"
    tolerance: int = 0                  # largest |golden - onnxruntime| the definitions allow
    lookup: Callable[[np.ndarray], np.ndarray] | None = None   # lut8 of the input with a given table
    table: np.ndarray | None = None     # the golden table, compared with onnxruntime's


@dataclass(frozen=True)
class Case:
    """A row of the table: what is timed on each side, and how to build the problem from a seeded generator."""

    name: str
    unit: str                           # requant, lut, pool or eltwise
    golden: str
    onnxruntime: str
    build: Callable[[np.random.Generator], Setup]


def _quantized(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _model(nodes, inputs: dict[str, np.ndarray], constants: dict[str, np.ndarray], out_dtype, opset: int = 0):
    """A model of ``nodes`` whose graph inputs are ``inputs`` and whose output is "y"; constants are
    initializers; the default ONNX opset is the one QLinearConv runs at, plus com.microsoft 1."""
    from onnx import helper, numpy_helper

    from aipu.app.ort_compare import ORT_IR_VERSION, QLINEAR_OPSET

    def info(name, array):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))

    graph = helper.make_graph(
        nodes, "unit", [info(name, array) for name, array in inputs.items()],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype)), None)],
        [numpy_helper.from_array(np.asarray(value), name) for name, value in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset or QLINEAR_OPSET),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = ORT_IR_VERSION
    return model


def _node(op: str, inputs: list[str], **attributes):
    """A node whose output is "y", in com.microsoft for the QLinear operators."""
    from onnx import helper

    domain = "com.microsoft" if op.startswith("QLinear") else ""
    return helper.make_node(op, inputs, ["y"], domain=domain, **attributes)


def _qparams(prefix: str, scale: float, zero_point: int, dtype) -> dict[str, np.ndarray]:
    return {f"{prefix}_scale": np.float32(scale), f"{prefix}_zero_point": np.array(zero_point, dtype)}


# --- requant -------------------------------------------------------------------------------------------------

def _requant_graph(acc: np.ndarray, bias: np.ndarray, scale: np.ndarray, zero_point: int, out_dtype):
    from onnx import helper

    nodes = [helper.make_node("DequantizeLinear", ["acc", "scale", "minus_bias"], ["real"], axis=1),
             _node("QuantizeLinear", ["real", "one", "y_zero_point"])]
    constants = {"scale": scale, "minus_bias": -bias, "one": np.float32(1.0),
                 "y_zero_point": np.array(zero_point, out_dtype)}
    return _model(nodes, {"acc": acc}, constants, out_dtype)


def _requant_inputs(rng: np.random.Generator, shape):
    """Accumulators and biases of a typical 8-bit conv layer, and per-channel scales mapping them to +-100."""
    acc = rng.integers(-40000, 40000, shape).astype(np.int32)
    bias = rng.integers(-5000, 5000, shape[1]).astype(np.int32)
    return acc, bias, rng.uniform(1e-3, 2.5e-3, shape[1]).astype(np.float32)


def _requant_float32(shape, out_dtype) -> Callable[[np.random.Generator], Setup]:
    def build(rng):
        from aipu.sim.golden import requantize_float32

        acc, bias, scale = _requant_inputs(rng, shape)
        zero_point = -3 if out_dtype == np.int8 else 120
        return Setup(lambda: requantize_float32(acc, bias=bias, scale=scale, out_zero_point=zero_point,
                                                out_dtype=out_dtype),
                     _requant_graph(acc, bias, scale, zero_point, out_dtype), {"acc": acc}, EXACT)
    return build


def _requant_native(shape, out_dtype) -> Callable[[np.random.Generator], Setup]:
    def build(rng):
        from aipu.sim.golden import quantize_multiplier, requantize

        acc, bias, scale = _requant_inputs(rng, shape)
        multiplier, shift = quantize_multiplier(scale)
        zero_point = -3 if out_dtype == np.int8 else 120
        return Setup(lambda: requantize(acc, bias=bias, multiplier=multiplier, shift=shift, out_zero_point=zero_point,
                                        out_dtype=out_dtype),
                     _requant_graph(acc, bias, scale, zero_point, out_dtype), {"acc": acc},
                     "not comparable: M / 2**N rounded half up against a float32 scale rounded half to even",
                     tolerance=1)
    return build


# --- LUT -----------------------------------------------------------------------------------------------------

def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _hardswish(v):
    return v * np.clip(v / 6.0 + 0.5, 0.0, 1.0)


def _lut8(shape, dtype, func, op: str, x_q: tuple[float, int], y_q: tuple[float, int], **attributes):
    """lut8 of a table built for ``func`` against the com.microsoft QLinear``op`` or, for an ONNX operator,
    DequantizeLinear -> ``op`` -> QuantizeLinear."""
    def build(rng):
        from onnx import helper

        from aipu.sim.golden import build_lut8, lut8

        x = _quantized(rng, shape, dtype)
        table = build_lut8(func, in_scale=x_q[0], in_zero_point=x_q[1], in_dtype=dtype, out_scale=y_q[0],
                           out_zero_point=y_q[1], out_dtype=dtype)
        constants = {**_qparams("x", *x_q, dtype), **_qparams("y", *y_q, dtype)}
        if op.startswith("QLinear"):
            nodes = [_node(op, ["x", "x_scale", "x_zero_point", "y_scale", "y_zero_point"], **attributes)]
        else:
            nodes = [helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zero_point"], ["real"]),
                     helper.make_node(op, ["real"], ["activated"], **attributes),
                     _node("QuantizeLinear", ["activated", "y_scale", "y_zero_point"])]
        return Setup(lambda: lut8(x, table), _model(nodes, {"x": x}, constants, dtype, opset=14), {"x": x},
                     NOT_COMPARABLE_TABLE, tolerance=1, lookup=lambda ort_table: lut8(x, ort_table), table=table)
    return build


def _lut16_tanh(shape) -> Callable[[np.random.Generator], Setup]:
    """int16 tanh over +-8 (input scale 2**-12) into +-1 (output scale 2**-15), 512 segments of 128 inputs."""
    def build(rng):
        from onnx import helper

        from aipu.sim.golden import build_lut16, lut16

        x = _quantized(rng, shape, np.int16)
        table = build_lut16(np.tanh, in_scale=2.0 ** -12, in_zero_point=0, out_scale=2.0 ** -15, out_zero_point=0,
                            index_bits=9)
        nodes = [helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zero_point"], ["real"]),
                 helper.make_node("Tanh", ["real"], ["activated"]),
                 _node("QuantizeLinear", ["activated", "y_scale", "y_zero_point"])]
        constants = {**_qparams("x", 2.0 ** -12, 0, np.int16), **_qparams("y", 2.0 ** -15, 0, np.int16)}
        # a chord over 128 inputs strays by at most 128**2 / 8 * max|f''| = 2048 * 2**-9 * 0.77 = 3.1 LSB from the
        # curve (f(q) = 2**15 tanh(q / 2**12)); the samples, the interpolation and onnxruntime each round by 1/2
        return Setup(lambda: lut16(x, table, index_shift=7), _model(nodes, {"x": x}, constants, np.int16, opset=21),
                     {"x": x}, "not comparable: linear interpolation between 513 samples against float32 tanh",
                     tolerance=5)
    return build


# --- pooling -------------------------------------------------------------------------------------------------

def _max_pool(shape, dtype, kernel: int, stride: int, pad: int) -> Callable[[np.random.Generator], Setup]:
    def build(rng):
        from aipu.sim.golden import max_pool2d

        x = _quantized(rng, shape, dtype)
        node = _node("MaxPool", ["x"], kernel_shape=[kernel] * 2, strides=[stride] * 2, pads=[pad] * 4)
        return Setup(lambda: max_pool2d(x, kernel, stride=stride, padding=(pad,) * 4),
                     _model([node], {"x": x}, {}, dtype), {"x": x}, EXACT)
    return build


def _avg_pool(shape, dtype, kernel: int, stride: int, pad: int) -> Callable[[np.random.Generator], Setup]:
    def build(rng):
        from aipu.sim.golden import avg_pool2d

        x = _quantized(rng, shape, dtype)
        zero_point = 5 if dtype == np.int8 else 130
        node = _node("QLinearAveragePool", ["x", "x_scale", "x_zero_point", "x_scale", "x_zero_point"],
                     kernel_shape=[kernel] * 2, strides=[stride] * 2, pads=[pad] * 4)
        return Setup(lambda: avg_pool2d(x, kernel, stride=stride, padding=(pad,) * 4, x_zero_point=zero_point),
                     _model([node], {"x": x}, _qparams("x", 0.05, zero_point, dtype), dtype), {"x": x},
                     NOT_COMPARABLE_AVERAGE, tolerance=1)
    return build


def _global_avg_pool(shape, dtype) -> Callable[[np.random.Generator], Setup]:
    def build(rng):
        from aipu.sim.golden import global_avg_pool

        x = _quantized(rng, shape, dtype)
        zero_point = -7 if dtype == np.int8 else 121
        node = _node("QLinearGlobalAveragePool", ["x", "x_scale", "x_zero_point", "x_scale", "x_zero_point"],
                     channels_last=0)
        return Setup(lambda: global_avg_pool(x, x_zero_point=zero_point),
                     _model([node], {"x": x}, _qparams("x", 0.05, zero_point, dtype), dtype), {"x": x},
                     NOT_COMPARABLE_AVERAGE, tolerance=1)
    return build


# --- element-wise --------------------------------------------------------------------------------------------

def _eltwise(op: str, a_shape, b_shape, dtype) -> Callable[[np.random.Generator], Setup]:
    """QLinearAdd / QLinearMul with three different quantizations (b may broadcast, as in a squeeze-excite)."""
    def build(rng):
        from aipu.sim.golden import eltwise, eltwise_params

        a, b = _quantized(rng, a_shape, dtype), _quantized(rng, b_shape, dtype)
        low = np.iinfo(dtype).min
        (a_scale, a_zp), (b_scale, b_zp), (y_scale, y_zp) = (0.05, low + 131), (0.03, low + 125), (0.07, low + 128)
        params = eltwise_params(op, a_scale, b_scale, y_scale)
        node = _node(f"QLinear{op.capitalize()}", ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point",
                                                   "y_scale", "y_zero_point"])
        constants = {**_qparams("a", a_scale, a_zp, dtype), **_qparams("b", b_scale, b_zp, dtype),
                     **_qparams("y", y_scale, y_zp, dtype)}
        return Setup(lambda: eltwise(a, b, op, a_zero_point=a_zp, b_zero_point=b_zp, out_zero_point=y_zp,
                                     out_dtype=dtype, **params),
                     _model([node], {"a": a, "b": b}, constants, dtype), {"a": a, "b": b},
                     NOT_COMPARABLE_FLOAT_SCALE, tolerance=1)
    return build


def _concat(shapes, dtype) -> Callable[[np.random.Generator], Setup]:
    """QLinearConcat along channels; input i has scale 0.04 + 0.01 i and the last one the output's quantization
    (a plain copy on both sides)."""
    def build(rng):
        from aipu.sim.golden import concat, quantize_multiplier

        inputs = {f"x{i}": _quantized(rng, shape, dtype) for i, shape in enumerate(shapes)}
        low = np.iinfo(dtype).min
        y_scale, y_zp = 0.04 + 0.01 * (len(shapes) - 1), low + 128
        quantizations = [(0.04 + 0.01 * i, low + 120 + 3 * i) for i in range(len(shapes) - 1)] + [(y_scale, y_zp)]
        params = [quantize_multiplier(scale / y_scale) for scale, _ in quantizations]
        constants = _qparams("y", y_scale, y_zp, dtype)
        names = ["y_scale", "y_zero_point"]
        for (scale, zp), name in zip(quantizations, inputs):
            constants.update(_qparams(name, scale, zp, dtype))
            names += [name, f"{name}_scale", f"{name}_zero_point"]
        arrays = list(inputs.values())
        return Setup(lambda: concat(arrays, axis=1, zero_points=[zp for _, zp in quantizations],
                                    multipliers=[m for m, _ in params], shifts=[n for _, n in params],
                                    out_zero_point=y_zp, out_dtype=dtype),
                     _model([_node("QLinearConcat", names, axis=1)], inputs, constants, dtype), inputs,
                     NOT_COMPARABLE_FLOAT_SCALE, tolerance=1)
    return build


CASES = (
    Case("requant_float32_32x112x112", "requant", "requantize_float32", "DequantizeLinear+QuantizeLinear",
         _requant_float32((1, 32, 112, 112), np.int8)),
    Case("requant_float32_144x56x56", "requant", "requantize_float32", "DequantizeLinear+QuantizeLinear",
         _requant_float32((1, 144, 56, 56), np.int8)),
    Case("requant_float32_672x14x14_u8", "requant", "requantize_float32", "DequantizeLinear+QuantizeLinear",
         _requant_float32((1, 672, 14, 14), np.uint8)),
    Case("requant_native_144x56x56", "requant", "requantize", "DequantizeLinear+QuantizeLinear",
         _requant_native((1, 144, 56, 56), np.int8)),
    Case("requant_native_256x14x14", "requant", "requantize", "DequantizeLinear+QuantizeLinear",
         _requant_native((1, 256, 14, 14), np.int8)),
    Case("lut8_sigmoid_144x56x56", "lut", "lut8", "QLinearSigmoid",
         _lut8((1, 144, 56, 56), np.int8, _sigmoid, "QLinearSigmoid", (0.05, 3), (1 / 256, -128))),
    Case("lut8_leaky_relu_32x112x112_u8", "lut", "lut8", "QLinearLeakyRelu",
         _lut8((1, 32, 112, 112), np.uint8, lambda v: np.where(v < 0, 0.1 * v, v), "QLinearLeakyRelu",
               (0.05, 128), (0.03, 30), alpha=0.1)),
    Case("lut8_hardswish_672x14x14", "lut", "lut8", "DequantizeLinear+HardSwish+QuantizeLinear",
         _lut8((1, 672, 14, 14), np.int8, _hardswish, "HardSwish", (0.04, -10), (0.025, -110))),
    Case("lut16_tanh_32x112x112_i16", "lut", "lut16", "DequantizeLinear+Tanh+QuantizeLinear",
         _lut16_tanh((1, 32, 112, 112))),
    Case("max_pool_3x3_s2_64x112x112", "pool", "max_pool2d", "MaxPool",
         _max_pool((1, 64, 112, 112), np.int8, 3, 2, 1)),
    Case("max_pool_2x2_s2_144x56x56_u8", "pool", "max_pool2d", "MaxPool",
         _max_pool((1, 144, 56, 56), np.uint8, 2, 2, 0)),
    Case("avg_pool_3x3_s1_256x14x14_u8", "pool", "avg_pool2d", "QLinearAveragePool",
         _avg_pool((1, 256, 14, 14), np.uint8, 3, 1, 1)),
    Case("avg_pool_2x2_s2_144x56x56", "pool", "avg_pool2d", "QLinearAveragePool",
         _avg_pool((1, 144, 56, 56), np.int8, 2, 2, 0)),
    Case("global_avg_pool_512x7x7", "pool", "global_avg_pool", "QLinearGlobalAveragePool",
         _global_avg_pool((1, 512, 7, 7), np.int8)),
    Case("global_avg_pool_1280x7x7_u8", "pool", "global_avg_pool", "QLinearGlobalAveragePool",
         _global_avg_pool((1, 1280, 7, 7), np.uint8)),
    Case("global_avg_pool_672x14x14_u8", "pool", "global_avg_pool", "QLinearGlobalAveragePool",
         _global_avg_pool((1, 672, 14, 14), np.uint8)),
    Case("add_64x56x56", "eltwise", "eltwise add", "QLinearAdd",
         _eltwise("add", (1, 64, 56, 56), (1, 64, 56, 56), np.int8)),
    Case("add_24x56x56_u8", "eltwise", "eltwise add", "QLinearAdd",
         _eltwise("add", (1, 24, 56, 56), (1, 24, 56, 56), np.uint8)),
    Case("add_256x14x14", "eltwise", "eltwise add", "QLinearAdd",
         _eltwise("add", (1, 256, 14, 14), (1, 256, 14, 14), np.int8)),
    Case("mul_144x56x56", "eltwise", "eltwise mul", "QLinearMul",
         _eltwise("mul", (1, 144, 56, 56), (1, 144, 56, 56), np.int8)),
    Case("mul_se_672x14x14_by_672x1x1_u8", "eltwise", "eltwise mul", "QLinearMul",
         _eltwise("mul", (1, 672, 14, 14), (1, 672, 1, 1), np.uint8)),
    Case("concat_2x64x56x56", "eltwise", "concat", "QLinearConcat",
         _concat([(1, 64, 56, 56)] * 2, np.int8)),
    Case("concat_3x64x28x28_u8", "eltwise", "concat", "QLinearConcat",
         _concat([(1, 64, 28, 28)] * 3, np.uint8)),
)


def _compare(case: Case, setup: Setup, session, y_golden: np.ndarray, y_ort: np.ndarray) -> dict:
    """Check the pair: equal shape and type always, equal values where the definitions agree (else within the
    tolerance); for a table, lut8 with onnxruntime's own table must reproduce onnxruntime exactly."""
    if y_golden.shape != y_ort.shape or y_golden.dtype != y_ort.dtype:
        raise AssertionError(f"{case.name}: golden {y_golden.dtype}{y_golden.shape} against onnxruntime "
                             f"{y_ort.dtype}{y_ort.shape}")
    difference = int(np.abs(y_golden.astype(np.int64) - y_ort).max())
    if difference > (0 if setup.exact_match is True else setup.tolerance):
        raise AssertionError(f"{case.name}: golden and onnxruntime differ by up to {difference} "
                             f"(allowed {setup.tolerance})")
    result = {"exact_match": setup.exact_match, "max_abs_diff": difference}
    if setup.lookup is not None:
        (name, x), = setup.feeds.items()
        every_byte = np.resize(np.arange(256, dtype=np.uint8).view(x.dtype), x.shape)
        ort_table = session.run(None, {name: every_byte})[0].reshape(-1)[:256]
        if not np.array_equal(setup.lookup(ort_table), y_ort):
            raise AssertionError(f"{case.name}: lut8 with onnxruntime's own table differs from onnxruntime")
        result.update(lookup_exact_with_ort_table=True,
                      table_entries_differing=int(np.count_nonzero(ort_table != setup.table)))
    return result


def run(names=None, *, budget: float = 0.6) -> dict:
    """Time the cases called ``names`` (default: all), each side for about ``budget`` seconds."""
    from aipu.app.bench.golden import best_seconds_paired
    from aipu.app.ort_compare import single_thread_session
    from aipu.app.threads import pinned_threads

    rows, ratios = [], []
    with pinned_threads(1):
        for seed, case in enumerate(CASES):
            if names is not None and case.name not in names:
                continue
            setup = case.build(np.random.default_rng(seed))
            session = single_thread_session(setup.model)

            def onnxruntime():
                return session.run(None, setup.feeds)[0]

            y_golden, y_ort = setup.golden(), onnxruntime()
            comparison = _compare(case, setup, session, y_golden, y_ort)
            # up to 200 runs: most cases take well under a millisecond, and the best of 20 would still be noisy
            t_golden, t_ort = best_seconds_paired((setup.golden, onnxruntime), 2 * budget, 200)
            ratios.append(t_golden / t_ort)
            rows.append({"case": case.name, "unit": case.unit, "golden": case.golden, "onnxruntime": case.onnxruntime,
                         "shape": "x".join(map(str, y_ort.shape)), "dtype": y_ort.dtype.name,
                         "golden_ms": round(t_golden * 1e3, 3), "ort_ms": round(t_ort * 1e3, 3),
                         "golden_over_ort": round(t_golden / t_ort, 2), **comparison})
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return {"threads": 1, "cases": rows, "geomean_golden_over_ort": round(geomean, 2),
            "goal_max_ratio": GOAL_MAX_RATIO,
            "cases_over_goal": [row["case"] for row in rows if row["golden_over_ort"] > GOAL_MAX_RATIO]}
