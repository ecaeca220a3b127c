"""Slice and Split as data movement: each output is a gather of its input's elements (compiler/lowering/layout.py
cuts gathers into DMA patterns), found by applying the operator to the input's element indices.

Only constant starts, ends, axes, steps and split sizes are taken (checked in normalize); the output shapes
come from shape inference, and a gather that disagrees with them is refused rather than trusted.
"""
from __future__ import annotations

import math

import numpy as np

from aipu.compiler.graph import Graph, Node
from aipu.sim.machine.errors import InputError


def slice_gathers(node: Node, graph: Graph) -> list[tuple[str, np.ndarray]]:
    """(output name, each output element's flat input index in NCHW order) for a Slice or a Split node."""
    shape = graph.shapes[node.inputs[0]]
    indices = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    if node.op == "Slice":
        parts = [(node.outputs[0], indices[_slices(node, graph, len(shape))])]
    else:
        parts = _split(node, graph, indices)
    for name, part in parts:
        if part.shape != tuple(graph.shapes[name]):
            raise InputError(f"node {node.name!r} ({node.op}) output {name!r}", list(part.shape),
                             f"the shape inference gave, {list(graph.shapes[name])}")
    return [(name, part.reshape(-1)) for name, part in parts]


def _constant(graph: Graph, node: Node, position: int) -> np.ndarray | None:
    name = node.inputs[position] if position < len(node.inputs) else ""
    return graph.constants[name].astype(np.int64).reshape(-1) if name else None


def _slices(node: Node, graph: Graph, rank: int) -> tuple[slice, ...]:
    """ONNX Slice's starts, ends, axes and steps (inputs from opset 10, attributes before) as numpy slices,
    which clamp out-of-range starts and ends as ONNX does."""
    if len(node.inputs) > 1:
        starts, ends = _constant(graph, node, 1), _constant(graph, node, 2)
        axes, steps = _constant(graph, node, 3), _constant(graph, node, 4)
    else:
        starts, ends = np.array(node.attrs["starts"]), np.array(node.attrs["ends"])
        axes, steps = np.array(node.attrs.get("axes", range(len(starts)))), None
    axes = np.arange(len(starts)) if axes is None else axes
    steps = np.ones(len(starts), np.int64) if steps is None else steps
    chosen = [slice(None)] * rank
    for axis, start, end, step in zip(axes, starts, ends, steps):
        if step == 0:
            raise InputError(f"node {node.name!r} (Slice) steps", steps.tolist(), "non-zero steps")
        chosen[int(axis) % rank] = slice(int(start), int(end), int(step))
    return tuple(chosen)


def _split(node: Node, graph: Graph, indices: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Each output of a Split: consecutive parts along its axis, as long as shape inference made them."""
    axis = int(node.attrs.get("axis", 0)) % indices.ndim
    parts, start = [], 0
    for name in node.outputs:
        length = graph.shapes[name][axis]
        parts.append((name, np.take(indices, np.arange(start, start + length), axis=axis)))
        start += length
    if start != indices.shape[axis]:
        raise InputError(f"node {node.name!r} (Split) parts", [graph.shapes[name][axis] for name in node.outputs],
                         f"lengths that add up to the input's {indices.shape[axis]} on axis {axis}")
    return parts
