"""Filter (row) pruning applied to an ONNX model: the pruned network as an ordinary smaller dense model
(docs/pruning.md, "The ONNX pass").

Removing filter j of a Conv removes output channel j: its weights and bias, and then the channel from every
reader of that tensor, in graph order. A channel mask travels through operators that keep channels apart
(activations, pooling, a per-channel constant Add/Mul/Sub/Div/PRelu, whose constant is sliced), through
BatchNormalization (its four vectors sliced), a depthwise Conv (its groups shrink with the channels) and
Concat on the channel axis (the masks joined at their offsets); it stops at a Conv of groups 1 (its input
channels sliced), a Gemm or MatMul after Flatten (their rows sliced). Two pruned branches may meet in an
element-wise operator only with equal masks. Anything else that reads a pruned channel axis, a grouped Conv
other than depthwise, or a pruned channel reaching a graph output is refused with one line naming the node:
the pass never changes what the model computes except by the removed filters. A mask of all ones changes
nothing at all.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aipu.compress.mask_generation import magnitude_mask
from aipu.compress.pruning import PruneGranularity
from aipu.sim.machine.errors import InputError

MAX_ELEMENTS = 1 << 27       # elements of one initializer read into numpy
#: operators whose output channel c depends only on input channel c (extra inputs are scalars or absent)
CHANNELWISE = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu",
                         "Selu", "Softplus", "Identity", "MaxPool", "AveragePool", "GlobalAveragePool",
                         "GlobalMaxPool", "LpPool", "Neg", "Abs"})
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "PRelu", "Max", "Min"})
#: the inputs the pass reads of each operator it edits: (fewest, most)
ARITY = {"Conv": (2, 3), "BatchNormalization": (5, 5), "Gemm": (2, 3), "MatMul": (2, 2),
         **{op: (2, 2) for op in ELEMENTWISE}}


@dataclass
class LayerChange:
    """One node whose parameters the pruning changed: its filters (pruned convs) and weight elements."""

    node: str
    op: str
    filters: tuple[int, int] | None     # (kept, total) for a pruned conv
    weights_before: int
    weights_after: int


@dataclass
class PrunedModel:
    model: onnx.ModelProto
    changes: list[LayerChange] = field(default_factory=list)

    @property
    def weights_before(self) -> int:
        return sum(change.weights_before for change in self.changes)

    @property
    def weights_after(self) -> int:
        return sum(change.weights_after for change in self.changes)


class _Pass:
    """The graph's facts the pass reads (initializers, ranks, channel counts) and its edits."""

    def __init__(self, model: onnx.ModelProto, facts: _Pass | None = None):
        self.model = model
        self.initializers = {tensor.name: tensor for tensor in model.graph.initializer}
        self.arrays: dict[str, np.ndarray] = facts.arrays if facts else {}
        self.shapes = facts.shapes if facts else _inferred_shapes(model)
        self.masks: dict[str, np.ndarray] = {}                   # tensor -> kept channels (axis 1)
        self.edits: dict[tuple[int, int], np.ndarray] = {}       # (node index, input index) -> new initializer
        self.attributes: dict[int, dict] = {}                    # node index -> attributes to set
        self.filters: dict[int, tuple[int, int]] = {}

    def constant(self, name: str, node: onnx.NodeProto) -> np.ndarray:
        if name not in self.initializers:
            raise InputError(f"node {node.name or node.op_type!r} ({node.op_type}) input {name!r}", "computed",
                             "an initializer: the pass slices constant weights only")
        if name not in self.arrays:
            tensor = self.initializers[name]
            if tensor.data_location == onnx.TensorProto.EXTERNAL or math.prod(tensor.dims) > MAX_ELEMENTS:
                raise InputError(f"initializer {name!r}", list(tensor.dims),
                                 f"stored in the model, at most {MAX_ELEMENTS} elements")
            try:
                self.arrays[name] = numpy_helper.to_array(tensor)
            except Exception as exc:   # truncated raw_data, unknown types
                raise InputError(f"initializer {name!r}", "its data", f"readable as its dtype and dims ({exc})") \
                    from None
        return self.arrays[name]

    def slice(self, index: int, node: onnx.NodeProto, position: int, keep: np.ndarray, axis: int) -> None:
        current = self.edits.get((index, position))
        array = self.constant(node.input[position], node) if current is None else current
        if array.ndim <= axis or array.shape[axis] != keep.size:
            raise InputError(f"node {_name(node)} ({node.op_type}) input {node.input[position]!r}", array,
                             f"{keep.size} entries on axis {axis}, one per channel")
        self.edits[(index, position)] = np.compress(keep, array, axis=axis)

    def channels(self, name: str) -> int | None:
        shape = self.shapes.get(name)
        return shape[1] if shape is not None and len(shape) > 1 and shape[1] > 0 else None


def _name(node: onnx.NodeProto) -> str:
    return repr(node.name or node.output[0])


def _inferred_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape as shape inference gives it (-1 for an unknown dimension)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:     # onnx raises its own InferenceError and others on broken models
        raise InputError("model", "shape inference", f"a model onnx can infer shapes of ({exc})"[:300]) from None
    shapes = {}
    for value in (*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output):
        if value.type.HasField("tensor_type") and value.type.tensor_type.HasField("shape"):
            shapes[value.name] = tuple(d.dim_value if d.HasField("dim_value") else -1
                                       for d in value.type.tensor_type.shape.dim)
    for tensor in model.graph.initializer:
        shapes[tensor.name] = tuple(tensor.dims)
    return shapes


def node_attribute(node: onnx.NodeProto, name: str, default):
    """The value of ``node``'s attribute ``name``, or ``default`` without one."""
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _refuse(node: onnx.NodeProto, why: str) -> InputError:
    return InputError(f"node {_name(node)} ({node.op_type})", "reads pruned channels", why)


def _prune_conv_filters(state: _Pass, index: int, node: onnx.NodeProto, mask: np.ndarray) -> None:
    weight = state.constant(node.input[1], node)
    if node_attribute(node, "group", 1) != 1:
        raise InputError(f"node {_name(node)} (Conv) group", node_attribute(node, "group", 1),
                         "1 for filter pruning (a depthwise conv's filters follow its input's channels)")
    if mask.size != weight.shape[0] or not mask.any():
        raise InputError(f"mask of {_name(node)}", mask, f"{weight.shape[0]} entries of 0 or 1, at least one 1")
    keep = mask.astype(bool)
    state.slice(index, node, 1, keep, 0)
    if len(node.input) > 2 and node.input[2]:
        state.slice(index, node, 2, keep, 0)
    state.filters[index] = (int(keep.sum()), int(keep.size))
    if not keep.all():
        state.masks[node.output[0]] = keep


def _conv_reads(state: _Pass, index: int, node: onnx.NodeProto, keep: np.ndarray) -> None:
    """A Conv whose input channels are pruned: groups 1 drop weight columns; depthwise drops whole groups."""
    weight = state.constant(node.input[1], node)
    group = node_attribute(node, "group", 1)
    if group == 1:
        state.slice(index, node, 1, keep, 1)
        return
    if group != keep.size or weight.shape[1] != 1 or weight.shape[0] % group:
        raise _refuse(node, f"groups 1 or depthwise (group = input channels): this conv has group {group}")
    if index in state.filters:
        raise _refuse(node, "a depthwise conv's filters follow its input's channels: prune its producer instead")
    outputs = np.repeat(keep, weight.shape[0] // group)
    state.slice(index, node, 1, outputs, 0)
    if len(node.input) > 2 and node.input[2]:
        state.slice(index, node, 2, outputs, 0)
    state.attributes[index] = {"group": int(keep.sum())}
    state.masks[node.output[0]] = outputs


def _elementwise(state: _Pass, index: int, node: onnx.NodeProto, masks: list) -> None:
    """Two operands: both pruned alike, or one pruned and the other a constant (sliced on its channel axis
    where it has one; a broadcast scalar or size-1 axis stays)."""
    pruned = [mask for mask in masks if mask is not None]
    if len(pruned) == 2:
        if not np.array_equal(pruned[0], pruned[1]):
            raise _refuse(node, "its two inputs are pruned differently: prune both producers alike")
        state.masks[node.output[0]] = pruned[0]
        return
    position = 1 if masks[0] is not None else 0
    keep = pruned[0]
    rank = len(state.shapes.get(node.input[1 - position], ()))
    if node.input[position] not in state.initializers:
        raise _refuse(node, "its other input is computed, not pruned alike: prune its producer alike")
    if rank < 2:
        raise _refuse(node, "an input of known rank with channels on axis 1")
    constant = state.constant(node.input[position], node)
    axis = 1 - (rank - constant.ndim)           # numpy broadcasting aligns the trailing axes
    if 0 <= axis < constant.ndim and constant.shape[axis] == keep.size:
        state.slice(index, node, position, keep, axis)
    elif 0 <= axis < constant.ndim and constant.shape[axis] != 1:
        raise _refuse(node, f"a constant of shape {list(constant.shape)} against {keep.size} channels")
    state.masks[node.output[0]] = keep


def _concat(state: _Pass, node: onnx.NodeProto, masks: list) -> None:
    rank = len(state.shapes.get(node.output[0], ()))
    axis = node_attribute(node, "axis", 1)
    if rank == 0 or axis % rank != 1:
        raise _refuse(node, "Concat on the channel axis only")
    parts = []
    for name, mask in zip(node.input, masks):
        count = state.channels(name)
        if mask is None and count is None:
            raise _refuse(node, f"the channel count of input {name!r} is unknown")
        parts.append(np.ones(count, bool) if mask is None else mask)
    state.masks[node.output[0]] = np.concatenate(parts)


def _flatten(state: _Pass, node: onnx.NodeProto, keep: np.ndarray) -> None:
    shape = state.shapes.get(node.input[0], ())
    if node_attribute(node, "axis", 1) != 1 or len(shape) < 2 or min(shape[2:], default=1) < 1:
        raise _refuse(node, "Flatten at axis 1 of an input of known spatial size")
    state.masks[node.output[0]] = np.repeat(keep, math.prod(shape[2:]))


def _matrix_reads(state: _Pass, index: int, node: onnx.NodeProto, keep: np.ndarray) -> None:
    """Gemm (A = the features, not transposed) or MatMul with a constant 2-D B: B's rows along K go."""
    if node.op_type == "Gemm" and node_attribute(node, "transA", 0):
        raise _refuse(node, "Gemm with transA = 0")
    if state.constant(node.input[1], node).ndim != 2:
        raise _refuse(node, "a constant 2-D second operand")
    state.slice(index, node, 1, keep, 1 if node.op_type == "Gemm" and node_attribute(node, "transB", 0) else 0)


def _check_arity(node: onnx.NodeProto) -> None:
    fewest, most = ARITY.get(node.op_type, (1, len(node.input)))
    if not fewest <= len(node.input) <= most or not node.output:
        raise InputError(f"node {_name(node) if node.output else repr(node.name)} ({node.op_type}) inputs",
                         len(node.input), f"{fewest} .. {most} inputs and an output")


def _propagate(state: _Pass, index: int, node: onnx.NodeProto) -> None:
    masks = [state.masks.get(name) for name in node.input]
    if not any(mask is not None for mask in masks):
        return
    _check_arity(node)
    first, op = masks[0], node.op_type
    if any(mask is not None for mask in masks[1:]) and op not in ELEMENTWISE and op != "Concat":
        raise _refuse(node, "pruned channels reach an input other than its data input")
    if op == "Conv" and first is not None:
        _conv_reads(state, index, node, first)
    elif op in CHANNELWISE:
        state.masks[node.output[0]] = first
    elif op == "BatchNormalization":
        for position in range(1, 5):
            state.slice(index, node, position, first, 0)
        state.masks[node.output[0]] = first
    elif op in ELEMENTWISE:
        _elementwise(state, index, node, masks)
    elif op == "Concat":
        _concat(state, node, masks)
    elif op == "Flatten":
        _flatten(state, node, first)
    elif op in ("Gemm", "MatMul") and first is not None:
        _matrix_reads(state, index, node, first)
    else:
        raise _refuse(node, "pruning passes activations, pooling, per-channel constants, BatchNormalization, "
                            "Concat, Conv and Flatten+Gemm only")


def _plan(model: onnx.ModelProto, masks: dict[str, np.ndarray], facts: _Pass | None = None) -> _Pass:
    """Every edit the masks imply, or InputError naming the first node that cannot take them (``facts``: a
    pass over the same model whose shapes and arrays are reused)."""
    state = _Pass(model, facts)
    nodes = {node.name: (index, node) for index, node in enumerate(model.graph.node) if node.name}
    for name in masks:
        if name not in nodes or nodes[name][1].op_type != "Conv":
            raise InputError("layer", name, "the name of a Conv node of the model")
    for index, node in enumerate(model.graph.node):
        _propagate(state, index, node)
        if node.name in masks:
            mask = np.asarray(masks[node.name])
            if mask.ndim != 1 or not np.isin(mask, (0, 1)).all():
                raise InputError(f"mask of {_name(node)}", mask, "a vector of 0 and 1, one per filter")
            _check_arity(node)
            _prune_conv_filters(state, index, node, mask)
    reached = [name for name in model.graph.output if name.name in state.masks]
    if reached:
        raise InputError(f"graph output {reached[0].name!r}", "pruned channels",
                         "outputs keep their channels: do not prune the layers that produce them")
    return state


def _apply(model: onnx.ModelProto, state: _Pass) -> PrunedModel:
    pruned = onnx.ModelProto()
    pruned.CopyFrom(model)
    graph = pruned.graph
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1
    changes: dict[int, LayerChange] = {}
    for (index, position), array in sorted(state.edits.items()):
        node = graph.node[index]
        name = node.input[position]
        before = state.constant(name, node).size
        if uses[name] > 1 or name in (value.name for value in graph.output):
            new_name = f"{name}.pruned.{index}.{position}"
            node.input[position] = new_name
            uses[name] -= 1
        else:
            new_name = name
        tensor = numpy_helper.from_array(array.astype(state.constant(name, node).dtype, copy=False), new_name)
        target = next((t for t in graph.initializer if t.name == new_name), None)
        if target is None:
            graph.initializer.append(tensor)
        else:
            target.CopyFrom(tensor)
        if position == 1:
            changes[index] = LayerChange(node.name or node.output[0], node.op_type, state.filters.get(index),
                                         int(before), int(array.size))
    unused = {name for name, count in uses.items() if count == 0}
    kept = [tensor for tensor in graph.initializer if tensor.name not in unused]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    for index, attributes in state.attributes.items():
        node = graph.node[index]
        for name, value in attributes.items():
            for attribute in node.attribute:
                if attribute.name == name:
                    attribute.CopyFrom(helper.make_attribute(name, value))
    stale = [value for value in graph.value_info if value.name in state.masks]
    for value in stale:
        graph.value_info.remove(value)
    return PrunedModel(pruned, [changes[index] for index in sorted(changes)])


def prune_filters(model: onnx.ModelProto, masks: dict[str, np.ndarray]) -> PrunedModel:
    """``model`` with the filters whose mask entry is 0 removed from each named Conv (``masks``: node name ->
    0/1 per filter) and from every reader of their channels; per changed node, what changed."""
    return _apply(model, _plan(model, masks))


def filter_masks(model: onnx.ModelProto, ratio: float, layers: list[str] | None = None,
                 criterion: str = "l1") -> dict[str, np.ndarray]:
    """Magnitude masks removing ``ratio`` of the filters of each Conv in ``layers`` (default: every Conv the
    pass can prune on its own, :func:`prunable_convs`), by the L1 or L2 norm of each filter."""
    state = _Pass(model)
    nodes = {node.name: node for node in model.graph.node if node.name}
    names = prunable_convs(model) if layers is None else layers
    masks = {}
    for name in names:
        if name not in nodes or nodes[name].op_type != "Conv":
            raise InputError("layer", name, "the name of a Conv node of the model")
        weight = state.constant(nodes[name].input[1], nodes[name])
        masks[name] = magnitude_mask(weight, ratio, PruneGranularity.ROW, criterion=criterion)
    return masks


def prunable_convs(model: onnx.ModelProto) -> list[str]:
    """The named Convs of groups 1 whose filters the pass can remove alone (trying the removal of one)."""
    names, facts = [], _Pass(model)
    for node in model.graph.node:
        if node.op_type != "Conv" or not node.name or node_attribute(node, "group", 1) != 1:
            continue
        filters = _inferred_filters(model, node)
        if filters is None or filters < 2:
            continue
        trial = np.ones(filters, np.uint8)
        trial[0] = 0
        try:
            _plan(model, {node.name: trial}, facts)
        except InputError:
            continue
        names.append(node.name)
    return names


def _inferred_filters(model: onnx.ModelProto, node: onnx.NodeProto) -> int | None:
    weight = next((tensor for tensor in model.graph.initializer if tensor.name == node.input[1]), None)
    return int(weight.dims[0]) if weight is not None and len(weight.dims) >= 1 else None
