"""Pre-quantized ONNX models, as onnxruntime.quantization writes them, to a :class:`~aipu.compiler.qir.QModel`
with every scale and zero point kept exactly (docs/compiler.md §6).

Both forms are read: QOperator (QLinearConv, QLinearMatMul, onnxruntime's QGemm, QLinearGlobalAveragePool,
QLinearAveragePool, QLinearAdd, QLinearMul, QLinearConcat, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax,
and pooling, resizing or reshaping of an integer tensor) and QDQ (a float operator whose inputs are
DequantizeLinear outputs and whose only reader is a QuantizeLinear). The MAC operators (Conv, ConvTranspose,
Gemm, MatMul) requantize in the FLOAT32 mode with onnxruntime's scale, ``float32(float32(x_scale * w_scale) /
y_scale)`` (D12), so each layer equals onnxruntime's QLinearConv bit for bit; a global average pool, and an
average pool with its own output scale whose windows all count the whole kernel, is a depthwise conv of ones
with MLAS's scale
``x_scale / (y_scale * kernel size)`` in float32 (exact, where averaging and then requantizing is not).
Every other operator takes the quantizer's integer rule (compiler/quantize.py) with the quantization the
model gives its output: element-wise multipliers M / 2^N, tables, softmax; where the rule keeps the input's
quantization (pooling, Resize, Pad, reshapes) and the model's output has another, a rescale follows. These
are within a step or two of onnxruntime's float arithmetic, not bit-exact (docs/compiler.md §6). uint8
weights are shifted by 128 with their zero point (D4). The model's input is quantized as ONNX's
QuantizeLinear does; its outputs are the tensors the final DequantizeLinear nodes read.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from aipu.compiler.graph import CONTRIB_STANDARD_FORMS, Graph, Node, contrib_standard_form
from aipu.compiler.normalize import conv_form
from aipu.compiler.qir import QConcat, QConv, QLayout, QModel, QTensor, Requant, summed_planes
from aipu.compiler.quantize import Quantizer, QuantOptions, check_accumulator
from aipu.sim import golden
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import KERNEL_BITS

_MAC_OPS = ("QLinearConv", "QLinearMatMul", "QGemm", "QLinearGlobalAveragePool")
# onnxruntime's other quantized operators: the float operator they quantize takes the quantizer's rules
_QLINEAR_OPS = (*(op for op in CONTRIB_STANDARD_FORMS if op not in _MAC_OPS), "QLinearConcat")
QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", *_MAC_OPS, *_QLINEAR_OPS})
# operators whose integer rule keeps the input's quantization: a different output quantization is a rescale
_KEEPS_QUANTIZATION = ("MaxPool", "AveragePool", "Pad", "Resize", "Flatten", "Reshape", "Squeeze", "Unsqueeze",
                       "Transpose")


def is_prequantized(graph: Graph) -> bool:
    return any(node.op in QUANTIZED_OPS for node in graph.nodes)


class _GivenQuantization(Quantizer):
    """The quantizer's per-operator integer rules, each output's quantization given by the model."""

    def __init__(self, graph: Graph, tensors: dict[str, QTensor], ops: list, constants: dict[str, np.ndarray]):
        super().__init__(graph, {}, QuantOptions())
        self.tensors, self.ops, self.constants = tensors, ops, constants
        self.given: dict[str, QTensor] = {}

    def activation(self, name: str, shape: tuple[int, ...] | None = None) -> QTensor:
        return self.given[name]


class _Importer:
    def __init__(self, graph: Graph):
        self.graph = replace(graph, shapes=dict(graph.shapes))     # a rescaled operator adds its inner tensor
        self.tensors: dict[str, QTensor] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.alias: dict[str, str] = {}          # a QuantizeLinear of a graph input, or a reshape, -> its tensor
        self.real_of: dict[str, str] = {}        # a DequantizeLinear output (float) -> the integer tensor it reads
        self.ops: list = []
        self.inputs: list[str] = []
        self.producer, self.consumers = graph.producer(), graph.consumers()
        self.consumed: set[str] = set()
        self.rules = _GivenQuantization(self.graph, self.tensors, self.ops, self.constants)

    # --- values ------------------------------------------------------------------------------------------
    def resolve(self, name: str) -> str:
        """The integer tensor an input name stands for (a quantized tensor, or a float one that is only the
        DequantizeLinear of one)."""
        name = self.real_of.get(name, name)
        return self.alias.get(name, name)

    def constant(self, name: str) -> np.ndarray:
        if name not in self.graph.constants:
            raise InputError(f"tensor {name!r}", "computed", "a constant (weights and quantization parameters)")
        return np.asarray(self.graph.constants[name])

    def dequantized_constant(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(integers, scale, zero point) of a constant read through DequantizeLinear, or given as integers."""
        node = self.producer.get(name)
        if node is not None and node.op == "DequantizeLinear":
            integers = self.constant(node.inputs[0])
            zero = (self.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2]
                    else np.zeros((), integers.dtype))
            return integers, self.constant(node.inputs[1]).astype(np.float32), zero
        raise InputError(f"tensor {name!r}", "float weights", "integers read through DequantizeLinear")

    def output_tensor(self, name: str, scale, zero_point) -> QTensor:
        self.tensors[name] = _tensor_spec(name, self.graph.shapes[name], scale, zero_point)
        return self.tensors[name]

    # --- the walk ----------------------------------------------------------------------------------------
    def run(self) -> QModel:
        for node in self.graph.nodes:
            if node.name in self.consumed:
                continue
            try:
                self.visit(node)
            except InputError as error:
                raise error.within(f"node {node.name!r} ({node.op})") from None
            except (ValueError, OverflowError) as exc:     # a value the golden model's checks refuse
                raise InputError(f"node {node.name!r} ({node.op})", "quantization", str(exc)) from None
        outputs = []
        for name in self.graph.outputs:
            source = self.resolve(name)
            if source not in self.tensors:
                raise InputError("graph output", name, "the DequantizeLinear of a quantized tensor")
            outputs.append(self.named_as_output(source, name))
        return QModel(self.tensors, self.ops, tuple(self.inputs), tuple(outputs), self.constants)

    def named_as_output(self, source: str, name: str) -> str:
        """The integer tensor behind graph output ``name`` takes that name (the manifest and `aipu run` then
        speak of "logits", not of an exporter's internal tensor), unless another operator reads it too."""
        readers = [op for op in self.ops if source in op.inputs]
        producers = [index for index, op in enumerate(self.ops) if op.y == source]
        if readers or not producers or name in self.tensors:
            return source
        index = producers[0]
        self.ops[index] = replace(self.ops[index], y=name)
        self.tensors[name] = replace(self.tensors.pop(source), name=name)
        return name

    def visit(self, node: Node) -> None:
        op = node.op
        if op == "QuantizeLinear":
            self.quantize_input(node)
        elif op == "DequantizeLinear":
            if node.inputs[0] not in self.graph.constants:
                self.real_of[node.outputs[0]] = self.resolve(node.inputs[0])
        elif op in _MAC_OPS:
            self.qoperator(node)
        elif op in _QLINEAR_OPS:
            self.qlinear(node)
        elif op in _KEEPS_QUANTIZATION and node.inputs[0] not in self.real_of and self.resolve(node.inputs[0]) in \
                self.tensors:                            # pooling, a resize or a reshape of an integer tensor
            x = self.tensors[self.resolve(node.inputs[0])]
            y = node.outputs[0]
            self.island(replace(node, inputs=(x.name, *node.inputs[1:])),
                        replace(x, name=y, shape=self.graph.shapes[y], onnx_rounding=False))
        else:
            self.qdq(node)

    def quantize_input(self, node: Node) -> None:
        x = node.inputs[0]
        if x not in self.graph.inputs:
            raise InputError("QuantizeLinear input", x, "a graph input (inside the graph only after a quantized "
                                                       "operator, in the QDQ form)")
        spec = self.output_tensor(node.outputs[0], self.constant(node.inputs[1]), self.constant(node.inputs[2]))
        del self.tensors[spec.name]
        self.tensors[x] = QTensor(x, self.graph.shapes[x], spec.dtype, spec.scale, spec.zero_point, onnx_rounding=True)
        self.alias[node.outputs[0]] = x
        self.inputs.append(x)

    def qoperator(self, node: Node) -> None:
        i = node.inputs
        self.operand(i[0], i[1], i[2])
        if node.op == "QLinearConv":
            bias = self.constant(i[8]) if len(i) > 8 and i[8] else None
            self.conv(node, i[0], (self.constant(i[3]), self.constant(i[4]), self.constant(i[5])), bias,
                      node.outputs[0], self.constant(i[6]), self.constant(i[7]))
        elif node.op == "QLinearMatMul":
            self.fully_connected(node, i[0], (self.constant(i[3]), self.constant(i[4]), self.constant(i[5])), None,
                                 node.outputs[0], self.constant(i[6]), self.constant(i[7]), transposed=False)
        elif node.op == "QGemm":
            if len(i) < 9 or not i[7] or not i[8]:
                raise InputError("y_scale, y_zero_point", "absent", "a quantized output (QGemm with a float output "
                                 "is not supported)")
            bias = self.constant(i[6]) if len(i) > 6 and i[6] else None
            self.fully_connected(node, i[0], (self.constant(i[3]), self.constant(i[4]), self.constant(i[5])), bias,
                                 node.outputs[0], self.constant(i[7]), self.constant(i[8]),
                                 transposed=bool(node.attrs.get("transB", 0)))
        else:
            self.average(node, i[0], node.outputs[0], self.constant(i[3]), self.constant(i[4]))

    def qdq(self, node: Node) -> None:
        """A float operator between DequantizeLinear inputs and one QuantizeLinear reader."""
        readers = self.consumers.get(node.outputs[0], [])
        if len(readers) != 1 or readers[0].op != "QuantizeLinear" or node.inputs[0] not in self.real_of:
            raise InputError("operator", node.op, "in a pre-quantized model, between DequantizeLinear inputs and "
                                                  "one QuantizeLinear (QDQ), or a quantized operator (onnxruntime's "
                                                  "QOperator format leaves float what it cannot quantize: use QDQ)")
        quantize = readers[0]
        self.consumed.add(quantize.name)
        y, y_scale, y_zero = quantize.outputs[0], self.constant(quantize.inputs[1]), self.constant(quantize.inputs[2])
        x = node.inputs[0]
        if node.op == "Conv":
            bias = self.dequantized_constant(node.inputs[2])[0] if len(node.inputs) > 2 and node.inputs[2] else None
            self.conv(node, x, self.dequantized_constant(node.inputs[1]), bias, y, y_scale, y_zero)
        elif node.op in ("Gemm", "MatMul"):
            if node.op == "Gemm" and (node.attrs.get("transA", 0) or node.attrs.get("alpha", 1.0) != 1.0
                                      or node.attrs.get("beta", 1.0) != 1.0):
                raise InputError("Gemm attributes", node.attrs, "transA 0, alpha 1, beta 1")
            bias = (self.dequantized_constant(node.inputs[2])[0]
                    if node.op == "Gemm" and len(node.inputs) > 2 and node.inputs[2] else None)
            self.fully_connected(node, x, self.dequantized_constant(node.inputs[1]), bias, y, y_scale, y_zero,
                                 transposed=bool(node.attrs.get("transB", 0)))
        elif node.op == "ConvTranspose":
            self.transposed_conv(node, x, y, y_scale, y_zero)
        elif node.op == "GlobalAveragePool":
            self.average(node, x, y, y_scale, y_zero)
        else:
            inputs = tuple(self.dequantized_operand(name) for name in node.inputs)
            self.island(replace(node, inputs=inputs, outputs=(y,)), self.output_tensor(y, y_scale, y_zero))

    def qlinear(self, node: Node) -> None:
        """One of onnxruntime's quantized operators (QLinearAdd, ...) as the float operator it quantizes."""
        op, _, _ = contrib_standard_form(node.op, node.inputs)
        i = node.inputs
        if node.op == "QLinearConcat":
            triples, (y_scale, y_zero) = [i[p:p + 3] for p in range(2, len(i), 3)], i[:2]
        else:
            _, positions, _ = CONTRIB_STANDARD_FORMS[node.op]
            triples, (y_scale, y_zero) = [i[p:p + 3] for p in positions], (*i[max(positions) + 3:], "")[:2]
        inputs = tuple(self.operand(*triple) for triple in triples)
        y = node.outputs[0]
        y_spec = self.output_tensor(y, self.constant(y_scale), self.constant(y_zero) if y_zero else np.uint8(0))
        self.island(Node(node.name, op, inputs, (y,), node.attrs), y_spec)

    def operand(self, name: str, scale: str, zero_point: str) -> str:
        """The integer tensor a quantized operator reads with ``scale`` and ``zero_point``: a tensor computed
        with that quantization (checked), or a constant, registered as an operand of its own."""
        scale_value = self.constant(scale)
        zero_value = self.constant(zero_point) if zero_point else np.zeros((), np.uint8)
        if name in self.graph.constants:
            return self.constant_operand(name, self.constant(name), scale_value, zero_value)
        spec = self.tensors.get(self.resolve(name))
        if spec is None:
            raise InputError("input", name, "a quantized tensor")
        if float(np.float32(scale_value.reshape(-1)[0])) != spec.scale or \
                int(zero_value.reshape(-1)[0]) != spec.zero_point:
            raise InputError("input quantization", f"{scale_value}/{zero_value}",
                             f"the quantization its producer wrote ({spec.scale}/{spec.zero_point})")
        return spec.name

    def dequantized_operand(self, name: str) -> str:
        """An input of a QDQ operator: the integer tensor behind a DequantizeLinear (a constant one registered
        as an operand), or an operator parameter (a plain constant, e.g. Resize's scales) as it is."""
        if not name or name in self.graph.constants:
            return name
        if name in self.real_of:
            return self.resolve(name)
        integers, scale, zero = self.dequantized_constant(name)
        return self.constant_operand(name, integers, scale, zero)

    def constant_operand(self, name: str, integers: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> str:
        spec = _tensor_spec(name, integers.shape, scale, np.asarray(zero_point, integers.dtype))
        self.tensors[name], self.constants[name] = spec, integers
        return name

    def island(self, node: Node, y_spec: QTensor) -> None:
        """A float operator between quantized tensors, by the quantizer's integer rule for it with the output
        quantization the model gives. Where that rule keeps the input's quantization (pooling, resizing,
        padding, layout) and the model's output has another, the result is rescaled by the element-wise unit
        (a one-input concat, docs/compiler.md §6)."""
        for name in node.inputs:                 # eltwise constants are broadcast with their leading ones
            if name in self.constants:
                rank = len(self.graph.shapes[node.outputs[0]])
                value = self.constants[name]
                self.constants[name] = value.reshape((1,) * (rank - value.ndim) + value.shape)
                self.tensors[name] = replace(self.tensors[name], shape=self.constants[name].shape)
        y, x_spec = y_spec.name, self.tensors.get(node.inputs[0])
        if node.op in _KEEPS_QUANTIZATION and x_spec is None:
            raise InputError("input", node.inputs[0], "a quantized tensor")
        rescaled = node.op in _KEEPS_QUANTIZATION and (x_spec.scale, x_spec.zero_point, x_spec.dtype) != (
            y_spec.scale, y_spec.zero_point, y_spec.dtype)
        if node.op == "AveragePool" and rescaled and self.pool_as_conv(node, x_spec, y_spec):
            return
        if rescaled:
            inner = f"{y}/unscaled"
            self.graph.shapes[inner] = self.graph.shapes[y]
            node = replace(node, outputs=(inner,))
        self.rules.given[node.outputs[0]] = y_spec
        try:
            self.rules.lower(node, set())
        except (ValueError, OverflowError) as exc:       # a rule refusing these scales (InputError is one)
            raise exc if isinstance(exc, InputError) else InputError("quantization", node.op, str(exc)) from None
        if rescaled:
            multiplier, shift = golden.quantize_multiplier(x_spec.scale / y_spec.scale)
            self.ops.append(QConcat(f"{node.name}/rescale", (inner,), y, 1, (int(multiplier),), (int(shift),)))
            self.tensors[y] = y_spec

    def pool_as_conv(self, node: Node, x_spec: QTensor, y_spec: QTensor) -> bool:
        """An average pool whose windows all count kernel_h * kernel_w values (no padding, or padding counted)
        as a depthwise conv of ones with onnxruntime's float32 scale; False where windows differ."""
        kernel = tuple(node.attrs["kernel_shape"])
        pads = tuple(node.attrs.get("pads", (0,) * 4))
        if (any(pads) and not node.attrs.get("count_include_pad", 0)) or node.attrs.get("ceil_mode", 0):
            return False
        self.ones_conv(node, x_spec, y_spec, kernel, dict(stride=tuple(node.attrs.get("strides", (1, 1))),
                                                          padding=pads,
                                                          dilation=tuple(node.attrs.get("dilations", (1, 1)))))
        return True

    # --- operators ---------------------------------------------------------------------------------------
    def conv(self, node: Node, x: str, weights, bias, y: str, y_scale, y_zero) -> None:
        x_spec = self.tensors[self.resolve(x)]
        integers, w_scale, zero = weights
        w, w_zero = _int8_weights(integers, zero, axis_size=integers.shape[0])
        y_spec = self.output_tensor(y, y_scale, y_zero)
        scale = golden.onnx_requant_scale(np.float32(x_spec.scale), w_scale, np.float32(y_spec.scale))
        attrs = node.attrs
        geometry = dict(stride=tuple(attrs.get("strides", (1, 1))), padding=tuple(attrs.get("pads", (0,) * 4)),
                        dilation=tuple(attrs.get("dilations", (1, 1))), groups=int(attrs.get("group", 1)))
        self.mac(node, x_spec, w, w_zero, bias, y_spec, scale, geometry)

    def transposed_conv(self, node: Node, x: str, y: str, y_scale, y_zero) -> None:
        """A QDQ ConvTranspose in its conv form (normalize.conv_form); per-channel weight scales and zero points
        are along its weights' axis 1 (the output channels of one group), repeated for every group."""
        integers, w_scale, zero = self.dequantized_constant(node.inputs[1])
        conv, _, geometry = conv_form(replace(node, inputs=node.inputs[:2]), {node.inputs[1]: integers})
        groups = geometry["groups"]
        w, w_zero = _int8_weights(conv.astype(integers.dtype), zero, axis_size=integers.shape[1])
        w_scale = np.asarray(w_scale, np.float32).reshape(-1)
        w_scale = np.tile(w_scale, groups) if w_scale.size == integers.shape[1] else w_scale
        x_spec = self.tensors[self.resolve(x)]
        bias = None
        if len(node.inputs) > 2 and node.inputs[2]:     # int32 through DequantizeLinear, or float (onnxruntime's)
            bias = (self.constant(node.inputs[2]) / (np.float64(x_spec.scale) * w_scale)
                    if node.inputs[2] in self.graph.constants else self.dequantized_constant(node.inputs[2])[0])
            bias = golden.round_half_away(bias)
        y_spec = self.output_tensor(y, y_scale, y_zero)
        scale = golden.onnx_requant_scale(np.float32(x_spec.scale), w_scale, np.float32(y_spec.scale))
        self.mac(node, x_spec, w, w_zero, bias, y_spec, scale, geometry)

    def fully_connected(self, node: Node, x: str, weights, bias, y: str, y_scale, y_zero, *, transposed: bool) -> None:
        matrix, scale, zero = weights
        matrix = matrix if transposed else matrix.T            # [outputs, features]
        w, w_zero = _int8_weights(matrix, zero, axis_size=matrix.shape[0])
        x_spec = self.tensors[self.resolve(x)]
        y_spec = self.output_tensor(y, y_scale, y_zero)
        requant_scale = golden.onnx_requant_scale(np.float32(x_spec.scale), scale, np.float32(y_spec.scale))
        self.mac(node, x_spec, w.reshape(*w.shape, 1, 1), w_zero, bias, y_spec, requant_scale, {})

    def average(self, node: Node, x: str, y: str, y_scale, y_zero) -> None:
        """A rescaling global average: a depthwise conv of ones over the plane; a plane wider than a CONV kernel
        is summed by a 1x1 conv of ones (qir.summed_planes), the same integer sum."""
        x_spec = self.tensors[self.resolve(x)]
        y_spec = self.output_tensor(y, y_scale, y_zero)
        h, w = x_spec.shape[2:]
        if max(h, w) < 1 << KERNEL_BITS:
            self.ones_conv(node, x_spec, y_spec, (h, w), {})
            return
        scale = np.float32(x_spec.scale) / (np.float32(y_spec.scale) * np.float32(h * w))
        summed_planes(self.tensors, self.ops, node.name, x_spec, y_spec, lambda planes, sums: self.mac(
            node, planes, np.ones((1, h * w, 1, 1), np.int8), 0, None, sums, scale, {}))

    def ones_conv(self, node: Node, x_spec: QTensor, y_spec: QTensor, kernel: tuple[int, int], geometry: dict):
        """An average over whole kernels as a depthwise conv of ones, requantized with MLAS's float32 scale
        ``x_scale / (y_scale * (float)kernel size)``."""
        channels = x_spec.shape[1]
        scale = np.float32(x_spec.scale) / (np.float32(y_spec.scale) * np.float32(kernel[0] * kernel[1]))
        self.mac(node, x_spec, np.ones((channels, 1, *kernel), np.int8), 0, None, y_spec, scale,
                 dict(groups=channels, **geometry))

    def mac(self, node: Node, x_spec: QTensor, w: np.ndarray, w_zero: int, bias, y_spec: QTensor, scale,
            geometry: dict) -> None:
        if w.dtype != np.int8:
            x_spec, w = self._split_weights(node, x_spec, w, geometry.get("groups", 1))
        k = w.shape[0]
        scale = np.broadcast_to(np.asarray(scale, np.float32), (k,)).copy()
        bias = np.zeros(k, np.int32) if bias is None else np.broadcast_to(np.asarray(bias, np.int32), (k,)).copy()
        check_accumulator(w, x_spec, w_zero)
        info = np.iinfo(y_spec.dtype)
        requant = Requant(None, None, y_spec.zero_point, int(info.min), int(info.max), scale=scale)
        self.ops.append(QConv(node.name, x_spec.name, y_spec.name, w, bias, requant, w_zero, **geometry))

    def _split_weights(self, node: Node, x_spec: QTensor, w: np.ndarray, groups: int) -> tuple[QTensor, np.ndarray]:
        """Weights beyond int8 (per-channel zero points folded in, up to ±255) as P int8 parts of at most 127
        each, summed in the accumulator: the input's channels are gathered P times within each group (a layout
        copy) and the conv reads part p from copy p. Exact: Σ x·w = Σ_p Σ x·w_p."""
        parts, rest = [], w.astype(np.int16)
        while np.any(rest) or not parts:
            parts.append(np.clip(rest, -np.iinfo(np.int8).max, np.iinfo(np.int8).max))
            rest = rest - parts[-1]
        per_group = w.shape[1]
        channel = np.arange(x_spec.shape[1]).reshape(groups, 1, per_group)
        order = np.broadcast_to(channel, (groups, len(parts), per_group)).reshape(-1)
        copies = f"{node.name}/weight_parts_input"
        indices = np.arange(int(np.prod(x_spec.shape))).reshape(x_spec.shape)[:, order]
        self.tensors[copies] = replace(x_spec, name=copies, shape=indices.shape)
        self.ops.append(QLayout(f"{node.name}/weight_parts", x_spec.name, copies, gather=indices.reshape(-1)))
        stacked = np.stack(parts, axis=1)        # [K, part, channel of the group, KH, KW]
        return self.tensors[copies], stacked.reshape(w.shape[0], -1, *w.shape[2:]).astype(np.int8)


def _tensor_spec(name: str, shape: tuple[int, ...], scale, zero_point) -> QTensor:
    """One tensor's quantization as a model gives it, checked: one finite positive scale, one int8 or uint8
    zero point."""
    scale, zero = np.asarray(scale), np.asarray(zero_point)
    if zero.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)) or scale.size != 1 or zero.size != 1:
        raise InputError(f"tensor {name!r} quantization", f"{zero.dtype} x {scale.size} scales",
                         "int8 or uint8, one scale and zero point per tensor")
    value = float(np.float32(scale.reshape(-1)[0]))
    if not (np.isfinite(value) and value > 0):
        raise InputError(f"tensor {name!r} scale", value, "finite and positive")
    return QTensor(name, tuple(shape), zero.dtype, value, int(zero.reshape(-1)[0]))


def _int8_weights(w: np.ndarray, zero_point: np.ndarray, axis_size: int) -> tuple[np.ndarray, int]:
    """Weights as int8 with one zero point (D4): uint8 ones shifted by 128 with their zero point. Zero points
    that differ between the output channels (``w``'s axis 0; ``zero_point`` has ``axis_size`` values, repeated
    for every group) are subtracted from the weights, exactly (Σ(x − z_x)(w − z_k) = Σ(x − z_x)·w'), and the
    zero point is 0; those weights are int16 when they do not fit int8 (:meth:`_Importer.mac` splits them)."""
    zero = np.asarray(zero_point).reshape(-1)
    if zero.dtype != w.dtype:
        raise InputError("weight zero point type", zero.dtype.name, f"the weights' ({w.dtype.name})")
    if zero.size not in (1, axis_size):
        raise InputError("weight zero points", f"{zero.size} values", f"1 or one per output channel ({axis_size})")
    if np.any(zero != zero[0]):
        per_channel = np.tile(zero.astype(np.int16), w.shape[0] // zero.size)
        centred = w.astype(np.int16) - per_channel.reshape(-1, *(1,) * (w.ndim - 1))
        fits = np.iinfo(np.int8).min <= centred.min() and centred.max() <= np.iinfo(np.int8).max
        return (centred.astype(np.int8) if fits else centred), 0
    if w.dtype == np.uint8:
        return (w.astype(np.int16) - 128).astype(np.int8), int(zero[0]) - 128
    if w.dtype != np.int8:
        raise InputError("weights", w.dtype.name, "int8 or uint8")
    return w, int(zero[0])


def import_quantized(graph: Graph) -> QModel:
    """The QModel of a normalized, checked pre-quantized graph."""
    try:
        return _Importer(graph).run()
    except InputError as error:
        raise error.within(graph.source) from None
