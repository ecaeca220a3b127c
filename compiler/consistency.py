"""The rules a model's operators keep that onnx.checker and shape inference do not check, checked on the
shaped graph before anything runs it.

A model can pass onnx.checker and shape inference and still be inconsistent: a Conv whose group does not
divide its channels, whose kernel_shape disagrees with its weights, whose bias has the wrong length; window
attributes with a value too many or too few; pads that onnxruntime refuses, or too many or too few of them;
a Reshape to another element count; two nodes of one name; an input without a batch axis; an auto_pad that is
none of ONNX's; an empty list attribute; a graph without outputs; weights that are not finite; a
BatchNormalization with parameters not one per channel, or one that divides by zero, as a Div by 0 does; a
Gemm whose B does not match its input's features; a Transpose perm that is no permutation of the input's
axes; a PRelu slope that does not broadcast to its input; a Squeeze of an empty axes list (onnx and
onnxruntime read it differently) or of axes beyond the rank; an output with no elements, or more than
MAX_ACTIVATION_ELEMENTS (a Resize or Pad asking a small model for gigabytes). onnxruntime (calibration, the
float reference) would stop on many of these with a traceback of its own, the compiler on others; here each
is an InputError naming the node, the attribute, its value and the rule.
"""
from __future__ import annotations

import math

import numpy as np

from aipu.compiler.graph import Graph, Node
from aipu.sim.machine.errors import InputError

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
# elements of a computed tensor: the compiler holds each several times over (calibration, gathers, the layer
# report; a Pad to 2^24 elements peaks at 1.7 GB), so this bounds what a small model asks of memory;
# 1x64x512x512 fits
MAX_ACTIVATION_ELEMENTS = 1 << 24
_ACTIVATION_SIZES = f"at least 1 on every axis and at most {MAX_ACTIVATION_ELEMENTS} elements"
_PER_AXIS = ("kernel_shape", "strides", "dilations", "pads", "output_padding", "output_shape")
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
            position = _position(~np.isfinite(np.asarray(value)))
            raise InputError(f"initializer {name!r}", f"{np.asarray(value)[tuple(position)]} at {position}",
                             "finite values")
    seen = set()
    for node in graph.nodes:
        if node.name in seen:
            raise InputError("node name", node.name, "a name of one node only (two nodes have it)")
        seen.add(node.name)
        _check_node(graph, node, _Where(node))


def _check_node(graph: Graph, node: Node, where: _Where) -> None:
    """A known auto_pad and no empty list attribute; the operator's own rules; then outputs of an activation's
    size (none empty, none beyond MAX_ACTIVATION_ELEMENTS)."""
    auto_pad = node.attrs.get("auto_pad", b"NOTSET")
    if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) not in AUTO_PADS:
        raise where.error("auto_pad", auto_pad, f"one of {', '.join(AUTO_PADS)}")
    for key, value in node.attrs.items():
        if isinstance(value, list) and not value:
            raise where.error(key, [], "a non-empty list")
    check = _CHECKS.get(node.op)
    if check is not None:
        check(graph, node, where)
    for name in node.outputs:
        shape = graph.shapes.get(name, (1,))
        if 0 in shape or math.prod(shape) > MAX_ACTIVATION_ELEMENTS:
            raise where.error(f"output {name!r} shape", list(shape), _ACTIVATION_SIZES)


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


def _constant(graph: Graph, node: Node, position: int) -> np.ndarray | None:
    """The node's input at ``position`` if it is given and a constant, else None."""
    name = node.inputs[position] if position < len(node.inputs) else ""
    return graph.constants.get(name) if name else None


def _check_conv(graph: Graph, node: Node, where: _Where) -> None:
    weight_position = 3 if node.op == "QLinearConv" else 1
    if len(node.inputs) <= weight_position:
        return
    x, w = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[weight_position])
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return
    _check_lengths(where, node.attrs, len(x) - 2)
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


def _check_lengths(where: _Where, attrs: dict, axes: int) -> None:
    """A window's attributes have one value per spatial axis (pads two: the starts, then the ends)."""
    for name in _PER_AXIS:
        value = attrs.get(name)
        count = 2 * axes if name == "pads" else axes
        if value is not None and len(value) != count:
            raise where.error(name, list(value), f"{count} values, {'two' if name == 'pads' else 'one'} per "
                                                 f"spatial axis of the input")


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
    if x is None or kernel is None or len(x) < 3:
        return
    _check_lengths(where, node.attrs, len(x) - 2)
    pads = list(node.attrs.get("pads", [0] * 2 * len(kernel)))
    for axis, taps in enumerate(kernel):
        if max(pads[axis], pads[axis + len(kernel)]) >= taps:
            raise where.error("pads", pads, f"each smaller than the kernel {list(kernel)} along its axis")
    _check_window(where, x[2:], kernel, node.attrs)


def _check_reshape(graph: Graph, node: Node, where: _Where) -> None:
    x, target = _shape(graph, node.inputs[0]), _constant(graph, node, 1)
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
    """Two pads (start, end) per padded axis; reflect pads each below the axis's size."""
    x, pads, axes = _shape(graph, node.inputs[0]), _constant(graph, node, 1), _constant(graph, node, 3)
    if x is None or pads is None:
        return
    count = np.size(axes) if axes is not None else len(x)
    pads = [int(value) for value in np.ravel(pads)]
    if len(pads) != 2 * count:
        raise where.error("pads", pads, f"{2 * count} values, a start and an end for each of the {count} axes "
                                        f"{'in axes' if axes is not None else 'of the input'}")
    mode = node.attrs.get("mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "reflect" or axes is not None:
        return
    for axis, size in enumerate(x):
        if max(pads[axis], pads[axis + len(x)]) > size - 1:
            raise where.error("pads", pads, f"at most {size - 1} on axis {axis} for reflect (the input's size "
                                            "less one)")


def _check_resize(graph: Graph, node: Node, where: _Where) -> None:
    """Scales finite and positive; the output the scales or sizes give is an activation's size (checked here
    as well: shape inference gives no shape for outputs beyond int64)."""
    x, scales, sizes = _shape(graph, node.inputs[0]), _constant(graph, node, 2), _constant(graph, node, 3)
    if scales is not None and np.size(scales):
        field, value = "scales", [float(scale) for scale in np.ravel(scales)]
        if not all(math.isfinite(scale) and scale > 0 for scale in value):
            raise where.error(field, value, "finite positive numbers")
        output = [math.floor(size * scale) for size, scale in zip(x, value)] if x and len(x) == len(value) else []
    elif sizes is not None and np.size(sizes):
        field, value = "sizes", [int(size) for size in np.ravel(sizes)]
        output = value
    else:
        return
    if output and (min(output) < 1 or math.prod(output) > MAX_ACTIVATION_ELEMENTS):
        raise where.error(field, value, f"an output of {_ACTIVATION_SIZES} (these give {output})")


def _check_div(graph: Graph, node: Node, where: _Where) -> None:
    divisor = _constant(graph, node, 1)
    if divisor is not None and np.size(divisor) and not np.all(np.asarray(divisor) != 0):
        raise where.error(f"divisor {node.inputs[1]!r}", f"0 at {_position(np.asarray(divisor) == 0)}",
                          "non-zero values")


def _check_prelu(graph: Graph, node: Node, where: _Where) -> None:
    x, slope = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1]) if len(node.inputs) > 1 else None
    if x is None or slope is None:
        return
    aligned = (None,) * (len(x) - len(slope)) + tuple(slope)
    if len(aligned) != len(x) or any(size not in (None, 1, full) for size, full in zip(aligned, x)):
        raise where.error("slope shape", list(slope), f"broadcastable to the input {list(x)} (each axis 1 or the "
                                                      "input's, aligned at the end)")


def _check_squeeze(graph: Graph, node: Node, where: _Where) -> None:
    """Axes (an input from opset 13, an attribute before) that are not empty and lie within the rank."""
    axes = _constant(graph, node, 1) if len(node.inputs) > 1 else node.attrs.get("axes")
    if axes is None:
        return
    axes = [int(axis) for axis in np.ravel(axes)]
    if not axes:
        raise where.error("axes", [], "at least one axis (onnx reads an empty list as none, onnxruntime as every "
                                      "axis of size 1)")
    x = _shape(graph, node.inputs[0])
    which = "output" if node.op == "Unsqueeze" else "input"
    rank = None if x is None else len(x) + (len(axes) if which == "output" else 0)
    if rank is not None and not all(-rank <= axis < rank for axis in axes):
        raise where.error("axes", axes, f"within -{rank} .. {rank - 1}, the {which}'s rank {rank}")


def _check_transpose(graph: Graph, node: Node, where: _Where) -> None:
    x, perm = _shape(graph, node.inputs[0]), node.attrs.get("perm")
    if x is not None and perm is not None and sorted(perm) != list(range(len(x))):
        raise where.error("perm", list(perm), f"a permutation of 0 .. {len(x) - 1}, the input's axes")


def _check_gemm(graph: Graph, node: Node, where: _Where) -> None:
    """B holds one row (a column with transB) per feature of the input."""
    x, b = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1])
    if x is None or b is None or len(x) != 2 or len(b) != 2:
        return
    features = x[0] if node.attrs.get("transA", 0) else x[1]
    transposed = node.attrs.get("transB", 0)
    if (b[1] if transposed else b[0]) != features:
        raise where.error("B shape", list(b), f"{features} {'columns' if transposed else 'rows'}, one per feature of "
                                              f"the input {list(x)}")


def _position(mask: np.ndarray) -> list[int]:
    """The index of the first true element of ``mask``."""
    return [int(i) for i in np.argwhere(mask)[0]]


def _check_batch_norm(graph: Graph, node: Node, where: _Where) -> None:
    """scale, B, mean and var of one value per channel; var + epsilon above 0."""
    x = _shape(graph, node.inputs[0])
    for position, name in enumerate(("scale", "B", "mean", "var"), 1):
        shape = _shape(graph, node.inputs[position]) if position < len(node.inputs) else None
        if x is not None and len(x) > 1 and shape is not None and tuple(shape) != (x[1],):
            raise where.error(f"{name} shape", list(shape), f"[{x[1]}], one per channel of the input {list(x)}")
    variance = _constant(graph, node, 4)
    epsilon = float(node.attrs.get("epsilon", 1e-5))
    if variance is not None and not np.all(np.asarray(variance, np.float64) + epsilon > 0):
        raise where.error("variance + epsilon", float(np.min(np.asarray(variance, np.float64) + epsilon)),
                          "above 0 for every channel (it is divided by)")


_CHECKS = {**{op: _check_conv for op in _CONVS}, **{op: _check_pool for op in _POOLS}, "Reshape": _check_reshape,
           "Pad": _check_pad, "Resize": _check_resize, "BatchNormalization": _check_batch_norm, "Div": _check_div,
           "PRelu": _check_prelu, "Squeeze": _check_squeeze, "Unsqueeze": _check_squeeze, "Gemm": _check_gemm,
           "Transpose": _check_transpose}
