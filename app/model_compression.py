"""`aipu compress` as a function: T/AI 115.1-2021's compression methods composed on one ONNX model, in the order
the standard's compatibility rules give, into a .tai file (docs/compress.md).

Order: filter pruning first (§7.3.1: prune before the structured-matrix methods and before quantization), then the
structured matrices (§7.4: block-circulant layers, then the low-rank decomposition of the layers left), then
quantization of whatever weights remain, factors included, into chapter-10
streams under Dequantization_tensor records (§7.2.1 asks for quantization before the structured-matrix methods; for
low-rank factors that order would leave float factors of a quantized weight, so the factors are what is quantized:
docs/compress.md; a block-circulant layer's first rows are quantized alike). Each step is the library's:
aipu.compress for the first two, aipu.tai's records for the last.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from aipu.sim.machine.errors import InputError


@dataclass(frozen=True)
class CompressionPlan:
    """What to do: the fraction of filters to prune (by ``criterion`` norm), the circ_size of block-circulant layers
    (every chosen layer it divides; sign vectors drawn from ``seed``), the fraction of weights the low-rank factors
    keep (BTD in ``groups`` groups for k×k convolutions) for the layers left, the bits of the quantized levels, and
    the layers (node names; None: every layer a method applies to)."""

    prune: float | None = None
    criterion: str = "l1"
    circulant: int | None = None
    seed: int = 0
    low_rank: float | None = None
    groups: int = 1
    quant_bits: int | None = None
    layers: tuple[str, ...] | None = None


@dataclass
class LayerRow:
    """One weight layer of the original model: what was done to it, its weights and stored bytes before and after."""

    node: str
    weights_before: int
    bytes_before: int
    done: list[str] = field(default_factory=list)
    weights_after: int = 0
    bytes_after: int = 0


def weight_tensors(model: onnx.ModelProto) -> dict[str, tuple[str, np.ndarray]]:
    """Node name -> (weight initializer name, float array) of every Conv and Gemm with a constant weight."""
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    return {node.name or node.output[0]: (node.input[1], numpy_helper.to_array(initializers[node.input[1]]))
            for node in model.graph.node
            if node.op_type in ("Conv", "Gemm") and len(node.input) > 1 and node.input[1] in initializers}


def _origin(name: str, rows: dict) -> str:
    """The original node of ``name``: itself, or the node a factor node (``conv2/w1``) replaced."""
    return name if name in rows else name.rpartition("/")[0]


def compress(model: onnx.ModelProto, plan: CompressionPlan):
    """(the compressed ONNX model, its .tai document, the per-layer rows) of ``model`` under ``plan``."""
    from aipu.compress import filter_masks, prune_filters
    from aipu.compress.structured_onnx import (low_rank_layers, relative_error, weight_layers, with_circulant,
                                               with_low_rank)
    from aipu.tai.from_onnx import from_onnx

    if plan.circulant:          # the weights the NPU multiplies with: a BatchNormalization after a layer would
        model = folded(model)   # scale its filters apart once compiled, and it would be circulant no more
    rows = {name: LayerRow(name, array.size, array.nbytes) for name, (_, array) in weight_tensors(model).items()}
    layers = None if plan.layers is None else list(plan.layers)
    unknown = sorted(set(layers or ()) - set(rows))
    if unknown:
        raise InputError("--layers", unknown[0], "a Conv or Gemm node with a constant weight: " + ", ".join(rows))
    if plan.prune:
        masks = filter_masks(model, plan.prune, layers and [name for name in layers if name in rows], plan.criterion)
        if not masks:
            raise InputError("--prune", plan.prune, "needs a Conv whose filters can be removed alone (see --layers)")
        model = prune_filters(model, masks).model
        for name, mask in masks.items():
            rows[name].done.append(f"pruned to {int(mask.sum())}/{mask.size} filters")
    circulant = []
    if plan.circulant:
        circulant = _circulant(model, plan, layers, rows)
        model = with_circulant(model, [entry for entry, _ in circulant])
    if plan.low_rank:
        taken = {entry.layer.name for entry, _ in circulant}
        chosen = low_rank_layers(model, plan.low_rank, plan.groups,
                                 [layer.name for layer in weight_layers(model, layers) if layer.name not in taken])
        for entry in chosen:
            parameters = ", ".join(f"{key} {value}" for key, value in entry.parameters.items())
            error = relative_error(entry.layer.matrix, entry.dense())
            rows[entry.layer.name].done.append(f"low rank ({parameters}; error {error:.3f})")
        model = with_low_rank(model, chosen)
    compressed = _quantized_weights(model, plan.quant_bits) if plan.quant_bits else {}
    records = [_circulant_builder(entry, record, compressed.pop(entry.layer.node.input[1], None))
               for entry, record in circulant]
    document = from_onnx(model, compressed, records)
    _count_after(rows, model, document, plan.quant_bits,
                 {entry.layer.node.input[1]: entry.circ_size for entry, _ in circulant})
    return model, document, list(rows.values())


def folded(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` as the compiler's front end normalizes it (BatchNormalization folded into the convs before it,
    constants folded): the weights the NPU multiplies with, so that a layer fitted block-circulant stays so."""
    import tempfile
    from pathlib import Path

    from aipu.compiler.graph import load_graph
    from aipu.compiler.normalize import normalize

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        onnx.save(model, path)
        return normalize(load_graph(path, input_shapes(model))).to_onnx()


def _circulant(model: onnx.ModelProto, plan: CompressionPlan, layers, rows: dict) -> list:
    """The block-circulant fits of the chosen layers with what their records need: (CirculantLayer, (signs,
    index in len_list))."""
    from aipu.compress.structured_onnx import circulant_layers, relative_error

    signs, chosen = circulant_layers(model, plan.circulant, np.random.default_rng(plan.seed), layers=layers)
    for entry in chosen:
        error = relative_error(entry.layer.matrix, entry.dense())
        rows[entry.layer.name].done.append(f"block circulant (circ_size {entry.circ_size}; error {error:.3f})")
    return [(entry, (signs, index)) for index, entry in enumerate(chosen)]


def _circulant_builder(entry, record: tuple, options):
    """The (initializer names, build) pair of aipu.tai.from_onnx for one block-circulant layer."""
    from aipu.compress.circulant import SHIFT_EXTENSION
    from aipu.compress.structured_onnx import gemm_transposed
    from aipu.tai.records import circulant_record

    weight, (signs, index) = entry.layer.node.input[1], record

    def build(document):
        return circulant_record(document, weight, entry.w_circ, entry.circ_size, signs, index, SHIFT_EXTENSION,
                                gemm_transposed(entry.layer.node), options)
    return [weight], build


def _quantized_weights(model: onnx.ModelProto, bits: int) -> dict:
    from aipu.app.cli_tai import compressible_weights
    from aipu.app.warm_up import compile_kernels_once
    from aipu.codec.api import CodecOptions
    from aipu.codec.encoder import FAST_OPTIONS
    from aipu.codec.quantize import MAX_BITDEPTH

    if not 2 <= bits <= MAX_BITDEPTH + 1:
        raise InputError("--quant", bits, f"an integer 2 .. {MAX_BITDEPTH + 1} (N-bit signed levels)")
    compile_kernels_once("codec")
    options = CodecOptions(bitdepth=bits - 1, encoder=FAST_OPTIONS)
    return {name: options for name in compressible_weights(model)}


def _count_after(rows: dict, model: onnx.ModelProto, document, bits: int | None, circ_sizes: dict[str, int]) -> None:
    """Each layer's weights and stored bytes in ``document``: the weight or, for a block-circulant one, its first
    rows, each stored as it is or as a chapter-10 stream (the network's one sign vector is no layer's)."""
    for name, (weight, array) in weight_tensors(model).items():
        row = rows[_origin(name, rows)]
        size = circ_sizes.get(weight, 1)
        source = f"{weight}.circulant.X" if weight in circ_sizes else weight
        stream = document.parameters.get((f"{source}.dequantization", "X"))
        row.weights_after += array.size // size
        row.bytes_after += array.nbytes // size if stream is None else stream.array.nbytes
        if stream is not None and f"{bits}-bit chapter-10 stream" not in row.done:
            row.done.append(f"{bits}-bit chapter-10 stream")


def model_outputs(model: onnx.ModelProto, samples: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The outputs of ``model`` (onnxruntime) on each sample (axis 0 of every input) alone, concatenated: a model
    the front end normalized takes a batch of one."""
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    count = next(iter(samples.values())).shape[0]
    runs = [session.run(None, {name: array[index:index + 1] for name, array in samples.items()})
            for index in range(count)]
    return [np.concatenate(outputs) for outputs in zip(*runs)]


def sqnr_db(reference: list[np.ndarray], outputs: list[np.ndarray]) -> float:
    """The SQNR in dB over every element of every output (inf when they are equal)."""
    from aipu.compiler.quantize import sqnr_from_powers

    return sqnr_from_powers(sum(float(np.sum(np.square(r.astype(np.float64)))) for r in reference),
                            sum(float(np.sum(np.square(r.astype(np.float64) - o))) for r, o in zip(reference, outputs)))


def input_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """The graph inputs that no initializer feeds, a symbolic dimension read as 1."""
    constants = {tensor.name for tensor in model.graph.initializer}
    return {value.name: tuple(dim.dim_value or 1 for dim in value.type.tensor_type.shape.dim)
            for value in model.graph.input if value.name not in constants}
