"""Single-node quantized ONNX models run on onnxruntime, and an exact integer QLinearConv to judge both.

Used by the test suite (exactness of the ONNX-compatible requant mode, error of the M/2^N mode) and by
`aipu bench golden` (throughput next to onnxruntime on one thread), and onnxruntime's own static quantization
that the demo and the pre-quantized tests start from. onnxruntime is imported on first use, so that importing
this module stays cheap.

onnxruntime is not exact everywhere. Its uint8 x int8 kernels on x86-64 CPUs without AVX-512 VNNI
(vpmaddubsw) add pairs of products in saturating 16-bit arithmetic: 255 * -128 * 2 = -65280 does not fit.
It is exact on every CPU while |w| <= 64 (255 * 64 * 2 = 32640 <= 32767), so the cases compared with
onnxruntime draw int8 weights from ``ORT_EXACT_INT8_WEIGHTS``; full-range cases are compared with
``exact_qlinear_conv`` (int64 accumulation), which is also the arbiter when the two disagree
(docs/arithmetic.md, "References and their limits").
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# onnxruntime 1.31 loads models up to IR version 13; onnx 1.23 writes 14 by default.
ORT_IR_VERSION = 9
QLINEAR_OPSET = 13

# int8 weights for which onnxruntime's u8 x s8 pair sums cannot saturate int16 on any x86-64 CPU.
ORT_EXACT_INT8_WEIGHTS = (-64, 63)

_ONNX_DTYPE = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8}


@dataclass
class QLinearConvCase:
    """One QLinearConv problem: integer tensors, float32 scales, zero points and conv attributes."""

    x: np.ndarray                     # [N][C][H][W] int8 or uint8
    w: np.ndarray                     # [K][C/group][R][S] int8 or uint8
    bias: np.ndarray                  # [K] int32
    x_scale: np.float32
    x_zero_point: int
    w_scale: np.ndarray               # float32, shape () per tensor or (K,) per channel
    w_zero_point: np.ndarray          # w.dtype, shape () or (K,)
    y_scale: np.float32
    y_zero_point: int
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)   # ONNX order: top, left, bottom, right
    dilations: tuple[int, int] = (1, 1)
    group: int = 1
    description: str = field(default="")

    @property
    def y_dtype(self) -> np.dtype:
        return self.x.dtype

    def requant_scale(self) -> np.ndarray:
        """Per-output-channel float32 scale x_scale*w_scale/y_scale, in the order the runtimes compute it."""
        w_scale = np.broadcast_to(self.w_scale, (self.w.shape[0],)).astype(np.float32)
        return (np.float32(self.x_scale) * w_scale) / np.float32(self.y_scale)


def qlinear_conv_model(case: QLinearConvCase) -> onnx.ModelProto:
    """A one-node QLinearConv model whose only graph input is x; everything else is an initializer."""
    y_dtype = case.y_dtype
    initializers = [
        numpy_helper.from_array(np.array(case.x_scale, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(case.x_zero_point, case.x.dtype), "x_zero_point"),
        numpy_helper.from_array(case.w, "w"),
        numpy_helper.from_array(np.asarray(case.w_scale, np.float32), "w_scale"),
        numpy_helper.from_array(np.asarray(case.w_zero_point, case.w.dtype), "w_zero_point"),
        numpy_helper.from_array(np.array(case.y_scale, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(case.y_zero_point, y_dtype), "y_zero_point"),
        numpy_helper.from_array(case.bias.astype(np.int32), "bias"),
    ]
    node = helper.make_node(
        "QLinearConv",
        ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point", "bias"],
        ["y"],
        strides=list(case.strides),
        pads=list(case.pads),
        dilations=list(case.dilations),
        group=case.group,
        kernel_shape=list(case.w.shape[2:]),
    )
    graph = helper.make_graph(
        [node],
        "qlinearconv",
        [helper.make_tensor_value_info("x", _ONNX_DTYPE[case.x.dtype], list(case.x.shape))],
        [helper.make_tensor_value_info("y", _ONNX_DTYPE[y_dtype], None)],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", QLINEAR_OPSET)])
    model.ir_version = ORT_IR_VERSION
    return model


def single_thread_session(model: onnx.ModelProto):
    """An onnxruntime CPU session pinned to one thread, as the benchmarks and comparisons require."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def run_qlinear_conv_ort(case: QLinearConvCase) -> np.ndarray:
    return single_thread_session(qlinear_conv_model(case)).run(None, {"x": case.x})[0]


def conv_output_size(size: int, kernel: int, stride: int, dilation: int, pad_before: int, pad_after: int) -> int:
    return (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


def random_qlinear_conv_case(rng: np.random.Generator, *, max_channels: int = 24, max_size: int = 14,
                             ort_exact: bool = False) -> QLinearConvCase:
    """A random QLinearConv covering per-tensor and per-channel scales, depthwise, grouped, strided,
    dilated, asymmetrically padded and odd-sized problems, int8 and uint8, with large biases.

    ``ort_exact`` draws int8 weights from ``ORT_EXACT_INT8_WEIGHTS``, where onnxruntime is exact on every CPU.
    """
    x_dtype = np.dtype(rng.choice([np.int8, np.uint8]))
    # onnxruntime accepts u8 x with s8 or u8 w, and s8 x with s8 w.
    w_dtype = np.dtype(np.int8) if (x_dtype == np.int8 or rng.random() < 0.7) else np.dtype(np.uint8)
    kind = rng.choice(["dense", "depthwise", "grouped"], p=[0.6, 0.25, 0.15])
    if kind == "depthwise":
        group = channels = out_channels = int(rng.integers(1, max_channels + 1))
    elif kind == "grouped":
        group = int(rng.integers(2, 5))
        channels = group * int(rng.integers(1, max(2, max_channels // group) + 1))
        out_channels = group * int(rng.integers(1, max(2, max_channels // group) + 1))
    else:
        group, channels, out_channels = 1, int(rng.integers(1, max_channels + 1)), int(rng.integers(1, max_channels + 1))
    while True:
        kernel = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        strides = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        dilations = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        pads = tuple(int(p) for p in rng.integers(0, 3, 4))
        height, width = int(rng.integers(1, max_size + 1)), int(rng.integers(1, max_size + 1))
        out_h = conv_output_size(height, kernel[0], strides[0], dilations[0], pads[0], pads[2])
        out_w = conv_output_size(width, kernel[1], strides[1], dilations[1], pads[1], pads[3])
        if out_h >= 1 and out_w >= 1:
            break
    x_info, w_info = np.iinfo(x_dtype), np.iinfo(w_dtype)
    x = rng.integers(x_info.min, x_info.max + 1, (1, channels, height, width), dtype=np.int64).astype(x_dtype)
    w_min, w_max = ORT_EXACT_INT8_WEIGHTS if (ort_exact and w_dtype == np.int8) else (w_info.min, w_info.max)
    w = rng.integers(w_min, w_max + 1, (out_channels, channels // group, *kernel), dtype=np.int64).astype(w_dtype)
    per_channel = bool(rng.random() < 0.5)
    if per_channel:
        w_scale = rng.uniform(0.0005, 0.05, out_channels).astype(np.float32)
        # onnxruntime needs a per-channel zero point of 0 for signed weights; unsigned may carry any.
        w_zero_point = np.zeros(out_channels, w_dtype)
    else:
        w_scale = np.array(rng.uniform(0.0005, 0.05), np.float32)
        w_zero_point = np.array(0 if w_dtype == np.int8 else int(rng.integers(0, 256)), w_dtype)
    bias_limit = int(rng.choice([2**10, 2**16, 2**26]))
    return QLinearConvCase(
        x=x,
        w=w,
        bias=rng.integers(-bias_limit, bias_limit, out_channels).astype(np.int32),
        x_scale=np.float32(rng.uniform(0.002, 0.1)),
        x_zero_point=int(rng.integers(x_info.min, x_info.max + 1)),
        w_scale=w_scale,
        w_zero_point=w_zero_point,
        y_scale=np.float32(rng.uniform(0.005, 1.0)),
        y_zero_point=int(rng.integers(x_info.min, x_info.max + 1)),
        strides=strides,
        pads=pads,  # type: ignore[arg-type]
        dilations=dilations,
        group=group,
        description=f"{kind} {x_dtype.name}x{w_dtype.name}{' w[' + str(w_min) + ',' + str(w_max) + ']' if w_dtype == np.int8 else ''} {'per-channel' if per_channel else 'per-tensor'} "
        f"C{channels} K{out_channels} {height}x{width} k{kernel} s{strides} d{dilations} p{pads}",
    )


def exact_qlinear_conv(case: QLinearConvCase) -> np.ndarray:
    """QLinearConv straight from its definition: int64 sums of (x - x_zp)(w - w_zp) over each window, then
    the float32 requant as onnxruntime orders it (fp32(acc + bias) * scale, round half to even, + y_zp, clamp).

    Deliberately written without the golden model's units so that it can judge the golden model and
    onnxruntime alike.
    """
    n, _, height, width = case.x.shape
    k, c_per_group, r_size, s_size = case.w.shape
    top, left, bottom, right = case.pads
    x = np.pad(case.x.astype(np.int64) - case.x_zero_point, ((0, 0), (0, 0), (top, bottom), (left, right)))
    w_zero_point = np.broadcast_to(np.asarray(case.w_zero_point, np.int64), (k,))
    w = case.w.astype(np.int64) - w_zero_point.reshape(k, 1, 1, 1)
    out_h = conv_output_size(height, r_size, case.strides[0], case.dilations[0], top, bottom)
    out_w = conv_output_size(width, s_size, case.strides[1], case.dilations[1], left, right)
    x_groups = x.reshape(n, case.group, c_per_group, *x.shape[2:])
    w_groups = w.reshape(case.group, k // case.group, c_per_group, r_size, s_size)
    acc = np.zeros((n, case.group, k // case.group, out_h, out_w), np.int64)
    for r in range(r_size):
        for s in range(s_size):
            row, col = r * case.dilations[0], s * case.dilations[1]
            window = x_groups[..., row:row + case.strides[0] * (out_h - 1) + 1:case.strides[0],
                              col:col + case.strides[1] * (out_w - 1) + 1:case.strides[1]]
            acc += np.einsum("ngchw,gkc->ngkhw", window, w_groups[..., r, s])
    total = acc.reshape(n, k, out_h, out_w) + case.bias.astype(np.int64).reshape(1, k, 1, 1)
    scaled = total.astype(np.float32) * case.requant_scale().reshape(1, k, 1, 1)
    info = np.iinfo(case.y_dtype)
    return np.clip(np.rint(scaled).astype(np.int64) + case.y_zero_point, info.min, info.max).astype(case.y_dtype)


def disagreement(golden: np.ndarray, reference: np.ndarray, exact: np.ndarray, reference_name: str,
                 *, limit: int = 5) -> str:
    """'' when all three agree; otherwise which side is wrong, with the first differing outputs side by side."""
    differ = (golden != exact) | (reference != exact)
    if not differ.any():
        return ""
    golden_wrong, reference_wrong = int(np.count_nonzero(golden != exact)), int(np.count_nonzero(reference != exact))
    if golden_wrong and not reference_wrong:
        verdict = f"the golden model is wrong on {golden_wrong} outputs ({reference_name} agrees with the exact value)"
    elif reference_wrong and not golden_wrong:
        verdict = (f"{reference_name} is wrong on {reference_wrong} outputs, not the golden model (which agrees "
                   f"with the exact value)")
    else:
        verdict = f"both are wrong: the golden model on {golden_wrong} outputs, {reference_name} on {reference_wrong}"
    rows = [f"index {tuple(int(i) for i in index)}: golden {int(golden[index])}, {reference_name} "
            f"{int(reference[index])}, exact {int(exact[index])}" for index in zip(*np.nonzero(differ))][:limit]
    return f"{verdict}; " + "; ".join(rows)


def static_quantization(model_path: Path, out_path: Path, images: np.ndarray, input_name: str, *,
                        quant_format: str = "QDQ", per_channel: bool = True, weight_type: str = "QInt8",
                        symmetric_weights: bool | None = None) -> Path:
    """``model_path`` through onnxruntime's own static quantization (uint8 activations, ``weight_type`` weights,
    symmetric or not as ``symmetric_weights`` says, else onnxruntime's default), calibrated on ``images`` one at
    a time; written to ``out_path``. Its advice to pre-process models is not printed."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter({input_name: image[None]} for image in images)

        def get_next(self):
            return next(self.batches, None)

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        options = {} if symmetric_weights is None else {"WeightSymmetric": symmetric_weights}
        quantize_static(str(model_path), str(out_path), Reader(), quant_format=QuantFormat[quant_format],
                        per_channel=per_channel, activation_type=QuantType.QUInt8,
                        weight_type=QuantType[weight_type], extra_options=options)
    finally:
        root.setLevel(level)
    return out_path
