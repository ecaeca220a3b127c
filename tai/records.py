"""The compression records of T/AI 115.1-2021 chapters 7-8 as OperatorNodes: a registry keyed by operator_type.

Chapters 7-8 define their methods as operations with Input / Attribute / Output field tables (digest §2.5);
in the representation each one is an OperatorNode of that operator_type, its inputs and outputs under the
table's field names, its attributes under the table's keywords (a ``kwarg`` dict as attributes
``kwarg.<key>``). A :class:`Record` holds one field table; the reader checks every node of a registered
type against it, so another method's records (pruning masks, block-circulant first rows, low-rank factors)
are carried by registering a Record, without changing the reader. A record with an ``expand`` is turned
back into the arrays it stands for when the file becomes ONNX (aipu.tai.to_onnx); one without is refused
there by name.

Implemented: ``Dequantization_tensor`` (Table 229) over a chapter-10 stream (the codec's ``nnc()`` layer
stream stored as a UINT8 parameter), D_Method 1 (linear: real = level x step, the step of the stream
itself) at granularity 2 (layer); and ``Un_structured_sparse`` (Table 251) row de-pruning (granularity 2).
``DecompressStructuralMatric`` (Table 253) and ``DecompressMultimodel`` (Table 217) have their field tables.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aipu.sim.machine.errors import InputError

from .params import Parameter
from .schema import CODE, DENSE_TENSOR, OperatorNode, Type, VariableType

Expand = Callable[[dict[str, np.ndarray], dict[str, object], dict[str, tuple[int, ...] | None], str],
                  dict[str, np.ndarray]]


@dataclass(frozen=True)
class Record:
    """One field table: required and optional input keys, output keys, attributes by kind ("i", "f", "s",
    "b", "ints", "floats")."""

    operator_type: str
    clause: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: dict[str, str]
    optional: tuple[str, ...] = ()
    expand: Expand | None = field(default=None, compare=False)


RECORDS: dict[str, Record] = {}


def register(record: Record) -> Record:
    """Add a field table (a second table for one operator_type is a programming error)."""
    if record.operator_type in RECORDS:
        raise ValueError(f"record {record.operator_type} registered twice")
    RECORDS[record.operator_type] = record
    return record


def attribute_value(attribute) -> object:
    """A Type value (or a list of them) as Python: int, float, bytes, bool, or a list."""
    values = [getattr(value, value.WhichOneof("value") or "i") for value in attribute.list]
    if attribute.HasField("val"):
        kind = attribute.val.WhichOneof("value")
        return getattr(attribute.val, kind) if kind else None
    return values


_KINDS = {"i": int, "f": float, "s": bytes, "b": bool}


def check_record(node: OperatorNode, where: str) -> dict[str, object]:
    """A node of a registered operator_type against its field table: its attributes by name, checked."""
    record = RECORDS[node.operator_type]
    where = f"{where} ({record.operator_type}, {record.clause})"
    keys = {entry.key for entry in node.input}
    missing = [key for key in record.inputs if key not in keys]
    unknown = sorted(keys - set(record.inputs) - set(record.optional))
    if missing or unknown or {entry.key for entry in node.output} - set(record.outputs):
        raise InputError(f"{where} inputs/outputs", sorted(keys), f"inputs {', '.join(record.inputs)}"
                         f"{' (+ ' + ', '.join(record.optional) + ')' if record.optional else ''}, outputs "
                         f"among {', '.join(record.outputs)}")
    values = {}
    for attribute in node.attribute:
        kind = record.attributes.get(attribute.name)
        value = attribute_value(attribute)
        scalar = _KINDS.get(kind)
        good = (isinstance(value, scalar) and (scalar is bool or not isinstance(value, bool))) if scalar else (
            isinstance(value, list) and all(isinstance(v, int if kind == "ints" else float) for v in value))
        if kind is None or not good:
            raise InputError(f"{where} attribute {attribute.name!r}", value,
                             f"one of {', '.join(f'{k} ({v})' for k, v in record.attributes.items())}")
        values[attribute.name] = value
    return values


# --------------------------------------------------------------------------------------------- chapter 10
D_LINEAR, GRANULARITY_LAYER = 1, 2          # Table 231 D_Method, Table 230 granularity
STREAM_FORMAT = b"nnc"                      # kwarg.format: a bare chapter-10 nnc() stream, one layer


def compressed_weight(document, array: np.ndarray, name: str, options) -> tuple[OperatorNode, list[VariableType]]:
    """A weight as a Dequantization_tensor record over its chapter-10 stream (coded with the codec
    ``options``), the stream stored as parameter (record name, "X"); and the VariableTypes of stream and weight."""
    from aipu.codec.api import layer_sublayers
    from aipu.codec.encoder import encode_stream
    from aipu.codec.errors import CodecError

    if array.dtype != np.float32 or array.ndim < 2:
        raise InputError(f"weight {name!r} to compress", f"{array.dtype} {list(array.shape)}",
                         "a float32 tensor of rank 2 or more")
    layer = f"{name}.dequantization"
    try:
        header, subs, _ = layer_sublayers({name: array}, name, None, options)
        stream = encode_stream(header, [subs], options.encoder).data
    except (CodecError, ValueError) as exc:
        raise InputError(f"weight {name!r}", "chapter-10 coding", str(exc)) from None
    document.add(Parameter(layer, "X", "UINT8", np.frombuffer(stream, np.uint8)))
    node = OperatorNode(name=layer, operator_type="Dequantization_tensor")
    node.input.add(key="X").value.add(name=layer + ".X")
    source = VariableType(name=layer + ".X", data_type=DENSE_TENSOR, is_persitable=True)
    source.tensor.name, source.tensor.data_type = layer + ".X", CODE["UINT8"]
    source.tensor.parameter_layer, source.tensor.parameter_key = layer, "X"
    source.tensor.shape.dim.add(size=len(stream))
    node.output.add(key="Y").value.add(name=name)
    for key, value in (("granularity", Type(i=GRANULARITY_LAYER)), ("D_Method", Type(i=D_LINEAR)),
                       ("kwarg.format", Type(s=STREAM_FORMAT)), ("kwarg.step", Type(f=float(subs[0].step)))):
        node.attribute.add(name=key).val.CopyFrom(value)
    weight = VariableType(name=name, data_type=DENSE_TENSOR)
    weight.tensor.name, weight.tensor.data_type = name, CODE["FLOAT32"]
    for size in array.shape:
        weight.tensor.shape.dim.add(size=size)
    return node, [source, weight]


def _dequantize_stream(inputs: dict, attributes: dict, shapes: dict, where: str) -> dict[str, np.ndarray]:
    """Dequantization_tensor over a chapter-10 stream: the stream's levels times its own step (dequantw,
    T/AI 115.1-2021 Table 321), which must be the record's kwarg.step."""
    from aipu.codec.api import decode_stream
    from aipu.codec.errors import CodecError
    from aipu.codec.layout import from_standard, placement
    from aipu.codec.quantize import reconstruct

    expected = {"D_Method": D_LINEAR, "granularity": GRANULARITY_LAYER, "kwarg.format": STREAM_FORMAT}
    for key, value in expected.items():
        if attributes.get(key) != value:
            raise InputError(f"{where} attribute {key!r}", attributes.get(key), f"{value!r} (a chapter-10 stream)")
    shape = shapes.get("Y")
    if shape is None or "kwarg.step" not in attributes:
        raise InputError(f"{where} output Y", "no shape or no kwarg.step", "the weight's shape and step")
    stream = inputs["X"]
    if stream.dtype != np.uint8 or stream.ndim != 1:
        raise InputError(f"{where} input X", f"{stream.dtype} {list(stream.shape)}", "a 1-D UINT8 stream")
    try:
        _, layers, _, _ = decode_stream(stream.tobytes(), strict=True)
        if len(layers) != 1 or len(layers[0]) != 1:
            raise CodecError("a weight stream holds one layer of one tensor")
        sub, place = layers[0][0], placement(shape)
        if (sub.dim, sub.shape) != (place.dim, place.shape):
            raise CodecError(f"the stream's shape {sub.shape} is not the weight's {list(shape)}")
    except (CodecError, ValueError) as exc:
        raise InputError(f"{where} input X", "chapter-10 stream", str(exc)) from None
    if np.float32(attributes["kwarg.step"]) != np.float32(sub.step):
        raise InputError(f"{where} attribute 'kwarg.step'", attributes["kwarg.step"], f"the stream's {sub.step}")
    return {"Y": reconstruct(from_standard(sub.levels, place), sub.step).astype(np.float32)}


def _unprune_rows(inputs: dict, attributes: dict, shapes: dict, where: str) -> dict[str, np.ndarray]:
    """Un_structured_sparse, row de-pruning (T/AI 115.1-2021 §8.3): the rows of W go where the mask S is 1
    along N_dim, zeros elsewhere."""
    weight, mask = inputs["W"], inputs["S"]
    axis = attributes.get("N_dim", 0)
    if attributes.get("granularity") != 2 or not 0 <= axis < weight.ndim:
        raise InputError(f"{where} granularity, N_dim", (attributes.get("granularity"), axis),
                         f"granularity 2 (rows) and N_dim 0 .. {weight.ndim - 1}")
    if mask.ndim != 1 or not np.isin(mask, (0, 1)).all() or int(mask.sum()) != weight.shape[axis]:
        raise InputError(f"{where} input S", mask, f"a 0/1 vector with {weight.shape[axis]} ones")
    if "B" in inputs and inputs["B"].shape != (weight.shape[axis],):
        raise InputError(f"{where} input B shape", list(inputs["B"].shape), f"[{weight.shape[axis]}]")
    return {"W_u": _scatter(weight, mask, axis), **({"B_o": _scatter(inputs["B"], mask, 0)} if "B" in inputs else {})}


def _scatter(array: np.ndarray, mask: np.ndarray, axis: int) -> np.ndarray:
    shape = list(array.shape)
    shape[axis] = mask.size
    out = np.zeros(shape, array.dtype)
    np.moveaxis(out, axis, 0)[np.flatnonzero(mask)] = np.moveaxis(array, axis, 0)
    return out


register(Record("Dequantization_tensor", "T/AI 115.1-2021 §8.2.1, Table 229", ("X",), ("Y",),
                {"granularity": "i", "D_Method": "i", "kwarg.format": "s", "kwarg.step": "f"},
                expand=_dequantize_stream))
register(Record("Un_structured_sparse", "T/AI 115.1-2021 §8.3.2, Table 251", ("W", "S"), ("W_u", "B_o"),
                {"N_dim": "i", "granularity": "i"}, optional=("B",), expand=_unprune_rows))
register(Record("DecompressStructuralMatric", "T/AI 115.1-2021 §8.4, Table 253", ("X",), ("Y",),
                {"granularity": "i", "D_Method": "i"}))
register(Record("DecompressMultimodel", "T/AI 115.1-2021 §8.1, Table 217",
                ("W_share", "B_share", "W_specific", "B_specific"), ("Weights_list", "Bias_list", "Error"),
                {"M_Method": "i", "axe": "i"}))
