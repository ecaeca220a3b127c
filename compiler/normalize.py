"""Float-graph rewrites before quantization, and the check that lists every node the NPU path cannot run.

:func:`normalize` drops nodes that compute nothing at inference (Identity, Dropout, a Cast to the type the
tensor has), folds each BatchNormalization into the Conv (or ConvTranspose) before it where that conv feeds
nothing else (in float64, the folded weights stored as float32), and writes every Conv's ``auto_pad`` as
explicit pads.
:func:`check` then names, in one error, every node whose operator or attributes the compiler does not
support, with its input shapes, before anything is written.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from aipu.compiler.graph import Graph, Node
from aipu.compiler.dynamic import dequantize_dynamic
from aipu.compiler.patterns import fold_channel_affine, fuse_hard_activations
from aipu.compiler.resize import linear_form
from aipu.sim.machine.errors import InputError, one_line


class UnsupportedNodes(InputError):
    """Every node the compiler cannot take, grouped by operator: a line per operator type with its count and
    its first SHOWN_PER_OPERATOR nodes (name, input shapes, reason). A network of hundreds of nodes of one
    unsupported type reads in a few lines."""

    SHOWN_PER_OPERATOR = 3

    def __init__(self, refused: list[tuple[str, str, str, str]]):
        super().__init__("unsupported nodes", len(refused), "operators the compiler takes")
        self.refused = refused                   # (operator, node name, input shapes, reason) per node

    def __str__(self) -> str:
        groups: dict[str, list[tuple[str, str, str]]] = {}
        for operator, name, shapes, reason in self.refused:
            groups.setdefault(operator, []).append((name, shapes, reason))
        count = len(self.refused)
        lines = [": ".join((*self.where, f"{count} unsupported node{'s' if count > 1 else ''} of {len(groups)} "
                                         f"operator type{'s' if len(groups) > 1 else ''}:"))]
        for operator, nodes in groups.items():
            shown = [one_line(f"{name!r} (inputs {shapes}): {reason}"[:300])
                     for name, shapes, reason in nodes[:self.SHOWN_PER_OPERATOR]]
            more = len(nodes) - len(shown)
            lines.append(f"  {operator}, {len(nodes)} node{'s' if len(nodes) > 1 else ''}: " + "; ".join(shown)
                         + (f"; and {more} more" if more else ""))
        return "\n".join(lines)


def normalize(graph: Graph) -> Graph:
    """The graph without inference no-ops, with BatchNormalization folded, pads explicit and zero Pads folded
    into the convolutions after them; dynamically quantized layers read as float (compiler/dynamic.py); checked
    first."""
    graph = dequantize_dynamic(graph)
    check(graph)
    graph = fuse_hard_activations(_drop_no_ops(graph))
    graph = fold_channel_affine(_fold_batch_norms(graph))
    graph.nodes = [_explicit_pads(node, graph) if node.op in ("Conv", "QLinearConv", "MaxPool", "AveragePool",
                                                              "QLinearAveragePool")
                   else _explicit_transpose_pads(node, graph) if node.op == "ConvTranspose"
                   else node for node in graph.nodes]
    return _fold_pads(graph)


def check(graph: Graph) -> None:
    """:class:`UnsupportedNodes` listing every node the compiler cannot take; else the reason strict shape
    inference failed, if it did; else the first tensor whose shape stayed unknown."""
    refused = []
    for node in graph.nodes:
        reason = _unsupported(node, graph)
        if reason:
            shapes = ", ".join(("x".join(map(str, graph.shapes[name])) or "scalar") if name in graph.shapes else "?"
                               for name in node.inputs if name)
            domain = f" in domain {node.domain}" if node.domain not in ("", "ai.onnx") else ""
            refused.append((f"{node.op}{domain}", node.name, shapes or "none", reason))
    if refused:
        raise UnsupportedNodes(refused).within(graph.source)
    if graph.problem is not None:
        raise graph.problem.within(graph.source)
    for node in graph.nodes:
        for name in (*node.inputs, *node.outputs):
            if name and name not in graph.shapes:
                raise InputError(f"node {node.name!r} ({node.op}) tensor {name!r}", "shape unknown",
                                 "every shape inferable from the input shapes").within(graph.source)


# --- what the compiler takes ------------------------------------------------------------------------------
def _constant(*positions: int) -> Callable[[Node, Graph], str | None]:
    """A check that the inputs at ``positions`` (where present) are constants: weights, not activations."""
    def check_inputs(node: Node, graph: Graph) -> str | None:
        producer = graph.producer()
        for position in positions:
            name = node.inputs[position] if position < len(node.inputs) else ""
            source = producer.get(name)
            dequantized = (source is not None and source.op == "DequantizeLinear"
                           and all(not i or i in graph.constants for i in source.inputs))
            if name and name not in graph.constants and not dequantized:
                return f"input {position} ({name!r}) must be a constant"
        return None
    return check_inputs


def _rank(rank: int, *then: Callable) -> Callable[[Node, Graph], str | None]:
    """A check that input 0 has ``rank`` dimensions (2-D images are [N, C, H, W]), then the ``then`` checks."""
    def check_rank(node: Node, graph: Graph) -> str | None:
        shape = graph.shapes.get(node.inputs[0])
        if shape is not None and len(shape) != rank:
            return f"input of rank {len(shape)}, only rank {rank} is supported"
        for more in then:
            reason = more(node, graph)
            if reason:
                return reason
        return None
    return check_rank


def _attribute(name: str, allowed: tuple, default) -> Callable[[Node, Graph], str | None]:
    def check_attribute(node: Node, graph: Graph) -> str | None:
        value = _text(node.attrs.get(name, default))
        return None if value in allowed else f"{name} = {value!r}, supported: {', '.join(map(repr, allowed))}"
    return check_attribute


def _unused_outputs(first: int) -> Callable[[Node, Graph], str | None]:
    def check_outputs(node: Node, graph: Graph) -> str | None:
        used = {name for other in graph.nodes for name in other.inputs} | set(graph.outputs)
        extra = [name for name in node.outputs[first:] if name and name in used]
        return f"output {extra[0]!r} is used; only the first output is computed" if extra else None
    return check_outputs


def _all(*checks: Callable) -> Callable[[Node, Graph], str | None]:
    def check_all(node: Node, graph: Graph) -> str | None:
        return next((reason for reason in (check(node, graph) for check in checks) if reason), None)
    return check_all


def _no_check(node: Node, graph: Graph) -> None:
    return None


def pad_widths(node: Node, graph: Graph) -> list[tuple[int, int]]:
    """(before, after) per axis of a Pad (opset >= 11: pads and axes are inputs; negative: a crop)."""
    rank = len(graph.shapes[node.inputs[0]])
    pads = np.asarray(graph.constants[node.inputs[1]]).reshape(-1).tolist()
    axes = (np.asarray(graph.constants[node.inputs[3]]).reshape(-1) % rank).tolist() \
        if len(node.inputs) > 3 and node.inputs[3] else list(range(rank))
    widths = [(0, 0)] * rank
    for index, axis in enumerate(axes):
        widths[axis] = (int(pads[index]), int(pads[len(axes) + index]))
    return widths


def _pad_check(node: Node, graph: Graph) -> str | None:
    """A Pad of any mode ONNX defines (wrap from opset 19), on any axis but the batch; constant pads, value and
    axes."""
    modes = PAD_MODES if graph.opset >= 19 else PAD_MODES[:-1]
    reason = _all(_attribute("mode", modes, "constant"), _constant(1, 2, 3))(node, graph)
    if reason or node.inputs[0] not in graph.shapes:
        return reason
    if pad_widths(node, graph)[0] != (0, 0):
        return "padding the batch axis is not supported"
    return None


def _folded_pad(node: Node, graph: Graph) -> list[int] | None:
    """(top, left, bottom, right) of a Pad that convolutions absorb: zeros on height and width only, read
    only by convolutions (as their input), not a graph output; else None."""
    if node.attrs.get("mode", b"constant") not in (b"constant", "constant") or len(graph.shapes[node.inputs[0]]) != 4:
        return None
    (n0, n1), (c0, c1), (t, b), (left, r) = pad_widths(node, graph)
    value = graph.constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    readers = graph.consumers().get(node.outputs[0], [])
    if (n0, n1, c0, c1) != (0, 0, 0, 0) or min(t, b, left, r) < 0 or (value is not None and np.any(value != 0)) \
            or not readers or node.outputs[0] in graph.outputs \
            or any(reader.op != "Conv" or reader.inputs[0] != node.outputs[0] for reader in readers):
        return None
    return [t, left, b, r]


def _transpose_pads(node: Node, graph: Graph) -> list[int] | str:
    """A ConvTranspose's explicit ``pads``, with ``output_shape`` and ``auto_pad`` read as the pads they stand
    for, or the reason they cannot be. ONNX ConvTranspose-11: ``total = s·(in − 1) + output_padding + d·(k − 1)
    + 1 − out`` (``out = in·s`` under SAME_*, no padding where that exceeds the full output), split with the
    odd one at the end under SAME_UPPER and at the start otherwise (onnxruntime does the same); a negative end
    pad is that much more output at the end (what ``output_padding`` does)."""
    auto_pad = _text(node.attrs.get("auto_pad", b"NOTSET"))
    output_shape = node.attrs.get("output_shape")
    spatial = graph.shapes[node.inputs[0]][2:]
    if output_shape is None and auto_pad in ("NOTSET", ""):
        return list(node.attrs.get("pads", [0] * 2 * len(spatial)))
    if output_shape is None and auto_pad == "VALID":
        return [0] * 2 * len(spatial)
    kernel = graph.shapes[node.inputs[1]][2:]
    strides, dilations, extra = _transpose_steps(node, len(spatial))
    if output_shape is None and any(extra):
        return ("auto_pad with output_padding is not supported (ONNX's shape inference and its operator text give "
                "different output sizes); give explicit pads")
    targets = list(output_shape) if output_shape is not None else [size * stride for size, stride in
                                                                   zip(spatial, strides)]
    begin, end = [], []
    for size, k, stride, dilation, more, out in zip(spatial, kernel, strides, dilations, extra, targets):
        total = stride * (size - 1) + more + dilation * (k - 1) + 1 - out
        if total < 0 and output_shape is None:    # SAME_* beyond the full output: no padding (as onnxruntime)
            total = 0
        small, large = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else large)
        end.append(large if auto_pad == "SAME_UPPER" else small)
        if begin[-1] < 0:
            return (f"an output size of {out} would start before the full transposed convolution (of "
                    f"{out + total}); give explicit pads")
    return [*begin, *end]


def _transpose_steps(node: Node, rank: int) -> tuple[tuple[int, ...], ...]:
    """A ConvTranspose's strides, dilations and output padding, ONNX's defaults filled in."""
    return tuple(tuple(node.attrs.get(name, (default,) * rank)) for name, default in
                 (("strides", 1), ("dilations", 1), ("output_padding", 0)))


def _transpose_geometry(node: Node, graph: Graph) -> str | None:
    """A ConvTranspose whose pads are known (:func:`_transpose_pads`) and give the output shape inference gave
    (where inference gave none, :func:`check` names the unknown shape)."""
    if any(name not in graph.shapes for name in (*node.inputs[:2], node.outputs[0])):
        return None
    pads = _transpose_pads(node, graph)
    if isinstance(pads, str):
        return pads
    spatial, kernel = graph.shapes[node.inputs[0]][2:], graph.shapes[node.inputs[1]][2:]
    rank = len(spatial)
    strides, dilations, extra = _transpose_steps(node, rank)
    sizes = [stride * (size - 1) + more + dilation * (k - 1) + 1 - pads[axis] - pads[axis + rank] for axis, (
        size, k, stride, dilation, more) in enumerate(zip(spatial, kernel, strides, dilations, extra))]
    for more, end, stride, dilation in zip(extra, pads[rank:], strides, dilations):
        if more - min(0, end) >= max(stride, dilation):
            return (f"an output_padding of {more - min(0, end)} (with output_shape's share) is not below "
                    f"max(stride, dilation) = {max(stride, dilation)}")
    inferred = list(graph.shapes[node.outputs[0]][2:])
    if sizes != inferred:
        return f"its pads {pads} give an output of {sizes}, ONNX's shape inference {inferred}"
    return None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _linear_form(node: Node, graph: Graph) -> str | None:
    """A linear Resize the NPU runs (compiler/resize.py), else the reason."""
    mode = node.attrs.get("mode", b"nearest")
    if _text(mode) != "linear":
        return None
    form = linear_form(node, graph)
    return form if isinstance(form, str) else None


def softmax_axes(node: Node, graph: Graph) -> tuple[int, ...]:
    """The axes a Softmax normalizes over: before opset 13 the input is seen as 2-D, [shape[:axis],
    shape[axis:]] (axis 1 by default); from 13 on, one axis (-1 by default). The opset is the graph's, or
    for onnxruntime's QLinearSoftmax its ``opset`` attribute."""
    rank = len(graph.shapes[node.inputs[0]])
    opset = _softmax_opset(node, graph)
    axis = int(node.attrs.get("axis", 1 if opset < 13 else -1))
    axis = axis + rank if axis < 0 else axis
    return tuple(range(axis, rank)) if opset < 13 else (axis,)


def _softmax_opset(node: Node, graph: Graph) -> int:
    return int(node.attrs.get("opset", graph.opset))


def _softmax_check(node: Node, graph: Graph) -> str | None:
    """A Softmax whose axis lies within its input's dimensions."""
    shape = graph.shapes.get(node.inputs[0])
    if shape is None:
        return None
    rank = len(shape)
    axis = int(node.attrs.get("axis", 1 if _softmax_opset(node, graph) < 13 else -1))
    if not -rank <= axis < rank:
        return f"axis = {axis} outside the input's {rank} dimensions"
    return None


def softmax_rows_consecutive(shape: tuple[int, ...], axes: tuple[int, ...]) -> bool:
    """Whether each softmax row (the elements over ``axes``) is a run of consecutive elements in the
    channels-last layout, as the SOFTMAX command reads it."""
    rank = len(shape)
    stored = (0, *range(2, rank), 1) if rank > 2 else tuple(range(rank))     # channels-last order
    reduced = [axis in axes for axis in stored if shape[axis] > 1]
    return reduced == sorted(reduced)


def _undilated(node: Node, graph: Graph) -> str | None:
    """An AveragePool without dilations (opset 19 has them; the pooling unit averages whole windows)."""
    dilations = list(node.attrs.get("dilations", []))
    return f"dilations = {dilations}: only 1 is supported" if any(value != 1 for value in dilations) else None


def _one_image(node: Node, graph: Graph) -> str | None:
    """A Resize that keeps the batch axis (the NPU runs one image; a nearest Resize to a batch of 65536 would
    take minutes to gather before the lowering refused it)."""
    x, y = graph.shapes.get(node.inputs[0]), graph.shapes.get(node.outputs[0])
    if x and y and x[0] != y[0]:
        return f"a Resize of the batch axis ({x[0]} -> {y[0]}) is not supported"
    return None


def _concat_check(node: Node, graph: Graph) -> str | None:
    """A Concat along any axis but the batch."""
    shape = graph.shapes.get(node.outputs[0])
    if shape is not None and int(node.attrs.get("axis", 1)) % max(len(shape), 1) == 0:
        return "concatenating along the batch axis is not supported"
    return None


def _prelu_check(node: Node, graph: Graph) -> str | None:
    """A PRelu with constant slopes, one for all or one per channel (shape [C, 1, 1] or [1, C, 1, 1]): the
    quantizer applies a slope per channel, where ONNX would broadcast a [W] slope along the width."""
    reason = _constant(1)(node, graph)
    x, slope = graph.shapes.get(node.inputs[0]), graph.shapes.get(node.inputs[1])
    if reason or x is None or slope is None or math.prod(slope) == 1:
        return reason
    aligned = (1,) * (len(x) - len(slope)) + tuple(slope)
    if len(aligned) != len(x) or len(x) < 2 or math.prod(aligned) != aligned[1]:
        return f"slopes of shape {list(slope)}: one value, or one per channel ([C, 1, 1]) only"
    return None


def _inputs(minimum: int) -> Callable[[Node, Graph], str | None]:
    """A contrib operator (which onnx's checker does not know) has at least ``minimum`` inputs."""
    def check_count(node: Node, graph: Graph) -> str | None:
        return None if len(node.inputs) >= minimum else f"{len(node.inputs)} inputs, at least {minimum} expected"
    return check_count


def _qlinear_concat(node: Node, graph: Graph) -> str | None:
    """QLinearConcat: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input, all but X constant."""
    if len(node.inputs) < 5 or (len(node.inputs) - 2) % 3:
        return f"{len(node.inputs)} inputs, expected Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples"
    return _constant(*(position for position in range(len(node.inputs)) if position % 3 != 2))(node, graph)


# What the whole compiler takes today (front end, quantizer, lowering); an operator joins when all of them do.
_SUPPORTED: dict[str, Callable[[Node, Graph], str | None]] = {
    "Conv": _rank(4, _constant(1, 2)),
    "ConvTranspose": _rank(4, _constant(1, 2), _transpose_geometry),
    "Gemm": _rank(2, _constant(1, 2), _attribute("transA", (0,), 0)),
    "MatMul": _rank(2, _constant(1)),
    "BatchNormalization": _rank(4, _constant(1, 2, 3, 4), _attribute("training_mode", (0,), 0), _unused_outputs(1)),
    "Relu": _no_check, "LeakyRelu": _no_check, "PRelu": _prelu_check, "Clip": _constant(1, 2),
    "Sigmoid": _no_check, "Tanh": _no_check, "HardSigmoid": _no_check, "HardSwish": _no_check, "Swish": _no_check,
    "Gelu": _no_check, "Exp": _no_check, "Softmax": _softmax_check,
    "MaxPool": _rank(4, _attribute("storage_order", (0,), 0), _unused_outputs(1)),
    "AveragePool": _rank(4, _undilated), "GlobalAveragePool": _rank(4),
    "Add": _no_check, "Sub": _no_check, "Mul": _no_check, "Div": _constant(1),
    "Concat": _concat_check,
    "Resize": _rank(4, _attribute("mode", ("nearest", "linear"), "nearest"), _constant(1, 2, 3), _one_image,
                    _linear_form),
    "Pad": _pad_check,
    "Slice": _constant(1, 2, 3, 4), "Split": _constant(1),
    "Reshape": _constant(1), "Flatten": _no_check, "Transpose": _no_check, "Squeeze": _constant(1),
    "Unsqueeze": _constant(1),
    "Identity": _no_check, "Dropout": _all(_constant(1, 2), _unused_outputs(1)),
    "Cast": _no_check,
    # pre-quantized models (QDQ and QOperator, as onnxruntime.quantization writes them; compiler/prequantized.py)
    "QuantizeLinear": _constant(1, 2), "DequantizeLinear": _constant(1, 2),
    "QLinearConv": _rank(4, _constant(1, 2, 3, 4, 5, 6, 7, 8)),
    "QLinearMatMul": _rank(2, _constant(1, 2, 3, 4, 5, 6, 7)),
}
# onnxruntime's contrib operators that its quantizer writes
_CONTRIB: dict[str, Callable[[Node, Graph], str | None]] = {
    "QGemm": _rank(2, _inputs(6), _constant(1, 2, 3, 4, 5, 6, 7, 8), _attribute("transA", (0,), 0),
                   _attribute("alpha", (1.0,), 1.0)),
    "QLinearGlobalAveragePool": _rank(4, _inputs(5), _constant(1, 2, 3, 4), _attribute("channels_last", (0,), 0)),
    "QLinearAdd": _all(_inputs(7), _constant(1, 2, 4, 5, 6, 7)),
    "QLinearMul": _all(_inputs(7), _constant(1, 2, 4, 5, 6, 7)),
    "QLinearSigmoid": _all(_inputs(4), _constant(1, 2, 3, 4)),
    "QLinearLeakyRelu": _all(_inputs(4), _constant(1, 2, 3, 4)),
    "QLinearAveragePool": _rank(4, _inputs(4), _constant(1, 2, 3, 4), _attribute("channels_last", (0,), 0)),
    "QLinearSoftmax": _all(_inputs(4), _constant(1, 2, 3, 4), _softmax_check), "QLinearConcat": _qlinear_concat,
}


PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _unsupported(node: Node, graph: Graph) -> str | None:
    if node.domain == "com.microsoft" and node.op in _CONTRIB:
        return _CONTRIB[node.op](node, graph)
    if node.domain not in ("", "ai.onnx"):
        return "operators outside the default ONNX domain are not supported"
    check_node = _SUPPORTED.get(node.op)
    if check_node is None:
        return "operator not supported"
    if node.op == "Cast" and graph.dtypes.get(node.outputs[0]) != graph.dtypes.get(node.inputs[0]):
        return "casts between types are not supported (only a Cast to the type the tensor has)"
    if node.op == "Dropout" and len(node.inputs) > 2 and node.inputs[2] and graph.constants.get(
            node.inputs[2], np.array(True)).any():
        return "training_mode must be a constant false"
    return check_node(node, graph)


# --- rewrites -----------------------------------------------------------------------------------------------
def _drop_no_ops(graph: Graph) -> Graph:
    """Remove Identity, Dropout and same-type Cast: their consumers read the input instead. Where the no-op's
    output is a graph output, the producer of its input writes that name instead."""
    nodes, renamed = [], {}
    producer = graph.producer()
    for node in graph.nodes:
        node = replace(node, inputs=tuple(renamed.get(name, name) for name in node.inputs))
        if node.op not in ("Identity", "Dropout", "Cast"):
            nodes.append(node)
            continue
        source, target = node.inputs[0], node.outputs[0]
        if target in graph.outputs and source in producer and source not in graph.outputs:
            renamed[source] = target      # keep the output's name: rename where it is made
            nodes = [replace(n, outputs=tuple(target if o == source else o for o in n.outputs),
                             inputs=tuple(target if i == source else i for i in n.inputs)) for n in nodes]
            graph.shapes[target], graph.dtypes[target] = graph.shapes[source], graph.dtypes[source]
        elif target in graph.outputs:
            nodes.append(replace(node, op="Identity", inputs=(source,), outputs=(target,), attrs={}))
        else:
            renamed[target] = source
    graph.nodes = nodes
    return graph


def _fold_batch_norms(graph: Graph) -> Graph:
    """Conv or ConvTranspose -> BatchNormalization, the conv feeding only the BN: w' = w * g / sqrt(v + eps),
    b' = (b - mean) * g / sqrt(v + eps) + beta, in float64. Other BNs stay (the quantizer runs them as a
    per-channel scale)."""
    consumers, producer = graph.consumers(), graph.producer()
    folded: dict[str, Node] = {}
    dropped: set[str] = set()
    for node in graph.nodes:
        if node.op != "BatchNormalization":
            continue
        conv = producer.get(node.inputs[0])
        if (conv is None or conv.op not in ("Conv", "ConvTranspose") or len(consumers.get(node.inputs[0], ())) != 1
                or node.inputs[0] in graph.outputs):
            continue
        scale, beta, mean, var = (graph.constants[name].astype(np.float64) for name in node.inputs[1:5])
        factor = scale / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
        weight = graph.constants[conv.inputs[1]].astype(np.float64)
        bias = (graph.constants[conv.inputs[2]].astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2]
                else np.zeros(factor.size))
        weight_name, bias_name = f"{conv.name}/bn_folded_weight", f"{conv.name}/bn_folded_bias"
        if conv.op == "ConvTranspose":    # weights [C, K/G, KH, KW]: output channel g * K/G + k is [g-th group, k]
            groups = int(conv.attrs.get("group", 1))
            per_output = factor.reshape(groups, 1, -1, 1, 1)
            scaled = (weight.reshape(groups, -1, *weight.shape[1:]) * per_output).reshape(weight.shape)
        else:
            scaled = weight * factor.reshape(-1, 1, 1, 1)
        graph.constants[weight_name] = scaled.astype(np.float32)
        graph.constants[bias_name] = ((bias - mean) * factor + beta).astype(np.float32)
        for name in (weight_name, bias_name):
            graph.shapes[name], graph.dtypes[name] = graph.constants[name].shape, np.dtype(np.float32)
        folded[conv.name] = replace(conv, inputs=(conv.inputs[0], weight_name, bias_name), outputs=(node.outputs[0],))
        dropped.add(node.name)
    graph.nodes = [folded.get(node.name, node) for node in graph.nodes if node.name not in dropped]
    used = {name for node in graph.nodes for name in node.inputs}
    graph.constants = {name: value for name, value in graph.constants.items() if name in used}
    return graph


def _fold_pads(graph: Graph) -> Graph:
    """A zero Pad before convolutions (``_folded_pad``) becomes part of their padding; other Pads stay."""
    pads = {node.outputs[0]: (node, extra) for node in graph.nodes if node.op == "Pad"
            and (extra := _folded_pad(node, graph)) is not None}
    nodes = []
    for node in graph.nodes:
        if node.op == "Pad" and node.outputs[0] in pads:
            continue
        if node.op == "Conv" and node.inputs[0] in pads:
            pad_node, extra = pads[node.inputs[0]]
            own = node.attrs.get("pads", [0, 0, 0, 0])
            node = replace(node, inputs=(pad_node.inputs[0], *node.inputs[1:]),
                           attrs={**node.attrs, "pads": [a + b for a, b in zip(own, extra)]})
        nodes.append(node)
    graph.nodes = nodes
    return graph


def _explicit_transpose_pads(node: Node, graph: Graph) -> Node:
    """A ConvTranspose with ``pads`` for its ``output_shape`` or ``auto_pad`` (checked by :func:`check`); a
    negative end pad moves into ``output_padding``."""
    attrs = {key: value for key, value in node.attrs.items() if key not in ("auto_pad", "output_shape")}
    pads = _transpose_pads(node, graph)
    rank = len(pads) // 2
    extra = [more - min(0, end) for more, end in zip(attrs.get("output_padding", (0,) * rank), pads[rank:])]
    return replace(node, attrs={**attrs, "pads": [*pads[:rank], *(max(0, end) for end in pads[rank:])],
                                "output_padding": extra})


def _explicit_pads(node: Node, graph: Graph) -> Node:
    """auto_pad (SAME_UPPER, SAME_LOWER, VALID) as the explicit ``pads`` it stands for."""
    auto_pad = _text(node.attrs.get("auto_pad", b"NOTSET"))
    attrs = {key: value for key, value in node.attrs.items() if key != "auto_pad"}
    if auto_pad in ("NOTSET", ""):
        return replace(node, attrs=attrs)
    spatial = graph.shapes[node.inputs[0]][2:]
    if node.op in ("Conv", "QLinearConv"):
        kernel = graph.shapes[node.inputs[3 if node.op == "QLinearConv" else 1]][2:]
    else:
        kernel = tuple(node.attrs["kernel_shape"])
    strides = tuple(node.attrs.get("strides", (1,) * len(spatial)))
    dilations = tuple(node.attrs.get("dilations", (1,) * len(spatial)))
    begin, end = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations):
        if auto_pad == "VALID":
            total = 0
        else:
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else large)
        end.append(large if auto_pad == "SAME_UPPER" else small)
    return replace(node, attrs={**attrs, "pads": [*begin, *end]})


def conv_form(node: Node, constants: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, dict]:
    """A ConvTranspose as (weights [K, C/G, KH, KW], bias, geometry) of its conv form (qir.QConv ``upsample``):
    each group's [C/G, K/G] weight matrix transposed and the kernel flipped; the padding becomes
    d * (k - 1) - pad, plus output_padding at the end (ONNX: out = s (in - 1) + output_padding + d (k - 1) + 1
    - pads)."""
    weight = constants[node.inputs[1]].astype(np.float64)            # [C, K/G, KH, KW]
    groups = int(node.attrs.get("group", 1))
    c, kg, kh, kw = weight.shape
    conv = weight.reshape(groups, c // groups, kg, kh, kw).transpose(0, 2, 1, 3, 4)[..., ::-1, ::-1]
    conv = np.ascontiguousarray(conv.reshape(groups * kg, c // groups, kh, kw))
    dilation = tuple(node.attrs.get("dilations", (1, 1)))
    top, left, bottom, right = node.attrs.get("pads", (0, 0, 0, 0))
    extra_h, extra_w = node.attrs.get("output_padding", (0, 0))
    reach_h, reach_w = dilation[0] * (kh - 1), dilation[1] * (kw - 1)
    geometry = dict(upsample=tuple(node.attrs.get("strides", (1, 1))), dilation=dilation, groups=groups,
                    padding=(reach_h - top, reach_w - left, reach_h - bottom + extra_h, reach_w - right + extra_w))
    bias = constants[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else np.zeros(conv.shape[0])
    return conv, bias.astype(np.float64), geometry
