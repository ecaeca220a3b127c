"""Pre-quantized ONNX models, as onnxruntime.quantization writes them, to a :class:`~aipu.compiler.qir.QModel`
with every scale and zero point kept exactly (docs/compiler.md §6).

Both forms are read: QOperator (QLinearConv, QLinearMatMul, and onnxruntime's QGemm and
QLinearGlobalAveragePool) and QDQ (a float Conv, Gemm, MatMul, GlobalAveragePool, pooling or reshape whose
inputs are DequantizeLinear outputs and whose only reader is a QuantizeLinear). The MAC operators requantize
in the FLOAT32 mode with onnxruntime's scale, ``float32(float32(x_scale * w_scale) / y_scale)`` (D12), so
each layer equals onnxruntime's QLinearConv bit for bit; a global average pool is a depthwise conv of ones
with MLAS's scale ``x_scale / (y_scale * H * W)`` in float32 (exact, where averaging and then requantizing
is not). uint8 weights are shifted by 128 with their zero point (D4). The model's input is quantized as
ONNX's QuantizeLinear does; its outputs are the tensors the final DequantizeLinear nodes read.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from aipu.compiler.graph import Graph, Node
from aipu.compiler.qir import QConv, QLayout, QModel, QPool, QTensor, Requant
from aipu.compiler.quantize import check_accumulator
from aipu.sim import golden
from aipu.sim.machine.errors import InputError

QUANTIZED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm",
                           "QLinearGlobalAveragePool"})
_PASS_THROUGH = {"MaxPool": "max", "Flatten": None, "Reshape": None, "Squeeze": None, "Unsqueeze": None,
                 "Transpose": None}


def is_prequantized(graph: Graph) -> bool:
    return any(node.op in QUANTIZED_OPS for node in graph.nodes)


class _Importer:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.tensors: dict[str, QTensor] = {}
        self.alias: dict[str, str] = {}          # a QuantizeLinear of a graph input, or a reshape, -> its tensor
        self.real_of: dict[str, str] = {}        # a DequantizeLinear output (float) -> the integer tensor it reads
        self.ops: list = []
        self.inputs: list[str] = []
        self.producer, self.consumers = graph.producer(), graph.consumers()
        self.consumed: set[str] = set()

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
            zero = self.constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros((), np.int8)
            return self.constant(node.inputs[0]), self.constant(node.inputs[1]).astype(np.float32), zero
        raise InputError(f"tensor {name!r}", "float weights", "integers read through DequantizeLinear")

    def output_tensor(self, name: str, scale, zero_point) -> QTensor:
        zero = np.asarray(zero_point)
        spec = QTensor(name, self.graph.shapes[name], zero.dtype, float(np.float32(scale).reshape(-1)[0]),
                       int(zero.reshape(-1)[0]))
        if zero.dtype not in (np.dtype(np.int8), np.dtype(np.uint8)) or np.asarray(scale).size != 1:
            raise InputError(f"tensor {name!r} quantization", f"{zero.dtype} x {np.asarray(scale).size} scales",
                             "int8 or uint8, one scale per tensor")
        self.tensors[name] = spec
        return spec

    # --- the walk ----------------------------------------------------------------------------------------
    def run(self) -> QModel:
        for node in self.graph.nodes:
            if node.name in self.consumed:
                continue
            try:
                self.visit(node)
            except InputError as error:
                raise error.within(f"node {node.name!r} ({node.op})") from None
        outputs = []
        for name in self.graph.outputs:
            source = self.resolve(name)
            if source not in self.tensors:
                raise InputError("graph output", name, "the DequantizeLinear of a quantized tensor")
            outputs.append(self.named_as_output(source, name))
        return QModel(self.tensors, self.ops, tuple(self.inputs), tuple(outputs))

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
        elif op in ("QLinearConv", "QLinearMatMul", "QGemm", "QLinearGlobalAveragePool"):
            self.qoperator(node)
        elif op in _PASS_THROUGH and node.inputs[0] not in self.real_of and self.resolve(node.inputs[0]) in \
                self.tensors:
            self.pass_through(node, node.outputs[0])    # pooling or a reshape of an integer tensor (QOperator)
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
        x_spec = self.tensors.get(self.resolve(i[0]))
        if x_spec is None:
            raise InputError("input", i[0], "a quantized tensor")
        if float(np.float32(self.constant(i[1]).reshape(-1)[0])) != x_spec.scale or \
                int(self.constant(i[2]).reshape(-1)[0]) != x_spec.zero_point:
            raise InputError("input quantization", f"{self.constant(i[1])}/{self.constant(i[2])}",
                             f"the quantization its producer wrote ({x_spec.scale}/{x_spec.zero_point})")
        if node.op == "QLinearConv":
            bias = self.constant(i[8]) if len(i) > 8 and i[8] else None
            self.conv(node, i[0], (self.constant(i[3]), self.constant(i[4]), self.constant(i[5])), bias,
                      node.outputs[0], self.constant(i[6]), self.constant(i[7]))
        elif node.op == "QLinearMatMul":
            self.fully_connected(node, i[0], (self.constant(i[3]), self.constant(i[4]), self.constant(i[5])), None,
                                 node.outputs[0], self.constant(i[6]), self.constant(i[7]), transposed=False)
        elif node.op == "QGemm":
            if len(i) < 8 or not i[7]:
                raise InputError("y_scale", "absent", "a quantized output (QGemm with a float output is not supported)")
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
                                                  "one QuantizeLinear (QDQ), or a quantized operator")
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
        elif node.op == "GlobalAveragePool":
            self.average(node, x, y, y_scale, y_zero)
        elif node.op in _PASS_THROUGH:
            spec = self.tensors[self.resolve(x)]
            if not np.isclose(float(y_scale), spec.scale, rtol=0, atol=0) or int(y_zero) != spec.zero_point:
                raise InputError("output quantization", f"{float(y_scale)}/{int(y_zero)}",
                                 f"the input's ({spec.scale}/{spec.zero_point}): {node.op} moves values")
            self.pass_through(node, y)
        else:
            raise InputError("operator", node.op, "Conv, Gemm, MatMul, GlobalAveragePool, MaxPool or a reshape "
                                                  "between DequantizeLinear and QuantizeLinear")

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

    def fully_connected(self, node: Node, x: str, weights, bias, y: str, y_scale, y_zero, *, transposed: bool) -> None:
        matrix, scale, zero = weights
        matrix = matrix if transposed else matrix.T            # [outputs, features]
        w, w_zero = _int8_weights(matrix, zero, axis_size=matrix.shape[0])
        x_spec = self.tensors[self.resolve(x)]
        y_spec = self.output_tensor(y, y_scale, y_zero)
        requant_scale = golden.onnx_requant_scale(np.float32(x_spec.scale), scale, np.float32(y_spec.scale))
        self.mac(node, x_spec, w.reshape(*w.shape, 1, 1), w_zero, bias, y_spec, requant_scale, {})

    def average(self, node: Node, x: str, y: str, y_scale, y_zero) -> None:
        x_spec = self.tensors[self.resolve(x)]
        _, channels, height, width = x_spec.shape
        y_spec = self.output_tensor(y, y_scale, y_zero)
        # MLAS: scale = x_scale / (y_scale * (float)ImageSize), in float32
        scale = np.float32(x_spec.scale) / (np.float32(y_spec.scale) * np.float32(height * width))
        ones = np.ones((channels, 1, height, width), np.int8)
        self.mac(node, x_spec, ones, 0, None, y_spec, scale, dict(groups=channels))

    def mac(self, node: Node, x_spec: QTensor, w: np.ndarray, w_zero: int, bias, y_spec: QTensor, scale,
            geometry: dict) -> None:
        k = w.shape[0]
        scale = np.broadcast_to(np.asarray(scale, np.float32), (k,)).copy()
        bias = np.zeros(k, np.int32) if bias is None else np.broadcast_to(np.asarray(bias, np.int32), (k,)).copy()
        check_accumulator(w, x_spec, w_zero)
        info = np.iinfo(y_spec.dtype)
        requant = Requant(None, None, y_spec.zero_point, int(info.min), int(info.max), scale=scale)
        self.ops.append(QConv(node.name, x_spec.name, y_spec.name, w, bias, requant, w_zero, **geometry))

    def pass_through(self, node: Node, y: str) -> None:
        x = self.resolve(node.inputs[0])
        spec = self.tensors[x]
        self.tensors[y] = QTensor(y, self.graph.shapes[y], spec.dtype, spec.scale, spec.zero_point)
        if node.op == "MaxPool":
            kernel = tuple(node.attrs["kernel_shape"])
            self.ops.append(QPool(node.name, x, y, "max", kernel, tuple(node.attrs.get("strides", kernel)),
                                  tuple(node.attrs.get("pads", (0,) * 4)), tuple(node.attrs.get("dilations", (1, 1)))))
        else:
            reverse = tuple(range(len(spec.shape)))[::-1]
            permutation = tuple(node.attrs.get("perm", reverse)) if node.op == "Transpose" else None
            self.ops.append(QLayout(node.name, x, y, permutation))


def _int8_weights(w: np.ndarray, zero_point: np.ndarray, axis_size: int) -> tuple[np.ndarray, int]:
    """Weights as int8 with one zero point (D4): uint8 ones shifted by 128 with their zero point; a zero point
    that differs between channels is refused."""
    zero = np.asarray(zero_point).reshape(-1)
    if zero.size not in (1, axis_size) or np.any(zero != zero[0]):
        raise InputError("weight zero points", f"{zero.size} different values", "one zero point for all channels")
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
