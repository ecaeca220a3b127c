"""The rules a model's operators keep that onnx.checker and shape inference do not check, checked on the
shaped graph before anything runs it.

A model can pass onnx.checker and shape inference and still be inconsistent: a Conv whose group does not
divide its channels, whose kernel_shape disagrees with its weights, whose bias has the wrong length; pads
that onnxruntime refuses; a Reshape to another element count; two nodes of one name; an input without a batch
axis; an auto_pad that is none of ONNX's; a graph without outputs; weights that are not finite; a
BatchNormalization that divides by zero. onnxruntime (calibration, the float reference) would stop on each with a traceback of its own; here
each is an InputError naming the node, the attribute, its value and the rule.
"""
from __future__ import annotations

import math

import numpy as np

from aipu.compiler.graph import Graph, Node
from aipu.sim.machine.errors import InputError

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_CONVS = ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv")
_POOLS = ("MaxPool", "AveragePool", "LpPool")


def check_consistency(graph: Graph) -> None:
    """InputError on the first rule the graph breaks (see the module docstring)."""
    if not graph.outputs:
        raise InputError("graph outputs", "none", "at least one output")
    for name in graph.inputs:
        if name in graph.shapes and len(graph.shapes[name]) == 0:
            raise InputError(f"input {name!r} shape", [], "a tensor of rank 1 or more, batch axis first")
    for name, value in graph.constants.items():
        if np.asarray(value).dtype.kind == "f" and not np.all(np.isfinite(value)):
            position = [int(i) for i in np.argwhere(~np.isfinite(np.asarray(value)))[0]]
            raise InputError(f"initializer {name!r}", f"{np.asarray(value)[tuple(position)]} at {position}",
                             "finite values")
    seen = set()
    for node in graph.nodes:
        if node.name in seen:
            raise InputError("node name", node.name, "a name of one node only (two nodes have it)")
        seen.add(node.name)
        where = _Where(node)
        auto_pad = node.attrs.get("auto_pad", b"NOTSET")
        if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) not in AUTO_PADS:
            raise where.error("auto_pad", auto_pad, f"one of {', '.join(AUTO_PADS)}")
        check = _CHECKS.get(node.op)
        if check is not None:
            check(graph, node, where)


class _Where:
    """Builds the errors of one node: ``node 'conv1' (Conv) group = 0: ...``."""

    def __init__(self, node: Node):
        self.prefix = f"node {node.name!r} ({node.op})"

    def error(self, field: str, value, allowed: str) -> InputError:
        return InputError(f"{self.prefix} {field}", value, allowed)


def _shape(graph: Graph, name: str) -> tuple[int, ...] | None:
    if name in graph.constants:
        return tuple(np.shape(graph.constants[name]))
    return graph.shapes.get(name)


def _check_conv(graph: Graph, node: Node, where: _Where) -> None:
    weight_position = 3 if node.op == "QLinearConv" else 1
    if len(node.inputs) <= weight_position:
        return
    x, w = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[weight_position])
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return
    group = node.attrs.get("group", 1)
    transposed = node.op == "ConvTranspose"
    channels, outputs = x[1], w[1] * group if transposed else w[0]
    if not 1 <= group <= channels or channels % group or outputs % group:
        raise where.error("group", group, f"an integer 1 .. {channels} dividing the {channels} input and "
                                          f"{outputs} output channels")
    held, expected = (w[0], channels) if transposed else (w[1], channels // group)
    if held != expected:
        each = "in all" if transposed else "per group"
        raise where.error("weight shape", list(w), f"{expected} input channels {each}, as the input {list(x)} has")
    kernel = node.attrs.get("kernel_shape")
    if kernel is not None and tuple(kernel) != tuple(w[2:]):
        raise where.error("kernel_shape", list(kernel), f"the weights' spatial shape {list(w[2:])}")
    bias_position = 2 if node.op in ("Conv", "ConvTranspose") else None
    if bias_position is not None and len(node.inputs) > bias_position and node.inputs[bias_position]:
        bias = _shape(graph, node.inputs[bias_position])
        if bias is not None and tuple(bias) != (outputs,):
            raise where.error("bias shape", list(bias), f"[{outputs}], one per output channel")
    if not transposed:
        _check_window(where, x[2:], w[2:], node.attrs)


def _check_window(where: _Where, spatial, kernel, attrs: dict) -> None:
    """Every spatial axis gives at least one output: the dilated kernel fits the padded input."""
    pads = list(attrs.get("pads", [0] * 2 * len(spatial)))
    dilations = list(attrs.get("dilations", [1] * len(spatial)))
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return
    for axis, (size, taps) in enumerate(zip(spatial, kernel)):
        padded = size + pads[axis] + pads[axis + len(spatial)]
        if dilations[axis] * (taps - 1) + 1 > padded:
            raise where.error("kernel", list(kernel), f"at most the padded input {padded} on axis {axis + 2} "
                                                      "(no output otherwise)")


def _check_pool(graph: Graph, node: Node, where: _Where) -> None:
    x, kernel = _shape(graph, node.inputs[0]), node.attrs.get("kernel_shape")
    if x is None or kernel is None or len(kernel) != len(x) - 2:
        return
    pads = list(node.attrs.get("pads", [0] * 2 * len(kernel)))
    for axis, taps in enumerate(kernel):
        if max(pads[axis], pads[axis + len(kernel)]) >= taps:
            raise where.error("pads", pads, f"each smaller than the kernel {list(kernel)} along its axis")
    _check_window(where, x[2:], kernel, node.attrs)


def _check_reshape(graph: Graph, node: Node, where: _Where) -> None:
    x = _shape(graph, node.inputs[0])
    target = graph.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if x is None or target is None:
        return
    target = [int(value) for value in np.ravel(target)]
    if node.attrs.get("allowzero", 0) == 0:
        target = [x[axis] if value == 0 and axis < len(x) else value for axis, value in enumerate(target)]
    count, known = math.prod(x), math.prod(value for value in target if value != -1)
    inferred = target.count(-1)
    if inferred > 1 or any(value < -1 for value in target) or (
            count != known if not inferred else known == 0 or count % known):
        raise where.error("shape", target, f"a shape of the input's {count} elements ({list(x)})")


def _check_pad(graph: Graph, node: Node, where: _Where) -> None:
    mode = node.attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    x = _shape(graph, node.inputs[0])
    pads = graph.constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    if mode != "reflect" or x is None or pads is None or np.size(pads) != 2 * len(x):
        return
    pads = [int(value) for value in np.ravel(pads)]
    for axis, size in enumerate(x):
        if max(pads[axis], pads[axis + len(x)]) > size - 1:
            raise where.error("pads", pads, f"at most {size - 1} on axis {axis} for reflect (the input's size "
                                            "less one)")


def _check_resize(graph: Graph, node: Node, where: _Where) -> None:
    scales = graph.constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else None
    if scales is not None and np.size(scales) and not np.all(np.isfinite(scales) & (np.asarray(scales) > 0)):
        raise where.error("scales", [float(value) for value in np.ravel(scales)], "finite positive numbers")


def _check_batch_norm(graph: Graph, node: Node, where: _Where) -> None:
    variance = graph.constants.get(node.inputs[4]) if len(node.inputs) > 4 else None
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    if variance is not None and not np.all(np.asarray(variance, np.float64) + epsilon > 0):
        raise where.error("variance + epsilon", float(np.min(np.asarray(variance, np.float64) + epsilon)),
                          "above 0 for every channel (it is divided by)")


_CHECKS = {**{op: _check_conv for op in _CONVS}, **{op: _check_pool for op in _POOLS}, "Reshape": _check_reshape,
           "Pad": _check_pad, "Resize": _check_resize, "BatchNormalization": _check_batch_norm}
