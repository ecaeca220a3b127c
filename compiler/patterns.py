"""What exporters spell as several element-wise nodes, put back as the one operator it is.

Paddle2ONNX (and older PyTorch exports) write hard-swish as ``x * Clip(x + 3, 0, 6) / 6`` and hard-sigmoid
as ``Clip(x + 3, 0, 6) / 6``: four or three nodes, each rounded to 8 bits on its own, where the operator is
one table of exact values. Paddle's PP-LCNet follows each conv with a learnable per-channel scale and offset
(Mul, Add), each its own rounding, where they belong in the conv's weights and bias. A chain is fused only
where every intermediate tensor has that one reader and is not a graph output.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from aipu.compiler.graph import Graph, Node


def fuse_hard_activations(graph: Graph) -> Graph:
    """``graph`` with each spelt-out hard-swish and hard-sigmoid replaced by HardSwish or HardSigmoid."""
    replaced: dict[str, list[Node]] = {}
    dropped: set[str] = set()
    readers = graph.consumers()
    for node in graph.nodes:
        if node.name in dropped or node.name in replaced:
            continue
        found = _hard_chain(graph, readers, node)
        if found is not None:
            chain, fused = found
            dropped.update(step.name for step in chain[:-1])
            replaced[chain[-1].name] = fused
    graph.nodes = [fused for node in graph.nodes if node.name not in dropped
                   for fused in replaced.get(node.name, [node])]
    used = {name for node in graph.nodes for name in node.inputs}
    graph.constants = {name: value for name, value in graph.constants.items() if name in used}
    return graph


def _hard_chain(graph: Graph, readers: dict[str, list[Node]], add: Node) -> tuple[list[Node], list[Node]] | None:
    """(the nodes, what replaces them) of the chain that starts at ``add`` = x + 3, or None. Hard-swish is
    HardSwish from opset 14; before it, x * HardSigmoid(x) (one rounding more, two fewer)."""
    if add.op != "Add" or len(add.inputs) != 2:
        return None
    x = _other_than_constant(graph, add, 3.0)
    clip = _only_reader(graph, readers, add.outputs[0])
    if x is None or clip is None or clip.op != "Clip" or _clip_bounds(graph, clip) != (0.0, 6.0):
        return None
    after = _only_reader(graph, readers, clip.outputs[0])
    if after is None:
        return None
    sigmoid = {"alpha": 1 / 6, "beta": 0.5}
    if _divides_by_six(graph, after, clip.outputs[0]):
        return [add, clip, after], [replace(after, op="HardSigmoid", inputs=(x,), attrs=sigmoid)]
    if after.op != "Mul" or set(after.inputs) != {x, clip.outputs[0]}:
        return None
    divide = _only_reader(graph, readers, after.outputs[0])
    if divide is None or not _divides_by_six(graph, divide, after.outputs[0]):
        return None
    if graph.opset >= 14:
        return [add, clip, after, divide], [replace(divide, op="HardSwish", inputs=(x,), attrs={})]
    gate = replace(clip, name=f"{divide.name}/hard_sigmoid", op="HardSigmoid", inputs=(x,), attrs=sigmoid)
    return [add, clip, after, divide], [gate, replace(divide, op="Mul", inputs=(x, clip.outputs[0]), attrs={})]


def _only_reader(graph: Graph, readers: dict[str, list[Node]], name: str) -> Node | None:
    found = readers.get(name, [])
    return found[0] if len(found) == 1 and name not in graph.outputs else None


def _scalar(graph: Graph, name: str) -> float | None:
    value = graph.constants.get(name)
    return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None


def _other_than_constant(graph: Graph, node: Node, constant: float) -> str | None:
    """The input of a two-input ``node`` that is not the scalar ``constant``, if the other one is."""
    first, second = node.inputs
    if _scalar(graph, second) == constant and first not in graph.constants:
        return first
    if _scalar(graph, first) == constant and second not in graph.constants:
        return second
    return None


def _clip_bounds(graph: Graph, clip: Node) -> tuple[float | None, float | None]:
    if len(clip.inputs) == 3 and clip.inputs[1] and clip.inputs[2]:
        return _scalar(graph, clip.inputs[1]), _scalar(graph, clip.inputs[2])
    return clip.attrs.get("min"), clip.attrs.get("max")


def _divides_by_six(graph: Graph, node: Node, value: str) -> bool:
    """``node`` is ``value`` / 6, or ``value`` * 1/6 (in float32) in either order."""
    if node.op == "Div" and len(node.inputs) == 2:
        return node.inputs[0] == value and _scalar(graph, node.inputs[1]) == 6.0
    if node.op == "Mul" and len(node.inputs) == 2 and value in node.inputs:
        other = node.inputs[1] if node.inputs[0] == value else node.inputs[0]
        return _scalar(graph, other) == float(np.float32(1 / 6))
    return False


def fold_channel_affine(graph: Graph) -> Graph:
    """``graph`` with each Mul, Div, Add or Sub of a per-channel (or scalar) constant that is a Conv's only
    reader folded into the conv's weights and bias, in float64, repeatedly (a scale then an offset); and a
    MatMul by a constant followed by the Add of a bias row as one Gemm."""
    while True:
        readers, producer = graph.consumers(), graph.producer()
        for node in graph.nodes:
            conv = producer.get(node.inputs[0]) if node.op in _AFFINE and len(node.inputs) == 2 else None
            if conv is None or _only_reader(graph, readers, conv.outputs[0]) is not node:
                continue
            if conv.op == "MatMul" and node.op == "Add" and _row_bias(graph, conv, node.inputs[1]) is not None:
                gemm = replace(conv, op="Gemm", inputs=(*conv.inputs, node.inputs[1]), outputs=node.outputs, attrs={})
                graph.nodes = [gemm if step is conv else step for step in graph.nodes if step is not node]
                break
            factor = _per_channel(graph, node.inputs[1], graph.shapes[conv.outputs[0]]) if conv.op == "Conv" else None
            if factor is not None:
                _fold_into(graph, conv, node, factor)
                break
        else:
            used = {name for node in graph.nodes for name in node.inputs}
            graph.constants = {name: value for name, value in graph.constants.items() if name in used}
            return graph


_AFFINE = ("Mul", "Div", "Add", "Sub")


def _row_bias(graph: Graph, matmul: Node, name: str) -> np.ndarray | None:
    """The constant ``name`` as a Gemm's C for a rank-2 MatMul by a constant: one value per output column
    ([N] or [1, N]); None otherwise."""
    value, weight = graph.constants.get(name), graph.constants.get(matmul.inputs[1])
    if value is None or weight is None or weight.ndim != 2 or len(graph.shapes[matmul.inputs[0]]) != 2:
        return None
    return value if value.shape in ((weight.shape[1],), (1, weight.shape[1])) else None


def _per_channel(graph: Graph, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """The constant ``name`` as one value per channel of a [N, C, H, W] tensor, if it broadcasts so."""
    value = graph.constants.get(name)
    if value is None or len(shape) != 4 or value.ndim > 4:
        return None
    channels = shape[1]
    if value.size == 1:
        return np.full(channels, float(value.reshape(-1)[0]))
    aligned = (1,) * (4 - value.ndim) + value.shape
    if aligned[0] == 1 and aligned[1] == channels and aligned[2:] == (1, 1):
        return value.reshape(-1).astype(np.float64)
    return None


def _fold_into(graph: Graph, conv: Node, node: Node, factor: np.ndarray) -> None:
    weight = graph.constants[conv.inputs[1]].astype(np.float64)
    bias = (graph.constants[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2]
            else np.zeros(weight.shape[0]))
    if node.op in ("Mul", "Div"):
        scale = factor if node.op == "Mul" else 1.0 / factor
        weight, bias = weight * scale.reshape(-1, 1, 1, 1), bias * scale
    else:
        bias = bias + factor if node.op == "Add" else bias - factor
    weight_name, bias_name = f"{conv.name}/{node.name}/weight", f"{conv.name}/{node.name}/bias"
    for name, value in ((weight_name, weight), (bias_name, bias)):
        graph.constants[name] = value.astype(np.float32)
        graph.shapes[name], graph.dtypes[name] = value.shape, np.dtype(np.float32)
    folded = replace(conv, inputs=(conv.inputs[0], weight_name, bias_name), outputs=node.outputs)
    graph.nodes = [folded if step is conv else step for step in graph.nodes if step is not node]
