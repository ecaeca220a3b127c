"""ONNX -> T/AI 115.1-2021 model representation, for the operators of aipu.tai.operators.

Every node becomes an OperatorNode of its §6.3.1 operator; every initializer a persistable VariableType
whose Tensor refers by (layer, key) to its array in the parameter section (§6.1.2): the layer is the first
node that reads it, the key the input key it is read under. Graph inputs and outputs become input_nodes and
output_nodes, value_info the other variables. A node outside the table is refused by one line naming it.
``compress`` names weights to store as chapter-10 streams instead (aipu.tai.records).
"""
from __future__ import annotations

import onnx
from onnx import numpy_helper

from aipu.sim.machine.errors import InputError

from .file import TaiFile
from .operators import BY_ONNX, ONNX_TYPES, OpSpec, expand_keys
from .params import Parameter
from .records import compressed_weight
from .schema import CODE, DENSE_TENSOR, Attribute, Model, OperatorNode, Tensor, Type, VariableType, value_type_of

STANDARD = "T/AI 115.1-2021"
_STORED_TYPES = {code for code, name in ONNX_TYPES.items() if name not in ("STRING", "INT4", "UINT4")}


def from_onnx(model: onnx.ModelProto, compress: dict[str, object] | None = None, records=()) -> TaiFile:
    """The representation of ``model``; ``compress`` maps weight initializer names to the codec options their
    chapter-10 stream is coded with (aipu.tai.records); ``records``: (initializer names, build) pairs whose
    ``build(document)`` gives the compression records (nodes, VariableTypes) that stand for those initializers
    (aipu.tai.records.multimodel_record, circulant_record). InputError names the node or tensor refused."""
    graph = model.graph
    document = TaiFile(Model(Version=STANDARD, framework_name=model.producer_name,
                             framework_version=model.producer_version, model_name=graph.name))
    if model.model_version:
        document.model.model_version = str(model.model_version)
    _model_attributes(document.model, model)
    out = document.model.graph.add(id=0, name=graph.name or "main", parent_graph_id=-1, forward_graph_id=-1)
    nodes = [(node.name or f"{node.op_type}_{index}", node) for index, node in enumerate(graph.node)]
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    homes = _parameter_homes(nodes, initializers, out.name)
    compress = dict(compress or {})
    replaced = set(compress)
    for name, options in compress.items():
        node, variables = compressed_weight(document, _array(initializers[name]), name, options)
        out.operator_node.append(node)
        out.variable_type.extend(variables)
    for names, build in records:
        built, variables = build(document)
        out.operator_node.extend(built)
        out.variable_type.extend(variables)
        replaced.update(names)
    seen = set()
    for name, node in nodes:
        if name in seen:
            raise InputError(f"node {name!r} ({node.op_type})", "a second node of this name", "unique node names")
        seen.add(name)
        out.operator_node.append(_node(document, name, node, initializers))
    inputs = [value for value in graph.input if value.name not in initializers]
    for target, values in ((out.input_nodes, inputs), (out.output_nodes, graph.output),
                           (out.variable_type, graph.value_info)):
        for value in values:
            target.append(_variable(value))
    for name, tensor in initializers.items():
        if name not in replaced:
            out.variable_type.append(_stored_variable(document, tensor, *homes[name]))
    return document


def _model_attributes(out: Model, model: onnx.ModelProto) -> None:
    """What ONNX needs back that Table 7 has no field for: IR version, opsets, metadata (model attributes)."""
    _add(out.attribute, "onnx.ir_version", i=model.ir_version)
    for opset in model.opset_import:
        _add(out.attribute, f"onnx.opset.{opset.domain or 'ai.onnx'}", i=opset.version)
    for prop in model.metadata_props:
        _add(out.attribute, f"onnx.metadata.{prop.key}", s=prop.value.encode())


def _add(attributes, name: str, **value) -> None:
    attributes.add(name=name).val.CopyFrom(Type(**value))


def _parameter_homes(nodes, initializers: dict, graph_name: str) -> dict:
    """Where each initializer is stored: ``"@name" -> (layer, key)``: its first reader and the key it reads it
    under (a list's element by its position, "X.0"); an initializer no node reads, under the graph's name."""
    homes: dict = {}
    for layer, node in nodes:
        spec = _spec(layer, node)
        keys = expand_keys(spec.inputs, len(node.input))
        variadic = spec.inputs and spec.inputs[-1].endswith("*")
        for position, (key, tensor) in enumerate(zip(keys, node.input)):
            if tensor in initializers and tensor not in homes:
                stored_key = f"{key}.{position - len(spec.inputs) + 1}" if variadic and key == keys[-1] else key
                homes[tensor] = (layer, stored_key)
    for name in initializers:
        homes.setdefault(name, (graph_name, name))
    return homes


def _spec(name: str, node: onnx.NodeProto) -> OpSpec:
    specs = BY_ONNX.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if not specs:
        raise InputError(f"node {name!r}", f"{node.domain + '.' if node.domain else ''}{node.op_type}",
                         "an operator of the CNN subset (docs/tai.md, mapping table)")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    for spec in specs:
        if all(attrs.get(key, specs[0].when.get(key)) == value for key, value in spec.when.items()):
            return spec
    raise InputError(f"node {name!r} ({node.op_type}) attributes", {k: attrs.get(k) for k in specs[0].when},
                     " or ".join(str(spec.when) for spec in specs))


def _node(document: TaiFile, name: str, node: onnx.NodeProto, initializers: dict) -> OperatorNode:
    spec = _spec(name, node)
    out = OperatorNode(name=name, operator_type=spec.tai)
    if node.doc_string:
        out.doc_string = node.doc_string
    for entries, keys, names in ((out.input, spec.inputs, node.input), (out.output, spec.outputs, node.output)):
        if len(names) > len(keys) and not (keys and keys[-1].endswith("*")):
            raise InputError(f"node {name!r} ({node.op_type})", f"{len(names)} inputs/outputs",
                             f"at most {len(keys)}")
        for key, tensor in zip(expand_keys(keys, len(names)), names):
            if tensor:
                entry = next((e for e in entries if e.key == key), None) or entries.add(key=key)
                entry.value.add(name=tensor)
    for attribute in node.attribute:
        if attribute.name in spec.when:
            continue
        _attribute(document, out.attribute.add(name=spec.tai_name(attribute.name)), attribute, name, spec)
    present = {a.name for a in node.attribute}
    for key, value in spec.defaults.items():
        if key not in present:
            _add(out.attribute, spec.tai_name(key), f=value)
    for key, value in spec.fixed.items():
        _add(out.attribute, key, **{"b" if isinstance(value, bool) else "s": value if isinstance(value, bool)
                                    else value.encode()})
    if spec.filters and len(node.input) > 1 and node.input[1] in initializers:
        dims = initializers[node.input[1]].dims
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        _add(out.attribute, "num_fliters", i=dims[0] if spec.filters == "out" else dims[1] * group)
    return out


def _attribute(document: TaiFile, out: Attribute, attribute: onnx.AttributeProto, layer: str, spec: OpSpec) -> None:
    """An ONNX attribute as a Type value (val) or a list of them; a tensor goes to the parameter section."""
    kind = onnx.AttributeProto
    where = f"node {layer!r} attribute {attribute.name!r}"
    if attribute.type == kind.INT:
        out.val.CopyFrom(Type(b=bool(attribute.i)) if attribute.name in spec.booleans else Type(i=attribute.i))
    elif attribute.type == kind.FLOAT:
        out.val.f = attribute.f
    elif attribute.type == kind.STRING:
        out.val.s = attribute.s
    elif attribute.type == kind.INTS:
        out.list.extend(Type(i=value) for value in attribute.ints)
    elif attribute.type == kind.FLOATS:
        out.list.extend(Type(f=value) for value in attribute.floats)
    elif attribute.type == kind.STRINGS:
        out.list.extend(Type(s=value) for value in attribute.strings)
    elif attribute.type == kind.TENSOR:
        out.val.t.CopyFrom(_stored_tensor(document, attribute.t, layer, attribute.name, where))
    else:
        raise InputError(where, onnx.AttributeProto.AttributeType.Name(attribute.type),
                         "INT, FLOAT, STRING, TENSOR or lists of INT, FLOAT, STRING")


def _variable(value: onnx.ValueInfoProto):
    """A graph input, output or value_info as a VariableType with its Tensor's type and shape (no data)."""
    out = VariableType(name=value.name, data_type=DENSE_TENSOR)
    tensor_type = value.type.tensor_type
    if value.type.WhichOneof("value") != "tensor_type" or tensor_type.elem_type not in ONNX_TYPES:
        raise InputError(f"tensor {value.name!r} type", onnx.helper.printable_type(value.type),
                         "a tensor of a Table 14 ValueType")
    out.tensor.name = value.name
    out.tensor.data_type = CODE[ONNX_TYPES[tensor_type.elem_type]]
    if not tensor_type.HasField("shape"):
        out.tensor.shape.unkown = True
    for dim in tensor_type.shape.dim:
        added = out.tensor.shape.dim.add()
        if dim.HasField("dim_value"):
            added.size = dim.dim_value
        elif dim.HasField("dim_param"):
            added.name = dim.dim_param
    return out


def _array(tensor: onnx.TensorProto):
    where = f"initializer {tensor.name!r}"
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise InputError(where, "external data", "weights stored in the model file")
    if tensor.data_type not in _STORED_TYPES:
        raise InputError(f"{where} type", onnx.TensorProto.DataType.Name(tensor.data_type),
                         "a fixed-size Table 14 type (no strings, bfloat16, float8 or packed int4)")
    return numpy_helper.to_array(tensor)


def _stored_tensor(document: TaiFile, tensor: onnx.TensorProto, layer: str, key: str, where: str):
    """A Tensor record whose data is the parameter (layer, key), which is stored."""
    array = _array(tensor)
    value_type = value_type_of(array.dtype)
    try:
        document.add(Parameter(layer, key, value_type, array))
    except ValueError as exc:
        raise InputError(where, f"{layer}/{key}", str(exc)) from None
    out = Tensor(name=tensor.name, data_type=CODE[value_type], parameter_layer=layer, parameter_key=key)
    for size in array.shape:
        out.shape.dim.add(size=size)
    return out


def _stored_variable(document: TaiFile, tensor: onnx.TensorProto, layer: str, key: str):
    out = VariableType(name=tensor.name, data_type=DENSE_TENSOR, is_persitable=True)
    out.tensor.CopyFrom(_stored_tensor(document, tensor, layer, key, f"initializer {tensor.name!r}"))
    return out
