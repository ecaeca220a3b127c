"""The compression records of T/AI 115.1-2021 chapters 7-8 as OperatorNodes: a registry keyed by operator_type.

Chapters 7-8 define their methods as operations with Input / Attribute / Output field tables (digest §2.5);
in the representation each one is an OperatorNode of that operator_type, its inputs and outputs under the
table's field names, its attributes under the table's keywords (a ``kwarg`` dict as attributes
``kwarg.<key>``). A :class:`Record` holds one field table; the reader checks every node of a registered
type against it, so another method's records (pruning masks, block-circulant first rows, low-rank factors)
are carried by registering a Record, without changing the reader. Its ``expand`` turns it back into the
arrays it stands for when the file becomes ONNX (aipu.tai.to_onnx).

Implemented: ``Dequantization_tensor`` (Table 229) over a chapter-10 stream (the codec's ``nnc()`` layer
stream stored as a UINT8 parameter), D_Method 1 (linear: real = level x step, the step of the stream
itself) at granularity 2 (layer); and ``Un_structured_sparse`` (Table 251) row de-pruning (granularity 2).
``DecompressMultimodel`` (Table 217): several models' weights of one layer, M_Method 2 (intra-layer sharing:
the shared slice once, each model's specific slice) or 3 (residual quantization: a base weight, each model's
k-means centres and packed indices); the expansion rebuilds the model the reader asks for (§8.1.2.3, decompress
one model; docs/multimodel.md). ``DecompressStructuralMatric`` (Table 253), D_Method 2 (block circulant, §8.4.2):
a layer's first rows, circ_size and its sign vector as the network's ±1 reference vector (stored once), the
layer's length of it and the extension method (Tables 260-263); a low-rank layer (D_Method 3) is carried as the
convolutions its factors are, ordinary nodes (docs/tai.md).
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
    expand: Expand = field(compare=False)     # the arrays the record stands for, from its inputs
    optional: tuple[str, ...] = ()
    lists: tuple[str, ...] = ()        # inputs that name a list of stored tensors (the others one)
    per_model: bool = False            # expand takes ``model``: which of the file's models to rebuild


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


# -------------------------------------------------------------------------------------- §8.1 multi-model
M_SHARING, M_RESIDUAL = 2, 3                # Table 218 M_Method
MAX_MODELS = 256


def _stored(document, variables: list, layer: str, key: str, array: np.ndarray, value_type: str) -> str:
    """``array`` stored as parameter (layer, key) with its persistable VariableType; returns the variable name."""
    name = f"{layer}.{key}"
    document.add(Parameter(layer, key, value_type, array))
    variable = VariableType(name=name, data_type=DENSE_TENSOR, is_persitable=True)
    variable.tensor.name, variable.tensor.data_type = name, CODE[value_type]
    variable.tensor.parameter_layer, variable.tensor.parameter_key = layer, key
    for size in array.shape:
        variable.tensor.shape.dim.add(size=size)
    variables.append(variable)
    return name


def _declared(name: str, shape: tuple[int, ...]) -> VariableType:
    variable = VariableType(name=name, data_type=DENSE_TENSOR)
    variable.tensor.name, variable.tensor.data_type = name, CODE["FLOAT32"]
    for size in shape:
        variable.tensor.shape.dim.add(size=size)
    return variable


def multimodel_record(document, layer: str, weight: str, bias: str | None, inputs: dict[str, list[np.ndarray]],
                      attributes: dict[str, int], shapes: tuple[tuple[int, ...], tuple[int, ...]]):
    """A DecompressMultimodel node over the stored ``inputs`` (key -> arrays: float32, or UINT8 packed
    indices), its outputs the layer's ``weight`` and ``bias`` variables of ``shapes``: ([node], VariableTypes)."""
    node = OperatorNode(name=f"{layer}.multimodel", operator_type="DecompressMultimodel")
    variables: list = []
    for key, arrays in inputs.items():
        entry = node.input.add(key=key)
        for index, array in enumerate(arrays):
            value_type = "UINT8" if array.dtype == np.uint8 else "FLOAT32"
            stored = f"{key}.{index}" if key in ("W_share", "W_specific", "B_specific") else key
            entry.value.add(name=_stored(document, variables, node.name, stored, array, value_type))
    for key, name, shape in (("Weights_list", weight, shapes[0]), ("Bias_list", bias, shapes[1])):
        if name is not None:
            node.output.add(key=key).value.add(name=name)
            variables.append(_declared(name, shape))
    for key, value in attributes.items():
        node.attribute.add(name=key).val.CopyFrom(Type(i=int(value)))
    return [node], variables


def pack_indices(indices: np.ndarray, n: int) -> np.ndarray:
    """Cluster indices at ``n`` bits each, low bit first, in whole bytes (UINT8): the code storage."""
    bits = (np.asarray(indices, np.uint16).ravel()[:, None] >> np.arange(n)) & 1
    return np.packbits(bits.astype(np.uint8).ravel(), bitorder="little")


def unpack_indices(packed: np.ndarray, n: int, count: int) -> np.ndarray:
    """The inverse of :func:`pack_indices` for ``count`` indices."""
    bits = np.unpackbits(packed, bitorder="little", count=count * n).reshape(count, n).astype(np.int64)
    return (bits << np.arange(n)).sum(axis=1)


def _float_arrays(inputs: dict, key: str, where: str, count: int | None = None) -> list[np.ndarray]:
    arrays = inputs.get(key, [])
    if (count is not None and len(arrays) != count) or not all(a.dtype == np.float32 and a.ndim >= 1
                                                                and np.isfinite(a).all() for a in arrays):
        raise InputError(f"{where} input {key!r}", [f"{a.dtype} {list(a.shape)}" for a in arrays],
                         f"{count if count is not None else 'the'} finite FLOAT32 tensors")
    return arrays


def _decompress_multimodel(inputs: dict, attributes: dict, shapes: dict, where: str, model: int = 0
                           ) -> dict[str, np.ndarray]:
    """Model ``model``'s weight and bias of a layer: M_Method 2, Concate(W_share, W_specific[model], axe) and
    the biases alike (Table 222); M_Method 3, Base_model + W_share[model][indices] (Table 228) and the model's
    own bias. Every count, shape and index is checked first."""
    method, models = attributes.get("M_Method"), len(inputs.get("W_specific", []))
    if method not in (M_SHARING, M_RESIDUAL) or not 1 <= models <= MAX_MODELS:
        raise InputError(f"{where} M_Method, W_specific", (method, models),
                         f"M_Method 2 or 3 and 1 .. {MAX_MODELS} models")
    if not 0 <= model < models:
        raise InputError("--model", model, f"a model of the file, 0 .. {models - 1}")
    biases = _float_arrays(inputs, "B_specific", where, models) if "B_specific" in inputs else None
    if method == M_SHARING:
        weights = _float_arrays(inputs, "W_specific", where, models)
        (share,) = _float_arrays(inputs, "W_share", where, 1)
        if "Base_model" in inputs:
            raise InputError(f"{where} inputs", sorted(inputs), "no Base_model with M_Method 2")
        axe = attributes.get("axe", 0)
        if not 0 <= axe < share.ndim or any(w.ndim != share.ndim or np.delete(w.shape, axe).tolist()
                                            != np.delete(share.shape, axe).tolist() for w in weights):
            raise InputError(f"{where} W_share, W_specific shapes", [list(share.shape), list(weights[model].shape)],
                             f"equal but along axe {axe}")
        out = {"Weights_list": np.concatenate([share, weights[model]], axis=axe)}
        if biases is not None:
            b_share = inputs.get("B_share", np.zeros(0, np.float32))
            if b_share.dtype != np.float32 or b_share.ndim != 1:
                raise InputError(f"{where} input 'B_share'", f"{b_share.dtype} {list(b_share.shape)}", "FLOAT32 [C]")
            out["Bias_list"] = np.concatenate([b_share, biases[model]])
    else:
        out = {"Weights_list": _residual_weight(inputs, attributes, where, model, models)}
        if biases is not None:
            out["Bias_list"] = biases[model]
    return _checked_shapes(out, shapes, where)


def _residual_weight(inputs: dict, attributes: dict, where: str, model: int, models: int) -> np.ndarray:
    n = attributes.get("n")
    if "Base_model" not in inputs:
        raise InputError(f"{where} inputs", sorted(inputs), "Base_model with M_Method 3")
    (base,) = _float_arrays({"Base_model": [inputs["Base_model"]]}, "Base_model", where, 1)
    centres = _float_arrays(inputs, "W_share", where, models)[model]
    packed = inputs["W_specific"][model]
    if n is None or not 1 <= n <= 8 or centres.ndim != 1 or not 1 <= centres.size <= 1 << n:
        raise InputError(f"{where} n, W_share", (n, list(centres.shape)), "n 1 .. 8 and 1 .. 2^n centres")
    if packed.dtype != np.uint8 or packed.shape != (-(-base.size * n // 8),):
        raise InputError(f"{where} input 'W_specific'", f"{packed.dtype} {list(packed.shape)}",
                         f"UINT8 [{-(-base.size * n // 8)}]: {base.size} indices of {n} bits")
    indices = unpack_indices(packed, n, base.size)
    if indices.max(initial=0) >= centres.size:
        raise InputError(f"{where} input 'W_specific'", int(indices.max()), f"indices below {centres.size}")
    return base + centres[indices].reshape(base.shape)


def _checked_shapes(out: dict, shapes: dict, where: str) -> dict:
    for key, array in out.items():
        if shapes.get(key) is not None and tuple(shapes[key]) != array.shape:
            raise InputError(f"{where} output {key!r}", list(array.shape), f"the declared {list(shapes[key])}")
    return out


register(Record("DecompressMultimodel", "T/AI 115.1-2021 §8.1, Table 217", ("W_share", "W_specific"),
                ("Weights_list", "Bias_list", "Error"), {"M_Method": "i", "axe": "i", "n": "i"},
                optional=("B_share", "B_specific", "Base_model"), expand=_decompress_multimodel,
                lists=("W_share", "W_specific", "B_specific"), per_model=True))


# ------------------------------------------------------------------------------------ §8.4 block circulant
D_CIRCULANT, GRANULARITY_STRUCTURAL_LAYER = 2, 3     # Table 255 D_Method, Table 254 granularity
BASE_SIGNS = ("circulant", "base_sign_vector_network")   # the parameter every circulant record reads
MAX_CIRC_SIZE = 1 << 12
MAX_DENSE_ELEMENTS = 1 << 27                          # a decompressed weight: bounds what a small file expands to


def circulant_record(document, weight: str, w_circ: np.ndarray, circ_size: int, signs, index: int,
                     extension: int, transposed: bool, options=None):
    """A DecompressStructuralMatric record (block circulant) whose output is the initializer ``weight``:
    C·diag(s) of the first rows ``w_circ`` (outputs/L, inputs, ...), transposed for a Gemm that stores
    (inputs, outputs). ``signs``: the network's SignVectors, layer ``index`` of its len_list; the reference
    vector is stored on the first call. ``options``: codec options to store ``w_circ`` as a chapter-10 stream
    (a Dequantization_tensor record feeding this one). Returns (nodes, VariableTypes)."""
    layer, nodes, variables = f"{weight}.circulant", [], []
    if BASE_SIGNS not in document.parameters:
        _stored(document, variables, *BASE_SIGNS, np.asarray(signs.base_sign_vector_network, np.int8), "INT8")
    first_rows = np.asarray(w_circ, np.float32)
    if options is None:
        source = _stored(document, variables, layer, "X", first_rows, "FLOAT32")
    else:
        source = f"{layer}.X"
        node, stream_variables = compressed_weight(document, first_rows, source, options)
        nodes.append(node)
        variables += stream_variables
    node = OperatorNode(name=layer, operator_type="DecompressStructuralMatric")
    node.input.add(key="X").value.add(name=source)
    node.input.add(key="base_sign_vector_network").value.add(name=".".join(BASE_SIGNS))
    node.output.add(key="Y").value.add(name=weight)
    for key, value in (("granularity", Type(i=GRANULARITY_STRUCTURAL_LAYER)), ("D_Method", Type(i=D_CIRCULANT)),
                       ("kwarg.circ_size", Type(i=int(circ_size))), ("kwarg.len_list", Type(i=signs.len_list[index])),
                       ("kwarg.extend_list", Type(i=int(extension))), ("kwarg.transposed", Type(b=bool(transposed)))):
        node.attribute.add(name=key).val.CopyFrom(value)
    dense_shape = (first_rows.shape[0] * circ_size, *first_rows.shape[1:])
    variables.append(_declared(weight, dense_shape[1::-1] + dense_shape[2:] if transposed else dense_shape))
    return [*nodes, node], variables


def circulant_layout(inputs: dict, attributes: dict, where: str) -> tuple[np.ndarray, int, np.ndarray, bool]:
    """(first rows, circ_size, sign vector, transposed) of a block-circulant record, every field checked."""
    from aipu.compress import circulant

    first_rows, base = inputs["X"], inputs["base_sign_vector_network"]
    size, length = attributes.get("kwarg.circ_size"), attributes.get("kwarg.len_list")
    extension = attributes.get("kwarg.extend_list", circulant.SHIFT_EXTENSION)
    if (attributes.get("D_Method"), attributes.get("granularity")) != (D_CIRCULANT, GRANULARITY_STRUCTURAL_LAYER):
        raise InputError(f"{where} D_Method, granularity", (attributes.get("D_Method"), attributes.get("granularity")),
                         f"({D_CIRCULANT}, {GRANULARITY_STRUCTURAL_LAYER}): block circulant, per layer")
    (first_rows,) = _float_arrays({"X": [first_rows]}, "X", where, 1)
    if not isinstance(size, int) or not 1 <= size <= MAX_CIRC_SIZE or first_rows.ndim < 2 or \
            first_rows.shape[1] % size or first_rows.size * size > MAX_DENSE_ELEMENTS:
        raise InputError(f"{where} kwarg.circ_size, X", (size, list(first_rows.shape)),
                         f"circ_size 1 .. {MAX_CIRC_SIZE} dividing X's inputs (axis 1), the weight at most "
                         f"{MAX_DENSE_ELEMENTS} elements")
    if base.dtype != np.int8 or base.ndim != 1 or not np.isin(base, (-1, 1)).all():
        raise InputError(f"{where} input 'base_sign_vector_network'", f"{base.dtype} {list(base.shape)}",
                         "an INT8 vector of -1 and +1")
    if not isinstance(length, int) or not 1 <= length <= base.size or extension not in (
            circulant.SHIFT_EXTENSION, circulant.COPY_EXTENSION):
        raise InputError(f"{where} kwarg.len_list, kwarg.extend_list", (length, extension),
                         f"a length 1 .. {base.size} (the reference vector's) and extension 1 (shift) or 2 (copy)")
    signs = circulant.extend_base_to_sign(base[:length], first_rows.shape[1], extension)
    return first_rows, size, signs, bool(attributes.get("kwarg.transposed", False))


def _decompress_circulant(inputs: dict, attributes: dict, shapes: dict, where: str) -> dict[str, np.ndarray]:
    """The dense weight C·diag(s) of a block-circulant record (§8.4.2.1-8.4.2.3)."""
    from aipu.compress import circulant

    first_rows, size, signs, transposed = circulant_layout(inputs, attributes, where)
    dense = circulant.signed_weight(circulant.decompress_w_circ_to_weight(first_rows, size), signs)
    dense = (np.swapaxes(dense, 0, 1) if transposed else dense).astype(np.float32)
    return _checked_shapes({"Y": dense}, shapes, where)


register(Record("DecompressStructuralMatric", "T/AI 115.1-2021 §8.4, Table 253", ("X", "base_sign_vector_network"),
                ("Y",), {"granularity": "i", "D_Method": "i", "kwarg.circ_size": "i", "kwarg.len_list": "i",
                         "kwarg.extend_list": "i", "kwarg.transposed": "b"}, expand=_decompress_circulant))
