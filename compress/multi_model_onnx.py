"""Multi-model compression applied to ONNX models of one topology (T/AI 115.1-2021 §7.1; docs/multimodel.md).

The weight layers are the Conv nodes and the Gemm nodes with transB = 1 whose weight and bias are
initializers: their weights' axis 0 is the output channels (state 1 of §7.1.3 c), so the biases split too).
:func:`check_same_topology` refuses a model that differs from the first in a node, an attribute or an
initializer's shape, naming the first difference. :func:`share` regroups every layer at its slice_indicator
(Table 164), :func:`residual` quantizes every layer's difference to a base model (Table 167); both give one
record per layer, and :func:`decompressed` the ONNX model of one of the models from them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from aipu.compress.multi_model import (DecompressMultimodel, DFQuantization, decompress_one, df_quantize, regroup,
                                       residual_decompress)
from aipu.sim.machine.errors import InputError


@dataclass(frozen=True)
class WeightLayer:
    """A node whose weight (axis 0: its output channels) and bias are initializers."""

    node: str
    weight: str
    bias: str | None

    @property
    def name(self) -> str:
        return self.node


def weight_layers(model: onnx.ModelProto) -> list[WeightLayer]:
    """The Conv and Gemm (transB = 1) nodes of ``model`` with an initializer weight, in graph order."""
    initializers = {t.name for t in model.graph.initializer}
    layers = []
    for index, node in enumerate(model.graph.node):
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        if (node.op_type == "Conv" or node.op_type == "Gemm" and trans_b == 1) and len(node.input) > 1 \
                and node.input[1] in initializers:
            bias = node.input[2] if len(node.input) > 2 and node.input[2] in initializers else None
            layers.append(WeightLayer(node.name or f"{node.op_type}_{index}", node.input[1], bias))
    return layers


def _arrays(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def check_same_topology(models: list[onnx.ModelProto], sources: list[str]) -> None:
    """InputError (within the differing model's file) naming the first node, attribute, input or initializer
    shape in which a model is not the first one's topology."""
    first = models[0]
    for model, source in zip(models[1:], sources[1:]):
        ours, theirs = first.graph, model.graph
        if len(ours.node) != len(theirs.node):
            raise InputError("nodes", len(theirs.node), f"{len(ours.node)}, the first model's ({sources[0]})"
                             ).within(source)
        for index, (a, b) in enumerate(zip(ours.node, theirs.node)):
            if (a.op_type, list(a.input), list(a.output)) != (b.op_type, list(b.input), list(b.output)) or \
                    sorted(x.SerializeToString() for x in a.attribute) != sorted(x.SerializeToString()
                                                                               for x in b.attribute):
                raise InputError(f"node {index} ({b.name or b.op_type})", f"{b.op_type} {list(b.input)}",
                                 f"{a.op_type} {list(a.input)} with the first model's attributes").within(source)
        mine = {t.name: (t.data_type, tuple(t.dims)) for t in ours.initializer}
        other = {t.name: (t.data_type, tuple(t.dims)) for t in theirs.initializer}
        for name in sorted(set(mine) | set(other)):
            if mine.get(name) != other.get(name):
                raise InputError(f"initializer {name!r} (type, shape)", other.get(name),
                                 f"{mine.get(name)}, the first model's").within(source)
        if [v.SerializeToString() for v in ours.input] != [v.SerializeToString() for v in theirs.input]:
            raise InputError("graph inputs", [v.name for v in theirs.input], "the first model's").within(source)


def _layer(models, layer: WeightLayer) -> tuple[list[np.ndarray], list[np.ndarray]]:
    arrays = [_arrays(model) for model in models]
    weights = [a[layer.weight] for a in arrays]
    biases = [a[layer.bias] if layer.bias else np.zeros(weights[0].shape[0], weights[0].dtype) for a in arrays]
    return weights, biases


def share(models: list[onnx.ModelProto], slices: dict[str, int]) -> dict[str, DecompressMultimodel]:
    """Every weight layer regrouped along axe 0 at its slice_indicator in ``slices`` (absent: 0, all filters
    specific); InputError for a name that is not a weight layer."""
    layers = weight_layers(models[0])
    unknown = sorted(set(slices) - {layer.name for layer in layers})
    if unknown:
        raise InputError("--slice layer", unknown[0], f"a weight layer: {', '.join(l.name for l in layers)}")
    return {layer.name: regroup(*_layer(models, layer), 0, slices.get(layer.name, 0)) for layer in layers}


def residual(base: onnx.ModelProto, models: list[onnx.ModelProto], n: int) -> list[DFQuantization]:
    """Per model the DFQuantization of its weight layers' differences to ``base`` (biases stay whole)."""
    layers = weight_layers(base)
    base_weights = [_arrays(base)[layer.weight] for layer in layers]
    return [df_quantize(base_weights, [_arrays(model)[layer.weight] for layer in layers], n) for model in models]


def with_weights(model: onnx.ModelProto, arrays: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of ``model`` whose initializers named in ``arrays`` hold those values (float32)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for tensor in out.graph.initializer:
        if tensor.name in arrays:
            tensor.CopyFrom(numpy_helper.from_array(np.asarray(arrays[tensor.name], np.float32), tensor.name))
    return out


def decompressed(model: onnx.ModelProto, records: dict[str, DecompressMultimodel], unit_indicator: int
                 ) -> onnx.ModelProto:
    """``model`` (any of the set) with model ``unit_indicator``'s weights and biases from the shared records."""
    arrays = {}
    for layer in weight_layers(model):
        weights, bias = decompress_one(records[layer.name], unit_indicator)
        arrays[layer.weight] = weights
        if layer.bias:
            arrays[layer.bias] = bias
    return with_weights(model, arrays)


def residual_decompressed(base: onnx.ModelProto, record: DFQuantization, biases: dict[str, np.ndarray] | None = None
                          ) -> onnx.ModelProto:
    """``base`` with the target's weights W_base + W_share[W_specific] (Table 228) and the target's ``biases``."""
    layers = weight_layers(base)
    targets, _ = residual_decompress(record.w_share, record.w_specific, [_arrays(base)[l.weight] for l in layers])
    return with_weights(base, {**{layer.weight: t for layer, t in zip(layers, targets)}, **(biases or {})})
