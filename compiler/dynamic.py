"""Dynamically quantized models (onnxruntime's ``quantize_dynamic``) read as the float models they compute.

``quantize_dynamic`` stores each Conv's and MatMul's weights as integers with a scale and zero point, and
quantizes the activation before it at run time, from that input's own range:

    x -> DynamicQuantizeLinear -> (x_q, x_scale, x_zero_point)          the range of this very input
    Mul(x_scale, w_scale) -> s
    ConvInteger | MatMulInteger (x_q, w_q, x_zero_point, w_zero_point) -> Cast(float) -> Mul(., s) [-> Add(b)]

The NPU has no run-time range (its scales are fixed when the program is built), so this pattern is read as
the float operator it approximates, ``Conv(x, (w_q − w_zero_point)·w_scale [, b])`` or ``MatMul``/``Gemm``,
and the model is calibrated and quantized statically like any float model (docs/compiler.md §1): the weights
are the model's own quantized values, the activations get calibrated scales instead of per-input ones.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from aipu.compiler.graph import Graph, Node

_INTEGER_OPS = {"ConvInteger": "Conv", "MatMulInteger": "MatMul"}


def dequantize_dynamic(graph: Graph) -> Graph:
    """The graph with every matched dynamic-quantization pattern replaced by its float operator; a
    DynamicQuantizeLinear whose readers do not all match stays (and is listed as unsupported)."""
    producer, consumers = graph.producer(), graph.consumers()
    removed, added = set(), {}
    for node in graph.nodes:
        if node.op not in _INTEGER_OPS:
            continue
        match = _match(node, graph, producer, consumers)
        if match is None:
            continue
        new, gone = match
        added[id(node)] = new
        removed |= {id(n) for n in gone}
    nodes = [added.get(id(node), node) for node in graph.nodes if id(node) not in removed or id(node) in added]
    used = {name for node in nodes for name in node.inputs}
    nodes = [node for node in nodes if node.op != "DynamicQuantizeLinear" or node.outputs[0] in used]
    return replace(graph, nodes=nodes)


def _sole(consumers: dict, name: str, op: str) -> Node | None:
    readers = consumers.get(name, [])
    return readers[0] if len(readers) == 1 and readers[0].op == op else None


def _match(node: Node, graph: Graph, producer: dict, consumers: dict) -> tuple[Node, list[Node]] | None:
    """(the float node, the nodes it replaces) for one ConvInteger/MatMulInteger of the pattern, else None."""
    x_q, w_q, x_zero, w_zero = (*node.inputs, "", "", "")[:4]
    quantize = producer.get(x_q)
    if quantize is None or quantize.op != "DynamicQuantizeLinear" or x_zero != quantize.outputs[2] \
            or w_q not in graph.constants or (w_zero and w_zero not in graph.constants):
        return None
    cast = _sole(consumers, node.outputs[0], "Cast")
    scaling = cast and _sole(consumers, cast.outputs[0], "Mul")
    if scaling is None:
        return None
    product = producer.get(next((name for name in scaling.inputs if name != cast.outputs[0]), ""))
    if product is None or product.op != "Mul" or quantize.outputs[1] not in product.inputs:
        return None
    w_scale = next((name for name in product.inputs if name != quantize.outputs[1]), "")
    if w_scale not in graph.constants or len(consumers.get(product.outputs[0], [])) != 1:
        return None
    weights = _float_weights(graph, node, w_q, w_zero, w_scale)
    if weights is None:
        return None
    gone = [node, cast, scaling, product]
    output, inputs = scaling.outputs[0], [quantize.inputs[0], f"{node.name}/dequantized_weights"]
    conv = node.op == "ConvInteger"
    bias = _bias(graph, consumers, output, weights.shape[0 if conv else 1], 3 if conv else 1)
    if bias is not None:
        adding, values = bias
        gone.append(adding)
        output = adding.outputs[0]
        inputs.append(f"{node.name}/bias")
        graph.constants[inputs[2]] = values
        graph.shapes[inputs[2]], graph.dtypes[inputs[2]] = values.shape, values.dtype
    graph.constants[inputs[1]] = weights
    graph.shapes[inputs[1]], graph.dtypes[inputs[1]] = weights.shape, weights.dtype
    op = _INTEGER_OPS[node.op] if bias is None or conv else "Gemm"
    return Node(node.name, op, tuple(inputs), (output,), dict(node.attrs)), gone


def _float_weights(graph: Graph, node: Node, w_q: str, w_zero: str, w_scale: str) -> np.ndarray | None:
    """(w_q − w_zero_point)·w_scale in float32, the scale and zero point per tensor or per output channel
    (a conv's axis 0, a matmul's axis 1); None for any other layout."""
    integers = graph.constants[w_q].astype(np.float64)
    channels = integers.shape[0] if node.op == "ConvInteger" else integers.shape[-1]
    shape = (-1, *(1,) * (integers.ndim - 1)) if node.op == "ConvInteger" else (1, -1)
    parts = []
    for name in (w_zero, w_scale):
        value = graph.constants[name] if name else np.zeros(1)
        if value.size not in (1, channels):
            return None
        parts.append(value.astype(np.float64).reshape(shape if value.size > 1 else (1,) * integers.ndim))
    return ((integers - parts[0]) * parts[1]).astype(np.float32)


def _bias(graph: Graph, consumers: dict, name: str, channels: int, from_end: int) -> tuple[Node, np.ndarray] | None:
    """The Add of a constant per-channel bias that alone reads ``name`` (its channels on the axis ``from_end``
    places from the last, as it broadcasts), with the bias as a [channels] vector."""
    adding = _sole(consumers, name, "Add")
    other = adding and next((value for value in adding.inputs if value != name), "")
    if not other or other not in graph.constants:
        return None
    values = graph.constants[other]
    if values.size != channels or values.ndim < from_end or values.shape[-from_end] != channels:
        return None
    return adding, values.reshape(-1).astype(np.float32)
