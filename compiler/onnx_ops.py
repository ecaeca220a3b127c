"""ONNX operators expressed through the golden model's units.

This is the semantic bridge between an ONNX graph and the NPU: each function takes an ONNX node's
inputs and attributes and computes the node's result with the golden units only (conv2d, matmul,
requantize_float32, eltwise, max_pool2d, the requantizer's clamp). The conformance suite runs the
onnx package's own node test cases through it; the compiler lowers the same operators the same way.
QuantizeLinear/DequantizeLinear are the host-side boundary conversions (float <-> integer) and follow
the ONNX definition: y = saturate(round_half_even(x / scale) + zero_point), x = (y - zero_point) * scale.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx

from aipu.sim import golden
from aipu.sim.machine.arch import ACC_DTYPE

_INT_TYPES = (np.int8, np.uint8, np.int16, np.uint16)


class NotApplicable(Exception):
    """The node is outside what the NPU (or this mapping) implements; the message says why."""


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _conv_geometry(attrs: dict, kernel_hw: Sequence[int]) -> dict:
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise NotApplicable(f"auto_pad={attrs['auto_pad']!r}: the compiler resolves padding to explicit pads")
    if len(kernel_hw) != 2:
        raise NotApplicable(f"{len(kernel_hw)}-D convolution: the NPU convolves in 2-D")
    pads = attrs.get("pads", [0, 0, 0, 0])
    return {
        "stride": tuple(attrs.get("strides", (1, 1))),
        "dilation": tuple(attrs.get("dilations", (1, 1))),
        # ONNX pads are [top, left, bottom, right], the golden order.
        "padding": tuple(pads),
        "groups": int(attrs.get("group", 1)),
    }


def _scalar_zero_point(value, name: str) -> int:
    if value is None:
        return 0
    if np.size(value) != 1:
        raise NotApplicable(f"{name} with {np.size(value)} entries: the NPU takes one activation zero point")
    return int(np.asarray(value).reshape(()))


def _weight_zero_point(value, out_channels: int):
    if value is None:
        return 0
    value = np.asarray(value)
    return int(value.reshape(())) if value.size == 1 else value.reshape(out_channels)


def conv_integer(node: onnx.NodeProto, x, w, x_zero_point=None, w_zero_point=None) -> list[np.ndarray]:
    attrs = _attrs(node)
    acc = golden.conv2d(x, w, x_zero_point=_scalar_zero_point(x_zero_point, "x_zero_point"),
                        w_zero_point=_weight_zero_point(w_zero_point, w.shape[0]),
                        **_conv_geometry(attrs, w.shape[2:]))
    return [acc]


def matmul_integer(node: onnx.NodeProto, a, b, a_zero_point=None, b_zero_point=None) -> list[np.ndarray]:
    acc = golden.matmul(a, b, a_zero_point=_scalar_zero_point(a_zero_point, "a_zero_point"),
                        b_zero_point=_weight_zero_point(b_zero_point, b.shape[-1]))
    return [acc]


def _float32_scale(value, name: str) -> np.ndarray:
    value = np.asarray(value)
    if value.dtype not in (np.float32, np.float16):
        raise NotApplicable(f"{name} is {value.dtype.name}: the requantizer's scale register is float32")
    return value.astype(np.float32)  # float16 -> float32 is exact


def qlinear_conv(node: onnx.NodeProto, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                 y_zero_point, bias=None) -> list[np.ndarray]:
    attrs = _attrs(node)
    acc = golden.conv2d(x, w, x_zero_point=_scalar_zero_point(x_zero_point, "x_zero_point"),
                        w_zero_point=_weight_zero_point(w_zero_point, w.shape[0]),
                        **_conv_geometry(attrs, w.shape[2:]))
    scale = golden.onnx_requant_scale(_float32_scale(x_scale, "x_scale"), _float32_scale(w_scale, "w_scale"),
                                      _float32_scale(y_scale, "y_scale"))
    y_dtype = np.asarray(y_zero_point).dtype
    return [golden.requantize_float32(acc, bias=bias, scale=scale.reshape(-1) if scale.size > 1 else scale.reshape(()),
                                      out_zero_point=_scalar_zero_point(y_zero_point, "y_zero_point"),
                                      out_dtype=y_dtype, channel_axis=1)]


def qlinear_matmul(node: onnx.NodeProto, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                   y_zero_point) -> list[np.ndarray]:
    acc = golden.matmul(a, b, a_zero_point=_scalar_zero_point(a_zero_point, "a_zero_point"),
                        b_zero_point=_weight_zero_point(b_zero_point, b.shape[-1]))
    scale = golden.onnx_requant_scale(_float32_scale(a_scale, "a_scale"), _float32_scale(b_scale, "b_scale"),
                                      _float32_scale(y_scale, "y_scale"))
    y_dtype = np.asarray(y_zero_point).dtype
    return [golden.requantize_float32(acc, scale=scale.reshape(-1) if scale.size > 1 else scale.reshape(()),
                                      out_zero_point=_scalar_zero_point(y_zero_point, "y_zero_point"),
                                      out_dtype=y_dtype, channel_axis=acc.ndim - 1)]


def _broadcast_quant_param(param, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """Scale / zero point of QuantizeLinear/DequantizeLinear broadcast to ``shape`` (per tensor, axis, block)."""
    param = np.asarray(param)
    if param.size == 1 and block_size == 0:
        return param.reshape(())
    axis = axis % len(shape)
    if block_size:
        param = np.repeat(param, block_size, axis=axis)
        param = np.take(param, np.arange(shape[axis]), axis=axis)
        return param
    if param.ndim != 1 or param.shape[0] != shape[axis]:
        raise ValueError(f"per-axis parameter of shape {param.shape} does not match axis {axis} of {shape}")
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return param.reshape(view)


def _quant_attrs(node: onnx.NodeProto) -> tuple[int, int]:
    attrs = _attrs(node)
    if attrs.get("precision", 0):
        raise NotApplicable("precision attribute: the boundary conversion divides in the input's own float type")
    return int(attrs.get("axis", 1)), int(attrs.get("block_size", 0))


def quantize_linear(node: onnx.NodeProto, x, y_scale, y_zero_point=None) -> list[np.ndarray]:
    attrs = _attrs(node)
    if y_zero_point is not None:
        out_dtype = np.asarray(y_zero_point).dtype
    elif "output_dtype" in attrs:
        out_dtype = onnx.helper.tensor_dtype_to_np_dtype(attrs["output_dtype"])
    else:
        out_dtype = np.dtype(np.uint8)
    if out_dtype.type not in _INT_TYPES:
        raise NotApplicable(f"output type {out_dtype}: the NPU stores 8- and 16-bit integers only")
    if np.asarray(x).dtype != np.float32 or np.asarray(y_scale).dtype != np.float32:
        raise NotApplicable(f"{np.asarray(x).dtype}/{np.asarray(y_scale).dtype} input: boundary conversion is float32")
    axis, block_size = _quant_attrs(node)
    scale = _broadcast_quant_param(y_scale, x.shape, axis, block_size)
    zero_point = 0 if y_zero_point is None else _broadcast_quant_param(y_zero_point, x.shape, axis, block_size)
    info = np.iinfo(out_dtype)
    # Quotient in float32, rounded half to even; bounded first so the integer conversion is defined.
    quotient = np.clip(np.asarray(x, np.float32) / scale, -2.0 ** 40, 2.0 ** 40)
    return [np.clip(np.rint(quotient).astype(np.int64) + zero_point, info.min, info.max).astype(out_dtype)]


def dequantize_linear(node: onnx.NodeProto, x, x_scale, x_zero_point=None) -> list[np.ndarray]:
    x = np.asarray(x)
    if x.dtype.type not in _INT_TYPES + (np.int32,):
        raise NotApplicable(f"input type {x.dtype}: the NPU stores 8-, 16- and 32-bit integers only")
    if np.asarray(x_scale).dtype != np.float32:
        raise NotApplicable(f"{np.asarray(x_scale).dtype} scale: boundary conversion is float32")
    axis, block_size = _quant_attrs(node)
    scale = _broadcast_quant_param(x_scale, x.shape, axis, block_size)
    zero_point = 0 if x_zero_point is None else _broadcast_quant_param(x_zero_point, x.shape, axis, block_size)
    # (x - zp) is an exact integer below 2**24 in magnitude for 8/16-bit data, so float32 is exact there.
    return [((x.astype(np.int64) - zero_point).astype(np.float32) * scale).astype(np.float32)]


def _identity_eltwise(op: str) -> Callable:
    def run(node: onnx.NodeProto, a, b) -> list[np.ndarray]:
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype != b.dtype or a.dtype.type not in (np.int8, np.uint8):
            raise NotApplicable(f"{a.dtype}/{b.dtype} operands: the elementwise unit takes int8/uint8 pairs")
        unit = (1, 1) if op != "mul" else 1
        zero = (0, 0) if op != "mul" else 0
        out, saturated = golden.eltwise(a, b, op, multiplier=unit, shift=zero, out_dtype=a.dtype, return_saturated=True)
        if saturated:
            # ONNX integer arithmetic wraps; the NPU saturates. Both agree only when nothing overflows.
            raise NotApplicable(f"{saturated} results overflow {a.dtype}: ONNX wraps where the NPU saturates")
        return [out]
    return run


def max_pool(node: onnx.NodeProto, x) -> list[np.ndarray]:
    attrs = _attrs(node)
    if attrs.get("ceil_mode", 0):
        raise NotApplicable("ceil_mode=1: the compiler pads explicitly instead")
    if len(node.output) > 1:
        raise NotApplicable("MaxPool indices output: the pooling unit returns values only")
    kernel = tuple(attrs["kernel_shape"])
    geometry = _conv_geometry(attrs, kernel)
    return [golden.max_pool2d(x, kernel, stride=geometry["stride"], padding=geometry["padding"],
                              dilation=geometry["dilation"])]


def clip(node: onnx.NodeProto, x, lo=None, hi=None) -> list[np.ndarray]:
    """Clip of an 8-bit tensor: the requantizer's clamp stage with M = 1, N = 0 (an exact pass-through)."""
    x = np.asarray(x)
    if x.dtype.type not in (np.int8, np.uint8):
        raise NotApplicable(f"{x.dtype} input: the requantizer clamps 8-bit outputs")
    return [golden.requantize(x.astype(ACC_DTYPE), multiplier=1, shift=0, qmin=None if lo is None else int(lo),
                              qmax=None if hi is None else int(hi), out_dtype=x.dtype, channel_axis=0)]


#: ONNX op_type -> golden implementation. Each takes (node, *inputs) and returns the outputs.
ONNX_OPS: dict[str, Callable] = {
    "ConvInteger": conv_integer,
    "MatMulInteger": matmul_integer,
    "QLinearConv": qlinear_conv,
    "QLinearMatMul": qlinear_matmul,
    "QuantizeLinear": quantize_linear,
    "DequantizeLinear": dequantize_linear,
    "Add": _identity_eltwise("add"),
    "Sub": _identity_eltwise("sub"),
    "Mul": _identity_eltwise("mul"),
    "Max": _identity_eltwise("max"),
    "Min": _identity_eltwise("min"),
    "MaxPool": max_pool,
    "Clip": clip,
}


#: Operators with a specific reason why the NPU does not run them.
UNSUPPORTED_REASONS: dict[str, str] = {
    "DynamicQuantizeLinear": "computes its scale from the data at run time; the NPU uses calibrated static scales",
    "Constant": "constants are folded into the DRAM image by the compiler, not executed",
}


def run_node(node: onnx.NodeProto, inputs: Sequence) -> list[np.ndarray]:
    """Evaluate one ONNX node with the golden units; raises NotApplicable with the reason if it can't."""
    try:
        implementation = ONNX_OPS[node.op_type]
    except KeyError:
        reason = UNSUPPORTED_REASONS.get(node.op_type, "no NPU unit implements it")
        raise NotApplicable(f"{node.op_type}: {reason}") from None
    # Optional inputs left empty in the node ('') arrive as None.
    args = [None if name == "" else value for name, value in zip(node.input, inputs)]
    return implementation(node, *args)
