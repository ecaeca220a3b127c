"""The quantized IR: integer operators with every parameter, and its reference interpreter on ``sim.golden``.

A :class:`QModel` is what the quantizer makes of a float graph and what lowering turns into commands: a list
of operators in topological order over integer tensors (:class:`QTensor`: shape, int8/uint8/int16, scale and
zero point, real = scale * (q - zero_point); an ``int4`` tensor holds codes -8..7 as int8). Each operator's :meth:`run` is the golden model's arithmetic,
called directly, so the lowered command program must reproduce it bit for bit (tests compare the two).
Float enters and leaves only at the boundary: :meth:`QModel.quantize_inputs` and :meth:`QModel.dequantize`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from aipu.sim import golden
from aipu.sim.machine.arch import INT4_MAX, INT4_MIN

ROUNDINGS = golden.ROUNDING_MODES


@dataclass(frozen=True)
class QTensor:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    scale: float
    zero_point: int
    onnx_rounding: bool = False      # quantized as ONNX QuantizeLinear does (a pre-quantized model's input)
    int4: bool = False               # INT4 (compiler.activation_formats): int8 codes -8..7, stored two a byte

    @property
    def limits(self) -> tuple[int, int]:
        """The least and the greatest code: INT4's -8..7, else the dtype's range."""
        if self.int4:
            return INT4_MIN, INT4_MAX
        info = np.iinfo(self.dtype)
        return int(info.min), int(info.max)

    @property
    def type_name(self) -> str:
        """What reports call the type: "int4", else the dtype's name."""
        return "int4" if self.int4 else self.dtype.name

    def quantize(self, real: np.ndarray) -> np.ndarray:
        """round_half_away(real / scale) + zero_point, clamped to the type (docs/arithmetic.md D3); with
        ``onnx_rounding`` ONNX's QuantizeLinear: float32 division, round half to even."""
        if self.onnx_rounding:
            q = np.rint(np.asarray(real, np.float32) / np.float32(self.scale)).astype(np.int64) + self.zero_point
        else:
            q = golden.round_half_away(np.asarray(real, np.float64) / self.scale) + self.zero_point
        return np.clip(q, *self.limits).astype(self.dtype)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return (q.astype(np.float64) - self.zero_point) * self.scale


@dataclass(frozen=True)
class Requant:
    """The output stage of a MAC operator: per-channel multiplier and shift (docs/arithmetic.md §4.1-4.2, with
    an optional second pair for negative sums), or a per-channel float32 ``scale`` (§4.5, onnxruntime's
    arithmetic, for pre-quantized models); output zero point, clamp (fused ReLU/Clip) and rounding."""

    multiplier: np.ndarray | None
    shift: np.ndarray | None
    out_zero_point: int
    qmin: int
    qmax: int
    rounding: str = "half_up"
    negative_multiplier: np.ndarray | None = None
    negative_shift: np.ndarray | None = None
    scale: np.ndarray | None = None
    second_multiplier: np.ndarray | None = None     # dual INT4 weights: the second plane's M2 (shift shared)

    def apply(self, acc: np.ndarray, bias: np.ndarray, out_dtype: np.dtype, channel_axis: int = 1,
              second: np.ndarray | None = None) -> np.ndarray:
        """The output of accumulators ``acc`` (and, with dual weights, the second plane's ``second``)."""
        if self.second_multiplier is not None:
            return golden.requantize_dual(acc, second, bias=bias, multiplier=self.multiplier,
                                          second_multiplier=self.second_multiplier, shift=self.shift,
                                          out_zero_point=self.out_zero_point, qmin=self.qmin, qmax=self.qmax,
                                          rounding=self.rounding, channel_axis=channel_axis, out_dtype=out_dtype)
        if self.scale is not None:
            return golden.requantize_float32(acc, bias=bias, scale=self.scale, out_zero_point=self.out_zero_point,
                                             qmin=self.qmin, qmax=self.qmax, channel_axis=channel_axis,
                                             out_dtype=out_dtype)
        return golden.requantize(acc, bias=bias, multiplier=self.multiplier, shift=self.shift,
                                 out_zero_point=self.out_zero_point, qmin=self.qmin, qmax=self.qmax,
                                 rounding=self.rounding, channel_axis=channel_axis, out_dtype=out_dtype,
                                 negative_multiplier=self.negative_multiplier, negative_shift=self.negative_shift)


@dataclass(frozen=True)
class QConv:
    """Conv2d (groups, dilation, explicit pads) or fully connected (a 2-D input as [N, F, 1, 1] with a 1x1
    kernel), then the requantizer. Weights int8 [K, C/G, KH, KW] with zero point ``w_zero_point``.

    A transposed convolution is its conv form (docs/compiler.md §3): ``upsample`` - 1 input zero points between
    neighbouring input pixels, then a stride-1 conv with the flipped kernel; ``padding`` may then be negative
    (a crop of the upsampled input)."""

    name: str
    x: str
    y: str
    w: np.ndarray
    bias: np.ndarray
    requant: Requant
    w_zero_point: int = 0
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    upsample: tuple[int, int] = (1, 1)
    weight_format: str = "int8"      # compiler.weight_formats: how ``w`` was quantized ("int4": codes -8..7)
    codebook: np.ndarray | None = None   # codebook:K: the sorted distinct int8 entries ``w`` takes its values from
    w_second: np.ndarray | None = None   # int4-dual: the second INT4 plane (``w`` the first), scaled by the
                                         # requantizer's second multiplier (docs/arithmetic.md §4.7)
    circulant: tuple[int, np.ndarray] | None = None   # (L, ±1 per input): ``w`` is C·diag(s), C block-circulant
                                                      # (T/AI 115.1-2021 §8.4.2), expanded on chip by LOAD

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.x,)

    def run(self, values: dict[str, np.ndarray], tensors: dict[str, QTensor]) -> np.ndarray:
        x, spec = values[self.x], tensors[self.x]
        flat = x.ndim == 2
        padding = self.padding
        if self.upsample != (1, 1):
            x, padding = upsampled(x, self.upsample, padding, spec.zero_point)
        x = x.reshape(*x.shape, 1, 1) if flat else x
        acc, second = (None if w is None else golden.conv2d(
            x, w, x_zero_point=spec.zero_point, w_zero_point=self.w_zero_point, stride=self.stride, padding=padding,
            dilation=self.dilation, groups=self.groups) for w in (self.w, self.w_second))
        y = self.requant.apply(acc, self.bias, tensors[self.y].dtype, second=second)
        return y.reshape(y.shape[:2]) if flat else y


def upsampled(x: np.ndarray, factor: tuple[int, int], padding: tuple[int, int, int, int],
              fill: int) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """A transposed convolution's input in its conv form: ``factor - 1`` copies of ``fill`` (the input zero
    point, which adds nothing to a sum) between neighbours, the padding's negative entries cropped off. Returns
    that input and the padding that remains (each entry >= 0)."""
    n, c, h, w = x.shape
    (fh, fw), (top, left, bottom, right) = factor, padding
    z = np.full((n, c, fh * (h - 1) + 1, fw * (w - 1) + 1), fill, x.dtype)
    z[:, :, ::fh, ::fw] = x
    z = z[:, :, max(0, -top):z.shape[2] - max(0, -bottom), max(0, -left):z.shape[3] - max(0, -right)]
    return z, (max(0, top), max(0, left), max(0, bottom), max(0, right))


@dataclass(frozen=True)
class QLut:
    """An activation by table: an 8-bit input indexes it (docs/arithmetic.md §6.1, out = table[raw input
    byte]); an int16 input interpolates between its 2^k + 1 entries, spaced 2^index_shift apart over the whole
    int16 range (§6.2), the result clamped to the output type."""

    name: str
    x: str
    y: str
    table: np.ndarray
    index_shift: int | None = None          # int16 input only

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.x,)

    def run(self, values: dict[str, np.ndarray], tensors: dict[str, QTensor]) -> np.ndarray:
        if self.index_shift is None:
            return golden.lut8(values[self.x], self.table)
        return golden.lut16(values[self.x], self.table, index_shift=self.index_shift,
                            out_dtype=tensors[self.y].dtype)


@dataclass(frozen=True)
class QSoftmax:
    """Softmax over ``axes`` (docs/arithmetic.md §6.4): the exp table for the input's scale, the output scale's
    reciprocal as M / 2^N, the output clamp."""

    name: str
    x: str
    y: str
    axes: tuple[int, ...]
    table: np.ndarray
    multiplier: int
    shift: int
    qmin: int
    qmax: int

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.x,)

    def length(self, shape: tuple[int, ...]) -> int:
        return int(np.prod([shape[axis] for axis in self.axes]))

    def run(self, values: dict[str, np.ndarray], tensors: dict[str, QTensor]) -> np.ndarray:
        x, y = values[self.x], tensors[self.y]
        rest = [axis for axis in range(x.ndim) if axis not in self.axes]
        moved = x.transpose(*rest, *self.axes)
        rows = golden.softmax(moved.reshape(-1, self.length(x.shape)), self.table, multiplier=self.multiplier,
                              shift=self.shift, out_zero_point=y.zero_point, qmin=self.qmin, qmax=self.qmax,
                              out_dtype=y.dtype)
        return np.ascontiguousarray(rows.reshape(moved.shape).transpose(np.argsort([*rest, *self.axes])))


@dataclass(frozen=True)
class QPool:
    """Max or average pooling (docs/arithmetic.md §7); the output has the input's quantization."""

    name: str
    x: str
    y: str
    mode: str                                   # "max", "avg" or "global_avg"
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    count_include_pad: bool = False
    rounding: str = "half_up"

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.x,)

    def run(self, values: dict[str, np.ndarray], tensors: dict[str, QTensor]) -> np.ndarray:
        x, zero_point = values[self.x], tensors[self.x].zero_point
        if self.mode == "max":
            return golden.max_pool2d(x, self.kernel, stride=self.stride, padding=self.padding, dilation=self.dilation)
        if self.mode == "avg":
            return golden.avg_pool2d(x, self.kernel, stride=self.stride, padding=self.padding,
                                     count_include_pad=self.count_include_pad, x_zero_point=zero_point,
                                     rounding=self.rounding)
        return golden.global_avg_pool(x, x_zero_point=zero_point, rounding=self.rounding)


@dataclass(frozen=True)
class QEltwise:
    """a (op) b with numpy broadcasting (docs/arithmetic.md §8.1-8.2); ``b`` may name a constant."""

    name: str
    a: str
    b: str
    y: str
    op: str                                     # add, sub, max, min, mul
    multiplier: int | tuple[int, int]
    shift: int | tuple[int, int]
    qmin: int
    qmax: int
    rounding: str = "half_up"

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.a, self.b)

    def run(self, values: dict[str, np.ndarray], tensors: dict[str, QTensor]) -> np.ndarray:
        a, b, y = tensors[self.a], tensors[self.b], tensors[self.y]
        return golden.eltwise(values[self.a], values[self.b], self.op, multiplier=self.multiplier, shift=self.shift,
                              a_zero_point=a.zero_point, b_zero_point=b.zero_point, out_zero_point=y.zero_point,
                              qmin=self.qmin, qmax=self.qmax, out_dtype=y.dtype, rounding=self.rounding)


@dataclass(frozen=True)
class QConcat:
    """Concatenation of requantized inputs (docs/arithmetic.md §8.3)."""

    name: str
    xs: tuple[str, ...]
    y: str
    axis: int
    multipliers: tuple[int, ...]
    shifts: tuple[int, ...]
    rounding: str = "half_up"

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.xs

    def run(self, values: dict[str, np.ndarray], tensors: dict[str, QTensor]) -> np.ndarray:
        y = tensors[self.y]
        return golden.concat([values[x] for x in self.xs], axis=self.axis,
                             zero_points=[tensors[x].zero_point for x in self.xs], multipliers=list(self.multipliers),
                             shifts=list(self.shifts), out_zero_point=y.zero_point, out_dtype=y.dtype,
                             rounding=self.rounding)


@dataclass(frozen=True)
class QLayout:
    """Data movement only (Reshape, Flatten, Squeeze, Unsqueeze, Transpose, nearest Resize, Pad): the
    quantization passes through."""

    name: str
    x: str
    y: str
    permutation: tuple[int, ...] | None = None  # Transpose; otherwise a reshape to the output's shape
    gather: np.ndarray | None = None            # or: each output element's flat input index (NCHW order)
    fill: int = 0                               # the code of gather entries -1 (a constant Pad's value)

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.x,)

    def run(self, values: dict[str, np.ndarray], tensors: dict[str, QTensor]) -> np.ndarray:
        x = values[self.x]
        if self.permutation is not None:
            return np.ascontiguousarray(x.transpose(self.permutation))
        if self.gather is not None:
            return np.append(x.reshape(-1), x.dtype.type(self.fill))[self.gather].reshape(tensors[self.y].shape)
        return x.reshape(tensors[self.y].shape)


QOp = QConv | QLut | QSoftmax | QPool | QEltwise | QConcat | QLayout


@dataclass
class QModel:
    """Quantized operators over quantized tensors; ``constants`` are integer tensors operators read (e.g. an
    eltwise operand given in the model), ``inputs``/``outputs`` name the boundary tensors."""

    tensors: dict[str, QTensor]
    ops: list[QOp]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)   # choices the quantizer made that a user should know of

    def quantize_inputs(self, real: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: self.tensors[name].quantize(real[name]) for name in self.inputs}

    def run(self, quantized_inputs: dict[str, np.ndarray], *, keep: bool = False) -> dict[str, np.ndarray]:
        """Every operator on the golden model. Returns the outputs, or with ``keep`` every tensor."""
        values = {**self.constants, **quantized_inputs}
        for op in self.ops:
            values[op.y] = op.run(values, self.tensors)
        return values if keep else {name: values[name] for name in self.outputs}

    def dequantize(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: self.tensors[name].dequantize(values[name]) for name in self.outputs}

    def run_float(self, real: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Float in, float out: quantize the inputs, run, dequantize the outputs."""
        return self.dequantize(self.run(self.quantize_inputs(real)))


def summed_planes(tensors: dict[str, QTensor], ops: list, name: str, x: QTensor, y: QTensor, sum_planes) -> None:
    """A sum over whole planes of any size, as data movement around one 1x1 conv: ``x`` [N, C, H, W] is
    gathered to [N, H·W, C, 1] (the plane on the channel axis, which a conv accumulates in chunks at any
    size), ``sum_planes(planes, sums)`` adds the conv that sums it into [N, 1, C, 1], and that is gathered
    back to ``y`` [N, C, 1, 1]. The new tensors go into ``tensors``, the ops onto ``ops``."""
    n, c, h, w = x.shape
    planes, sums = f"{name}/planes", f"{name}/plane_sums"
    gather = np.arange(n * c * h * w).reshape(n, c, h * w).transpose(0, 2, 1)[..., None]
    tensors[planes] = replace(x, name=planes, shape=gather.shape)
    ops.append(QLayout(planes, x.name, planes, gather=gather.reshape(-1)))
    tensors[sums] = replace(y, name=sums, shape=(n, 1, c, 1))
    sum_planes(tensors[planes], tensors[sums])
    ops.append(QLayout(f"{name}/channels", sums, y.name, permutation=(0, 2, 1, 3)))
