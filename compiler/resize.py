"""Resize as the NPU runs it, its arithmetic taken from ONNX's own reference implementation.

* Nearest: a gather; each output element's input index is onnx's reference Resize applied to the indices.
* Linear (bilinear) by an integer factor s per axis: along each axis every output is a fixed combination of
  input neighbours that repeats with period s, the coefficients f(t) of input i for output o = s * i + t, the
  edges clamped. That is a depthwise transposed convolution with the kernel f_h x f_w over the input with its
  edge pixels repeated once (a gather); its integer form is f * den with den the smallest denominator of the
  coefficients, the requantizer dividing by den_h * den_w (docs/compiler.md §3). The coefficients and the edge
  behaviour are read off the reference Resize of the node's own attributes and scale, and checked against it
  on the actual size, so every coordinate transformation that has this form is taken.
* Linear otherwise (align_corners, whose coefficients drift across the image; factors that are not
  integers): separable, one resize matrix per axis (at most two inputs per output, fractions of one
  denominator up to 127), each applied by the MAC array as a 1x1 conv whose input channels are that axis
  (the tensor transposed by gathers around it) and whose requantizer divides by the denominator: two
  roundings, so within one output step (docs/compiler.md §3).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from aipu.compiler.graph import Graph, Node
from aipu.sim.machine.arch import DTYPE_NUMPY, DType

_MAX_WEIGHT = int(np.iinfo(DTYPE_NUMPY[DType.INT8]).max)     # the 2-D kernel's integers are CONV's int8 weights
_TOLERANCE = 1e-9
_FLOAT32_TOLERANCE = 1e-6   # ONNX computes align_corners' coordinates in float32: weights off exact by ~1e-8


def _reference(node: Node, graph: Graph, x: np.ndarray, scales=None, sizes=None) -> np.ndarray:
    """onnx's reference Resize with ``node``'s attributes on ``x`` (float64); ``scales``/``sizes`` replace the
    node's own (for a one-axis probe), else the node's constants are used."""
    import onnx
    import onnx.reference
    from onnx import helper, numpy_helper

    inputs, constants = ["x", "", "", ""], []
    given = {2: scales, 3: sizes} if scales is not None or sizes is not None else {
        position: graph.constants[name] for position, name in enumerate(node.inputs) if position and name}
    for position, value in given.items():
        if value is not None:
            inputs[position] = f"input{position}"
            constants.append(numpy_helper.from_array(np.asarray(value), inputs[position]))
    resize = helper.make_node("Resize", inputs[:max(i for i, name in enumerate(inputs) if name) + 1], ["y"],
                              **node.attrs)
    model = helper.make_model(
        helper.make_graph([resize], "resize", [helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE,
                                                                             list(x.shape))],
                          [helper.make_empty_tensor_value_info("y")], constants),
        opset_imports=[helper.make_opsetid("", graph.opset)])
    return onnx.reference.ReferenceEvaluator(model).run(None, {"x": x.astype(np.float64)})[0]


def nearest_gather(node: Node, graph: Graph) -> np.ndarray:
    """Each output element's flat input index of a nearest-neighbour Resize, as ONNX defines it for the node's
    attributes (coordinate transformation, nearest mode, scales or sizes): onnx's reference Resize applied to
    the input's indices (exact in float64)."""
    shape = graph.shapes[node.inputs[0]]
    indices = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
    return np.rint(_reference(node, graph, indices)).astype(np.int64).reshape(-1)


@dataclass(frozen=True)
class Bilinear:
    """A linear Resize as a depthwise transposed conv over the edge-repeated input: ``edges`` is the gather
    that repeats the border (flat NCHW input index per element of [N, C, H + 2, W + 2]); ``kernel`` the
    integer ConvTranspose kernel [C, 1, KH, KW]; ``strides`` and ``pads`` its geometry; the result is the
    sum divided by ``denominator``."""

    edges: np.ndarray
    kernel: np.ndarray
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]
    denominator: int


def _axis_matrix(node: Node, graph: Graph, axis: int, length: int, out: int) -> np.ndarray:
    """The [outputs, length] resize matrix along ``axis`` for an input of ``length``: the reference on an
    identity input (channel c of the probe holds input c, so output channel c is column c of the matrix), with
    the node's scale along the axis if it gives scales, else ``out`` as the size."""
    shape = [1, length, 1, 1]
    shape[axis] = length
    probe = np.eye(length).reshape(shape)
    if len(node.inputs) > 2 and node.inputs[2] and graph.constants[node.inputs[2]].size:
        scale = [1.0, 1.0, 1.0, 1.0]
        scale[axis] = float(graph.constants[node.inputs[2]][axis])
        matrix = _reference(node, graph, probe, scales=np.array(scale, np.float32))
    else:
        matrix = _reference(node, graph, probe, sizes=np.array([*shape[:axis], out, *shape[axis + 1:]]))
    return matrix.reshape(length, -1).T


def _axis_coefficients(node: Node, graph: Graph, axis: int, length: int,
                       factor: int) -> tuple[dict[int, float], np.ndarray]:
    """The resize matrix along ``axis`` for an input of ``length`` and f(t), the coefficient of input i in
    output factor * i + t, taken from its middle column."""
    matrix = _axis_matrix(node, graph, axis, length, factor * length)
    middle = length // 2
    return {o - factor * middle: float(matrix[o, middle]) for o in range(matrix.shape[0])
            if abs(matrix[o, middle]) > _TOLERANCE}, matrix


def _denominator(values, tolerance: float = _TOLERANCE) -> int | None:
    """The smallest d with every value * d an integer (within ``tolerance``), if small enough for int8
    weights."""
    common = 1
    for value in values:
        fraction = Fraction(value).limit_denominator(_MAX_WEIGHT)
        if abs(float(fraction) - value) > tolerance:
            return None
        common = common * fraction.denominator // np.gcd(common, fraction.denominator)
    return common


def _unsupported_linear(node: Node, graph: Graph) -> str | None:
    """What no form of a linear Resize takes."""
    if "axes" in node.attrs:
        return "the axes attribute is not supported"
    mode = node.attrs.get("coordinate_transformation_mode", b"half_pixel")
    if (mode.decode() if isinstance(mode, bytes) else mode) == "tf_crop_and_resize":
        return "tf_crop_and_resize is not supported"
    if node.inputs[0] not in graph.shapes or node.outputs[0] not in graph.shapes:
        return "the input and output shapes must be known"
    if graph.shapes[node.outputs[0]][:2] != graph.shapes[node.inputs[0]][:2]:
        return "a linear Resize of the batch or channel axis is not supported"
    return None


def linear_form(node: Node, graph: Graph) -> Bilinear | Separable | str:
    """How the NPU runs a linear Resize: the transposed-conv form if it has one, else the separable one, else
    the reasons neither applies."""
    if (reason := _unsupported_linear(node, graph)) is not None:
        return reason
    form = bilinear(node, graph)
    if not isinstance(form, str):
        return form
    other = separable(node, graph)
    return other if not isinstance(other, str) else f"{form}; {other}"


@dataclass(frozen=True)
class Separable:
    """A linear Resize as one resize matrix per spatial axis: ``numerators[a]`` [out, in] integers over
    ``denominators[a]`` (each at most int8's largest value), applied height first."""

    numerators: tuple[np.ndarray, np.ndarray]
    denominators: tuple[int, int]


def separable(node: Node, graph: Graph) -> Separable | str:
    """The separable form of a linear Resize, or the reason it has none."""
    _, _, *sizes = graph.shapes[node.inputs[0]]
    _, _, *outs = graph.shapes[node.outputs[0]]
    numerators, denominators = [], []
    for axis, length, out in zip((2, 3), sizes, outs):
        matrix = _axis_matrix(node, graph, axis, length, out)
        if matrix.shape[0] != out:
            return f"the per-axis resize gives {matrix.shape[0]} outputs, not {out}"
        denominator = _denominator(matrix[np.abs(matrix) > _FLOAT32_TOLERANCE].tolist(), _FLOAT32_TOLERANCE)
        if denominator is None or denominator > _MAX_WEIGHT:
            return "nor are its per-axis interpolation weights fractions of a denominator up to 127"
        numerators.append(np.rint(matrix * denominator).astype(np.int64))    # the exact fractions
        denominators.append(denominator)
    return Separable(tuple(numerators), tuple(denominators))


def bilinear(node: Node, graph: Graph) -> Bilinear | str:
    """The transposed-conv form of a linear Resize (whose other checks :func:`linear_form` made), or the
    reason it has none."""
    n, c, h, w = graph.shapes[node.inputs[0]]
    out = graph.shapes[node.outputs[0]]
    if out[2] % h or out[3] % w:
        return f"linear Resize by integer factors of height and width only ({h}x{w} -> {out[2]}x{out[3]})"
    factors = (out[2] // h, out[3] // w)
    axes = []
    for axis, length, factor in ((2, h, factors[0]), (3, w, factors[1])):
        # the coefficients from a probe long enough to have an interior, checked on the real length
        coefficients, _ = _axis_coefficients(node, graph, axis, max(length, 9), factor)
        _, matrix = _axis_coefficients(node, graph, axis, length, factor)
        predicted = np.zeros_like(matrix)
        for o in range(matrix.shape[0]):
            for t, value in coefficients.items():
                i, rest = divmod(o - t, factor)
                if rest == 0 and -1 <= i <= length:
                    predicted[o, min(max(i, 0), length - 1)] += value
                elif rest == 0:
                    return "the resize reaches beyond the input's edge pixel"
        if not np.allclose(predicted, matrix, atol=_TOLERANCE):
            return "this coordinate transformation is not one fixed kernel (e.g. align_corners)"
        axes.append(coefficients)
    denominators = [_denominator(coefficients.values()) for coefficients in axes]
    if None in denominators or np.prod(denominators) > _MAX_WEIGHT:
        return "the interpolation weights are not int8 fractions (factor too large)"
    kernels, pads = [], []
    for coefficients, factor, denominator in zip(axes, factors, denominators):
        first, last = min(coefficients), max(coefficients)
        kernels.append(np.array([round(coefficients.get(t, 0.0) * denominator) for t in range(first, last + 1)]))
        pads.append((factor - first, last + 1))     # ConvTranspose pads giving factor * length outputs
    kernel = np.outer(*kernels)
    indices = np.arange(n * c * h * w).reshape(n, c, h, w)
    edges = np.pad(indices, ((0, 0), (0, 0), (1, 1), (1, 1)), mode="edge").reshape(-1)
    return Bilinear(edges, np.broadcast_to(kernel, (c, 1, *kernel.shape)).copy(), factors,
                    (pads[0][0], pads[1][0], pads[0][1], pads[1][1]), int(np.prod(denominators)))
