"""Structured matrices applied to an ONNX model (T/AI 115.1-2021 §7.4, §9.6.3.3 c): what the NPU then runs.

Each method has two steps, so that a caller may fine-tune the structured parameters in between (§9.6.2, §9.6.3.3 e):

* :func:`low_rank_layers` decomposes each chosen Conv (one group) or Gemm; :func:`with_low_rank` replaces the
  layers by the layers their factors are: a Gemm or 1×1 Conv by two (SVD), a k×k Conv by a 1×1, a grouped k×k and a
  1×1 Conv (BTD). The NPU runs them as ordinary layers: fewer MACs and weight bytes.
* :func:`circulant_layers` fits each chosen layer with a block-circulant weight and a sign vector;
  :func:`with_circulant` writes the dense weight C·diag(s) they stand for into the model.

Both leave the graph's inputs, outputs and other nodes as they were.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from aipu.compress import circulant, low_rank
from aipu.compress.onnx_pruning import node_attribute
from aipu.sim.machine.errors import InputError


@dataclass(frozen=True)
class WeightLayer:
    """A Conv (one group) or Gemm with a constant weight, its weight as (outputs, inputs[, k_h, k_w])."""

    node: onnx.NodeProto
    matrix: np.ndarray

    @property
    def name(self) -> str:
        return self.node.name or self.node.output[0]


@dataclass(frozen=True)
class LowRankLayer:
    """One layer's factors: ``svd`` (w1, w2) for a Gemm or 1×1 Conv, or ``btd`` (BlockTerms) for a k×k Conv."""

    layer: WeightLayer
    svd: tuple[np.ndarray, np.ndarray] | None = None
    btd: low_rank.BlockTerms | None = None

    @property
    def parameters(self) -> dict:
        if self.btd is not None:
            return {"R1": self.btd.first.shape[0], "R2": self.btd.middle.shape[0], "groups": self.btd.groups}
        return {"core_size": self.svd[0].shape[0]}

    @property
    def weights(self) -> int:
        return sum(factor.size for factor in self.arrays())

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The factors, the arrays a fine-tuning updates in place."""
        return self.svd if self.btd is None else (self.btd.first, self.btd.middle, self.btd.last)

    def dense(self) -> np.ndarray:
        """The (outputs, inputs[, k_h, k_w]) weight the factors stand for."""
        if self.btd is not None:
            return low_rank.btd_decompression(self.btd)
        return low_rank.svd_decompression(*self.svd).reshape(self.layer.matrix.shape)

    def gradients(self, dense_gradient: np.ndarray) -> tuple[np.ndarray, ...]:
        """The loss gradients of ``arrays()`` from the loss gradient of ``dense()``."""
        if self.btd is not None:
            return low_rank.btd_gradients(self.btd, dense_gradient)
        return low_rank.svd_gradients(*self.svd, dense_gradient.reshape(dense_gradient.shape[0], -1))


@dataclass(frozen=True)
class CirculantLayer:
    """One layer's block-circulant record: its blocks' first rows, circ_size and its sign vector."""

    layer: WeightLayer
    w_circ: np.ndarray
    circ_size: int
    sign_vector: np.ndarray

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (self.w_circ,)

    def dense(self) -> np.ndarray:
        return circulant.signed_weight(circulant.decompress_w_circ_to_weight(self.w_circ, self.circ_size),
                                       self.sign_vector)

    def gradients(self, dense_gradient: np.ndarray) -> tuple[np.ndarray, ...]:
        return (circulant.w_circ_gradient(dense_gradient, self.sign_vector, self.circ_size),)


def relative_error(reference: np.ndarray, approximation: np.ndarray) -> float:
    norm = float(np.linalg.norm(reference))
    return float(np.linalg.norm(reference - approximation)) / norm if norm else 0.0


def gemm_transposed(node: onnx.NodeProto) -> bool:
    return node.op_type == "Gemm" and not node_attribute(node, "transB", 0)


def weight_layers(model: onnx.ModelProto, layers=None) -> list[WeightLayer]:
    """The Conv (one group) and Gemm nodes with a constant weight, in graph order, limited to ``layers`` (node
    names) if given; a name in ``layers`` that is no such node is refused in one line."""
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    found = []
    for node in model.graph.node:
        if node.op_type not in ("Conv", "Gemm") or len(node.input) < 2 or node.input[1] not in initializers:
            continue
        if node.op_type == "Conv" and node_attribute(node, "group", 1) != 1:
            continue
        if node.op_type == "Gemm" and (node_attribute(node, "transA", 0) or node_attribute(node, "alpha", 1.0) != 1.0):
            continue
        weight = numpy_helper.to_array(initializers[node.input[1]]).astype(np.float64)
        found.append(WeightLayer(node, weight.T if gemm_transposed(node) else weight))
    if layers is None:
        return found
    names = {layer.name for layer in found}
    unknown = sorted(set(layers) - names)
    if unknown:
        raise InputError("layer", unknown[0], "a one-group Conv or a Gemm with a constant weight: "
                         + ", ".join(sorted(names)))
    return [layer for layer in found if layer.name in set(layers)]


def low_rank_layers(model: onnx.ModelProto, ratio: float, groups: int = 1, layers=None) -> list[LowRankLayer]:
    """The chosen layers' factors keeping about ``ratio`` of their weights (eqs. 51-52); a layer whose factors
    would not be smaller is left out."""
    chosen = []
    for layer in weight_layers(model, layers):
        matrix = layer.matrix
        if matrix.ndim == 4 and matrix.shape[2] * matrix.shape[3] > 1:
            out_channels, in_channels, height, width = matrix.shape
            ranks = low_rank.ranks_for_ratio(out_channels, in_channels, height * width, ratio, groups)
            candidate = LowRankLayer(layer, btd=low_rank.btd_process(matrix, ranks, groups))
        else:
            flat = matrix.reshape(matrix.shape[0], -1)
            core = low_rank.core_size_for_ratio(*flat.shape, ratio)
            candidate = LowRankLayer(layer, svd=low_rank.svd_process(flat, core))
        if candidate.weights < matrix.size:
            chosen.append(candidate)
    return chosen


def circulant_layers(model: onnx.ModelProto, circ_size: int, rng: np.random.Generator,
                     extension: int = circulant.SHIFT_EXTENSION, layers=None
                     ) -> tuple[circulant.SignVectors, list[CirculantLayer]]:
    """The network's sign vectors (one reference vector and a random length per layer, §7.4.2.3) and each chosen
    layer's block-circulant fit to W·diag(s) (least squares); layers whose outputs or inputs ``circ_size`` does
    not divide are left out, and none left is refused."""
    chosen = [layer for layer in weight_layers(model, layers)
              if layer.matrix.shape[0] % circ_size == 0 and layer.matrix.shape[1] % circ_size == 0]
    if not chosen:
        raise InputError("circ_size", circ_size, "must divide the outputs and the inputs of at least one layer")
    inputs = [layer.matrix.shape[1] for layer in chosen]
    len_list = circulant.generate_len_list(inputs, [circ_size] * len(chosen), rng)
    signs = circulant.SignVectors(circulant.generate_base_sign_vector_network(len_list, rng), len_list)
    vectors = circulant.generate_sign_vector_list(signs, [extension] * len(chosen), inputs)
    return signs, [CirculantLayer(layer, circulant.project_to_block_circulant(
        circulant.signed_weight(layer.matrix, sign), circ_size), circ_size, sign)
        for layer, sign in zip(chosen, vectors)]


def with_circulant(model: onnx.ModelProto, chosen: list[CirculantLayer]) -> onnx.ModelProto:
    """``model`` with each chosen layer's weight replaced by the dense weight of its record."""
    result = _copy(model)
    initializers = {tensor.name: tensor for tensor in result.graph.initializer}
    for record in chosen:
        node, dense = record.layer.node, record.dense()
        stored = dense.T if gemm_transposed(node) else dense
        initializers[node.input[1]].CopyFrom(numpy_helper.from_array(stored.astype(np.float32), node.input[1]))
    return result


def with_low_rank(model: onnx.ModelProto, chosen: list[LowRankLayer]) -> onnx.ModelProto:
    """``model`` with each chosen layer replaced by the layers its factors are."""
    result = _copy(model)
    replacements = {}
    for entry in chosen:
        node, name = entry.layer.node, entry.layer.name
        bias = list(node.input[2:3])
        if entry.btd is not None:
            terms, first, second = entry.btd, f"{name}/btd_in", f"{name}/btd_core"
            nodes = [_conv(f"{name}/w1", [node.input[0], _add(result, f"{name}/w1", terms.first)], first),
                     _conv(f"{name}/w2", [first, _add(result, f"{name}/w2", terms.middle)], second, node,
                           terms.groups),
                     _conv(f"{name}/w3", [second, _add(result, f"{name}/w3", terms.last), *bias], node.output[0])]
        elif node.op_type == "Gemm":
            w1, w2 = entry.svd
            middle = f"{name}/low_rank_core"
            nodes = [helper.make_node("Gemm", [node.input[0], _add(result, f"{name}/w1", w1)], [middle],
                                      name=f"{name}/w1", transB=1),
                     helper.make_node("Gemm", [middle, _add(result, f"{name}/w2", w2), *bias], list(node.output),
                                      name=f"{name}/w2", transB=1, beta=node_attribute(node, "beta", 1.0))]
        else:
            w1, w2 = entry.svd
            middle = f"{name}/low_rank_core"
            nodes = [_conv(f"{name}/w1", [node.input[0], _add(result, f"{name}/w1", w1[:, :, None, None])],
                           middle, node),
                     _conv(f"{name}/w2", [middle, _add(result, f"{name}/w2", w2[:, :, None, None]), *bias],
                           node.output[0])]
        replacements[name] = nodes
    _set_nodes(result, [new for node in result.graph.node
                        for new in replacements.get(node.name or node.output[0], [node])])
    return result


def _conv(name: str, inputs: list[str], output: str, template: onnx.NodeProto | None = None, group: int = 1):
    """A Conv node; ``template`` (the replaced node) lends its stride, padding and dilation, None makes it 1×1."""
    attributes = {"group": group}
    for key in ("strides", "pads", "dilations", "auto_pad"):
        value = None if template is None else node_attribute(template, key, None)
        if value is not None:
            attributes[key] = value
    return helper.make_node("Conv", inputs, [output], name=name, **attributes)


def _add(model: onnx.ModelProto, name: str, values: np.ndarray) -> str:
    model.graph.initializer.append(numpy_helper.from_array(values.astype(np.float32), name))
    return name


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    result = onnx.ModelProto()
    result.CopyFrom(model)
    return result


def _set_nodes(model: onnx.ModelProto, nodes: list[onnx.NodeProto]) -> None:
    """Replace the graph's nodes and drop the initializers no node reads any more."""
    used = {name for node in nodes for name in node.input}
    kept = [tensor for tensor in model.graph.initializer if tensor.name in used]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)


def structured_layer_report(chosen) -> list[dict]:
    """Per layer: node, method, parameters, weights before and after, relative error of the replacement."""
    rows = []
    for entry in chosen:
        low = isinstance(entry, LowRankLayer)
        rows.append({"node": entry.layer.name, "method": "low_rank" if low else "block_circulant",
                     "parameters": entry.parameters if low else {"circ_size": entry.circ_size},
                     "weights_before": entry.layer.matrix.size,
                     "weights_after": entry.weights if low else entry.w_circ.size,
                     "relative_error": round(relative_error(entry.layer.matrix, entry.dense()), 6)})
    return rows

