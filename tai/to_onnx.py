"""T/AI 115.1-2021 model representation -> ONNX, for the operators of aipu.tai.operators and the registered
compression records (aipu.tai.records).

The main graph's persistable variables become initializers (their arrays from the parameter section), every
compression record is expanded into the arrays it stands for (a chapter-10 stream into its dequantized
weight), and every other OperatorNode becomes the ONNX node of its mapping row. What has no ONNX form (an
operator outside the table, a sub-graph) is refused by one line naming it;
the model is then checked by onnx.checker.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from aipu.sim.machine.errors import InputError

from .file import TaiFile, stored_array, tensor_shape
from .operators import BY_TAI, ONNX_TYPES, OpSpec
from .records import RECORDS, attribute_value, check_record, circulant_layout
from .schema import NAME

_ONNX_OF = {name: code for code, name in ONNX_TYPES.items()}
_ARRAY_TYPES = {"BOOL": np.bool_, "BINARY": np.uint8, "INT2": np.int8, "INT4": np.int8, "UINT2": np.uint8,
                "UINT4": np.uint8}


def to_onnx(document: TaiFile, model_index: int = 0) -> onnx.ModelProto:
    """The ONNX model of a representation; InputError naming what has no ONNX form. ``model_index``: which
    model a multi-model file's records rebuild (DecompressMultimodel; 0 for a file of one model)."""
    return convert(document, model_index)[0]


def convert(document: TaiFile, model_index: int = 0) -> tuple[onnx.ModelProto, dict[str, tuple[int, np.ndarray]]]:
    """:func:`to_onnx`'s model, and {weight initializer: (circ_size, sign vector)} of its block-circulant
    records: the layers `aipu compile` keeps compressed (LOAD expands their first rows, docs/structured.md)."""
    model = document.model
    graph = model.graph[0]
    if len(model.graph) > 1 or graph.sub_graphs:
        raise InputError("graph", f"{len(model.graph)} graphs, {len(graph.sub_graphs)} sub-graphs",
                         "one graph without sub-graphs (the CNN subset)")
    variables = {v.name: v for v in (*graph.variable_type, *graph.input_nodes, *graph.output_nodes)}
    constants = {}
    for variable in graph.variable_type:
        array = stored_array(document, variable.tensor) if variable.is_persitable else None
        if array is not None:
            constants[variable.name] = _as_onnx_array(array, NAME[variable.tensor.data_type])
    nodes, per_model, circulant = [], False, {}
    for node in graph.operator_node:
        where = f"node {node.name!r} ({node.operator_type})"
        if node.operator_type in RECORDS:
            per_model |= RECORDS[node.operator_type].per_model
            inputs, attributes, expanded = _expand(node, where, constants, variables, model_index)
            constants.update(expanded)
            if node.operator_type == "DecompressStructuralMatric":
                _, size, signs, _ = circulant_layout(inputs, attributes, where)
                circulant.update({name: (size, signs) for name in expanded})
        else:
            nodes.append(_node(document, node, where))
    if model_index and not per_model:
        raise InputError("--model", model_index, "0: the file holds one model")
    read = {name for node in nodes for name in node.input} | {v.name for v in graph.output_nodes}
    constants = {name: array for name, array in constants.items() if name in read}
    onnx_graph = onnx.helper.make_graph(
        nodes, graph.name, [_value_info(v) for v in graph.input_nodes], [_value_info(v) for v in graph.output_nodes],
        [numpy_helper.from_array(array, name) for name, array in constants.items()],
        value_info=[_value_info(v) for v in graph.variable_type if v.name not in constants])
    out = onnx.helper.make_model(onnx_graph, opset_imports=_opsets(model), producer_name=model.framework_name,
                                 producer_version=model.framework_version)
    attributes = {a.name: attribute_value(a) for a in model.attribute}
    out.ir_version = attributes.get("onnx.ir_version", onnx.IR_VERSION)
    if model.model_version.isdigit():
        out.model_version = int(model.model_version)
    for name, value in attributes.items():
        if name.startswith("onnx.metadata.") and isinstance(value, bytes):
            out.metadata_props.add(key=name.removeprefix("onnx.metadata."), value=value.decode("utf-8", "replace"))
    try:
        onnx.checker.check_model(out)
    except (onnx.checker.ValidationError, ValueError, TypeError) as exc:
        raise InputError("model", "its ONNX form", f"onnx.checker: {' '.join(str(exc).split())[:300]}") from None
    return out, {name: layout for name, layout in circulant.items() if name in read}


def _opsets(model) -> list:
    opsets = [onnx.helper.make_opsetid("" if a.name == "onnx.opset.ai.onnx" else a.name.removeprefix("onnx.opset."),
                                       a.val.i)
              for a in model.attribute if a.name.startswith("onnx.opset.") and a.val.WhichOneof("value") == "i"]
    if not any(opset.domain == "" for opset in opsets):
        raise InputError("model attribute 'onnx.opset.ai.onnx'", "absent", "the ONNX opset its operators follow")
    return opsets


def _as_onnx_array(array: np.ndarray, value_type: str) -> np.ndarray:
    return array.astype(_ARRAY_TYPES[value_type]) if value_type in _ARRAY_TYPES else array


def _expand(node, where: str, constants: dict, variables: dict, model_index: int) -> tuple[dict, dict, dict]:
    """A compression record's inputs (stored arrays, a list of them for a list input), its checked attributes and
    its outputs as arrays by variable name."""
    record = RECORDS[node.operator_type]
    attributes = check_record(node, where)
    inputs = {}
    for entry in node.input:
        listed = entry.key in record.lists
        if not (listed or len(entry.value) == 1) or not all(v.name in constants for v in entry.value):
            raise InputError(f"{where} input {entry.key!r}", [v.name for v in entry.value],
                             "stored tensors" if listed else "one stored tensor")
        arrays = [constants[v.name] for v in entry.value]
        inputs[entry.key] = arrays if listed else arrays[0]
    names = {entry.key: entry.value[0].name for entry in node.output if len(entry.value) == 1}
    shapes = {key: tensor_shape(variables[name].tensor, where) if name in variables else None
              for key, name in names.items()}
    values = (record.expand(inputs, attributes, shapes, where, model=model_index) if record.per_model
              else record.expand(inputs, attributes, shapes, where))
    return inputs, attributes, {names[key]: value for key, value in values.items() if key in names}


def _spec(node, where: str) -> OpSpec:
    attributes = {a.name: attribute_value(a) for a in node.attribute}
    for spec in BY_TAI.get(node.operator_type, ()):
        if all(attributes.get(key) == (value.encode() if isinstance(value, str) else value)
               for key, value in spec.fixed.items()):
            return spec
    raise InputError(where, {k: attributes.get(k) for s in BY_TAI.get(node.operator_type, ()) for k in s.fixed},
                     "an operator of the CNN subset with its fixed attributes (docs/tai.md, mapping table)")


def _node(document: TaiFile, node, where: str) -> onnx.NodeProto:
    spec = _spec(node, where)
    inputs = _positions(node.input, spec.inputs, f"{where} inputs")
    outputs = _positions(node.output, spec.outputs, f"{where} outputs")
    attributes = {}
    for attribute in node.attribute:
        if attribute.name in spec.fixed or attribute.name == "num_fliters":
            continue
        name = spec.onnx_name(attribute.name)
        attributes[name] = _onnx_attribute(document, attribute, name, f"{where} attribute {attribute.name!r}")
    for key, value in spec.when.items():
        attributes[key] = value
    made = onnx.helper.make_node(spec.onnx, inputs, outputs, name=node.name, doc_string=node.doc_string or None)
    made.attribute.extend(attributes.values())
    return made


def _positions(entries, keys: tuple[str, ...], where: str) -> list[str]:
    """ONNX's positional names from keyed entries ("" for an omitted optional one, trailing ones dropped)."""
    by_key = {entry.key: [value.name for value in entry.value] for entry in entries}
    plain = [key.rstrip("*") for key in keys]
    unknown = sorted(set(by_key) - set(plain))
    if unknown:
        raise InputError(where, unknown, f"keys among {', '.join(plain)}")
    names = []
    for key, plain_key in zip(keys, plain):
        values = by_key.get(plain_key, [])
        if not key.endswith("*") and len(values) > 1:
            raise InputError(f"{where} {plain_key!r}", values, "one variable")
        names.extend(values or [""])
    while names and not names[-1]:
        names.pop()
    return names


def _onnx_attribute(document: TaiFile, attribute, name: str, where: str) -> onnx.AttributeProto:
    kinds = [value.WhichOneof("value") for value in attribute.list]
    if attribute.HasField("val"):
        value = attribute.val
        kind = value.WhichOneof("value")
        if kind == "t":
            array = stored_array(document, value.t)
            if array is None:
                raise InputError(where, "a tensor without a stored parameter", "a tensor in the parameter section")
            tensor = numpy_helper.from_array(_as_onnx_array(array, NAME[value.t.data_type]), value.t.name)
            return onnx.helper.make_attribute(name, tensor)
        if kind in ("i", "f", "d", "s", "b"):
            plain = getattr(value, kind)
            return onnx.helper.make_attribute(name, int(plain) if kind == "b" else plain)
        raise InputError(where, kind, "a value of kind i, f, d, s or b, or a stored tensor")
    if len(set(kinds)) > 1 or not set(kinds) <= {"i", "f", "d", "s"}:
        raise InputError(where, kinds, "a list of one kind: i, f, d or s")
    kind = kinds[0] if kinds else "i"
    values = [getattr(value, kind) for value in attribute.list]
    types = {"i": onnx.AttributeProto.INTS, "f": onnx.AttributeProto.FLOATS, "d": onnx.AttributeProto.FLOATS,
             "s": onnx.AttributeProto.STRINGS}
    return onnx.helper.make_attribute(name, values, attr_type=types[kind])


def _value_info(variable) -> onnx.ValueInfoProto:
    tensor = variable.tensor
    value_type = NAME.get(tensor.data_type)
    if value_type not in _ONNX_OF:
        raise InputError(f"variable {variable.name!r} data_type", value_type, "a type ONNX has")
    shape = None if tensor.shape.unkown else [dim.size if dim.HasField("size") else (dim.name or None)
                                              for dim in tensor.shape.dim]
    return onnx.helper.make_tensor_value_info(variable.name, _ONNX_OF[value_type], shape)
