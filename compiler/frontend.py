"""The hand-written front end for float (Conv, Relu)* GlobalAveragePool Flatten Gemm graphs.

It reads such an ONNX graph into a float model, calibrates it on images (max of each activation) and
quantizes it (uint8 activations, per-channel int8 weights, M/2^N requant) into conv layers for the NPU and
a fully connected head on the golden model. The demo runs its embedded model through it; the general ONNX
front end (any CNN, every calibration method) replaces it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx

from aipu.compiler.tiling import ConvLayer
from aipu.sim import golden
from aipu.sim.machine.arch import BIAS_DTYPE, DTYPE_NUMPY, DType
from aipu.sim.machine.isa import Rounding

_ACTIVATION_TYPE = DTYPE_NUMPY[DType.UINT8]   # zero point 0: every tensor is an image in [0, 1] or post-ReLU
_SYMMETRIC_TYPE = DTYPE_NUMPY[DType.INT8]     # weights and logits, in [-_SYMMETRIC_MAX, _SYMMETRIC_MAX] (127)
INPUT_LEVELS = int(np.iinfo(_ACTIVATION_TYPE).max)
_SYMMETRIC_MAX = int(np.iinfo(_SYMMETRIC_TYPE).max)


@dataclass(frozen=True)
class FloatConv:
    name: str
    w: np.ndarray            # [K, C, KH, KW]
    bias: np.ndarray         # [K]
    stride: int
    pad: int


@dataclass(frozen=True)
class FloatModel:
    """conv+ReLU layers, global average pooling, fully connected layer (logits = pooled @ fc_w.T + fc_b)."""

    convs: list[FloatConv]
    fc_weight: np.ndarray    # [classes, features]
    fc_bias: np.ndarray

    def activations(self, images: np.ndarray) -> list[np.ndarray]:
        outputs, x = [], images.astype(np.float64)
        for conv in self.convs:
            x = np.maximum(conv_forward(x, conv.w, conv.bias, conv.stride, conv.pad), 0.0)
            outputs.append(x)
        return outputs

    def logits(self, images: np.ndarray) -> np.ndarray:
        return self.activations(images)[-1].mean(axis=(2, 3)) @ self.fc_weight.T + self.fc_bias


def load_float_model(path: Path) -> FloatModel:
    """Read the embedded graph: (Conv, Relu)*, GlobalAveragePool, Flatten, Gemm(transB=1); anything else is refused."""
    model = onnx.load(path)
    weights = {init.name: onnx.numpy_helper.to_array(init).astype(np.float64) for init in model.graph.initializer}
    convs, nodes = [], list(model.graph.node)
    ops = [node.op_type for node in nodes]
    expected = ["Conv", "Relu"] * ((len(ops) - 3) // 2) + ["GlobalAveragePool", "Flatten", "Gemm"]
    if ops != expected:
        raise ValueError(f"{path}: the demo reads (Conv, Relu)* GlobalAveragePool Flatten Gemm graphs, got {ops}")
    for node in nodes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv":
            pads, strides = attrs.get("pads", [0] * 4), attrs.get("strides", [1, 1])
            if attrs.get("group", 1) != 1 or len(set(pads)) != 1 or strides[0] != strides[1]:
                raise ValueError(f"{path}: node {node.name}: only dense convs with uniform pads and strides")
            convs.append(FloatConv(node.name, weights[node.input[1]], weights[node.input[2]], strides[0], pads[0]))
        elif node.op_type == "Gemm" and not attrs.get("transB", 0):
            raise ValueError(f"{path}: node {node.name}: Gemm must have transB=1")
    gemm = nodes[-1]
    return FloatModel(convs, weights[gemm.input[1]], weights[gemm.input[2]])


@dataclass
class QuantizedModel:
    """The quantized network: conv layers for the NPU and a fully connected head on the golden model."""

    layers: list[ConvLayer]      # x = a calibration image (placeholder)
    input_scale: float
    feature_scale: float         # scale of the last conv output (and of its average pool)
    fc_weight: np.ndarray        # int8 [classes, features]
    fc_bias: np.ndarray          # BIAS_DTYPE
    fc_multiplier: np.ndarray
    fc_shift: np.ndarray

    def quantize_input(self, images: np.ndarray) -> np.ndarray:
        return np.clip(golden.round_half_away(images / self.input_scale), 0, INPUT_LEVELS).astype(_ACTIVATION_TYPE)

    def golden_features(self, x: np.ndarray) -> np.ndarray:
        """The conv trunk on the golden model, layer by layer."""
        for layer in self.layers:
            x = replace(layer, x=x).reference()
        return x

    def classify(self, features: np.ndarray) -> np.ndarray:
        """int8 logits: global average pool, int8 fully connected layer, requant (golden units)."""
        pooled = golden.global_avg_pool(features).reshape(features.shape[0], -1)
        acc = golden.matmul(pooled, np.ascontiguousarray(self.fc_weight.T))
        return golden.requantize(acc, bias=self.fc_bias, multiplier=self.fc_multiplier, shift=self.fc_shift,
                                 channel_axis=1, out_dtype=_SYMMETRIC_TYPE)


def _per_channel_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scale = np.abs(w).reshape(w.shape[0], -1).max(axis=1) / _SYMMETRIC_MAX
    shape = (-1,) + (1,) * (w.ndim - 1)
    quantized = np.clip(golden.round_half_away(w / scale.reshape(shape)), -_SYMMETRIC_MAX, _SYMMETRIC_MAX)
    return quantized.astype(_SYMMETRIC_TYPE), scale


def quantize_model(model: FloatModel, calibration: np.ndarray) -> QuantizedModel:
    """Post-training quantization calibrated on ``calibration`` images (max of each activation)."""
    input_scale = 1.0 / INPUT_LEVELS
    x_scale = input_scale
    x = np.clip(golden.round_half_away(calibration[:1] / input_scale), 0, INPUT_LEVELS).astype(_ACTIVATION_TYPE)
    layers = []
    for conv, activation in zip(model.convs, model.activations(calibration)):
        y_scale = float(activation.max()) / INPUT_LEVELS
        w_q, w_scale = _per_channel_int8(conv.w)
        multiplier, shift = golden.quantize_multiplier(x_scale * w_scale / y_scale)
        bias = golden.round_half_away(conv.bias / (x_scale * w_scale)).astype(BIAS_DTYPE)
        layers.append(ConvLayer(x=x, w=w_q, bias=bias, multiplier=multiplier, shift=shift, out_type=DType.UINT8,
                                rounding=Rounding.HALF_UP, stride=(conv.stride,) * 2, padding=(conv.pad,) * 4))
        x, x_scale = layers[-1].reference(), y_scale
    fc_q, fc_scale = _per_channel_int8(model.fc_weight)
    logit_scale = float(np.abs(model.logits(calibration)).max()) / _SYMMETRIC_MAX
    fc_multiplier, fc_shift = golden.quantize_multiplier(x_scale * fc_scale / logit_scale)
    return QuantizedModel(layers, input_scale, x_scale, fc_q,
                          golden.round_half_away(model.fc_bias / (x_scale * fc_scale)).astype(BIAS_DTYPE),
                          fc_multiplier, fc_shift)


def conv_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Dense 2-D convolution (NCHW), one einsum per kernel tap."""
    k = w.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (xp.shape[2] - k) // stride + 1
    ow = (xp.shape[3] - k) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            patch = xp[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            out += np.einsum("kc,nchw->nkhw", w[:, :, i, j], patch, optimize=True)
    return out + b.reshape(1, -1, 1, 1)
