"""T/AI 115.1-2021 Tables 7-17 (the model representation of chapter 6) as a proto2 schema, built at import time.

The standard describes its records "after Google Protocol Buffer syntax" (T/AI 115.1-2021 §6.1.1), so the
wire format is protobuf's own: the schema below is a ``FileDescriptorProto`` added to a private descriptor
pool, and ``message_factory`` gives the message classes. No generated ``*_pb2.py`` is checked in, and no
varint is written by hand. Field numbers follow each table's row order (docs/tai.md, "Schema"); the few
fields the tables lack (references into the parameter section, the ValueType of a list of variables) come
after the table's own, as §6.2.1 b) allows.

ValueType (Table 14) is a proto2 enum, so it starts at 1 as the table does; a code outside 1..21 decodes as
an unknown field and reads as absent, which the reader refuses by name.
"""
from __future__ import annotations

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "tai115"
_F = descriptor_pb2.FieldDescriptorProto

# Table 14, in code order from 1
VALUE_TYPES = ("UNDEFINED", "BINARY", "INT2", "INT4", "INT8", "INT16", "INT32", "INT64", "UINT2", "UINT4",
               "UINT8", "UINT16", "UINT32", "UINT64", "FLOAT16", "FLOAT32", "FLOAT64", "BOOL", "STRING",
               "COMPLEX64", "COMPLEX128")
CODE = {name: code for code, name in enumerate(VALUE_TYPES, start=1)}
NAME = {code: name for name, code in CODE.items()}

# How each ValueType the parameter section stores is held in numpy: sub-byte integers one element a byte
# (their range checked), BINARY as opaque bytes. STRING and UNDEFINED have no fixed-size element.
NUMPY = {"BINARY": "u1", "INT2": "i1", "INT4": "i1", "INT8": "i1", "INT16": "<i2", "INT32": "<i4", "INT64": "<i8",
         "UINT2": "u1", "UINT4": "u1", "UINT8": "u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8",
         "FLOAT16": "<f2", "FLOAT32": "<f4", "FLOAT64": "<f8", "BOOL": "u1", "COMPLEX64": "<c8",
         "COMPLEX128": "<c16"}
RANGES = {"BINARY": (0, 255), "INT2": (-2, 1), "INT4": (-8, 7), "UINT2": (0, 3), "UINT4": (0, 15), "BOOL": (0, 1)}

# (name, number, label, type, message or enum type, packed). Labels: optional, repeated.
_O, _R = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_MESSAGES: dict[str, list[tuple]] = {
    "Model": [                                      # Table 7
        ("Version", 1, _O, _F.TYPE_STRING), ("contributors", 2, _O, _F.TYPE_MESSAGE, "ContributorList"),
        ("framework_name", 3, _O, _F.TYPE_STRING), ("framework_version", 4, _O, _F.TYPE_STRING),
        ("model_name", 5, _O, _F.TYPE_STRING), ("model_version", 6, _O, _F.TYPE_STRING),
        ("doc_url", 7, _O, _F.TYPE_STRING), ("graph", 8, _R, _F.TYPE_MESSAGE, "Graph"),
        ("attribute", 9, _R, _F.TYPE_MESSAGE, "Attribute")],
    "ContributorList": [                            # Table 8
        ("name", 1, _R, _F.TYPE_STRING), ("email", 2, _R, _F.TYPE_STRING), ("institute", 3, _R, _F.TYPE_STRING)],
    "Graph": [                                      # Table 9
        ("operator_node", 1, _R, _F.TYPE_MESSAGE, "OperatorNode"),
        ("variable_type", 2, _R, _F.TYPE_MESSAGE, "VariableType"),
        ("input_nodes", 3, _R, _F.TYPE_MESSAGE, "VariableType"),
        ("output_nodes", 4, _R, _F.TYPE_MESSAGE, "VariableType"),
        ("id", 5, _O, _F.TYPE_INT64), ("name", 6, _O, _F.TYPE_STRING),
        ("parent_graph_id", 7, _O, _F.TYPE_INT64), ("forward_graph_id", 8, _O, _F.TYPE_INT64),
        ("sub_graphs", 9, _R, _F.TYPE_MESSAGE, "Graph"), ("sub_graphs_ids", 10, _R, _F.TYPE_INT64, None, True),
        ("attribute", 11, _R, _F.TYPE_MESSAGE, "Attribute")],
    "OperatorNode": [                               # Table 10
        ("name", 1, _O, _F.TYPE_STRING), ("operator_type", 2, _O, _F.TYPE_STRING),
        ("input", 3, _R, _F.TYPE_MESSAGE, "VariableEntry"), ("output", 4, _R, _F.TYPE_MESSAGE, "VariableEntry"),
        ("attribute", 5, _R, _F.TYPE_MESSAGE, "Attribute"), ("doc_string", 6, _O, _F.TYPE_STRING),
        ("definition", 7, _O, _F.TYPE_STRING), ("domain", 8, _O, _F.TYPE_STRING)],
    "VariableEntry": [                              # one entry of map<string, list(VariableType)>
        ("key", 1, _O, _F.TYPE_STRING), ("value", 2, _R, _F.TYPE_MESSAGE, "VariableType")],
    "VariableType": [                               # Table 11
        ("name", 1, _O, _F.TYPE_STRING), ("data_type", 2, _O, _F.TYPE_INT64),
        ("tensor", 3, _O, _F.TYPE_MESSAGE, "Tensor"), ("is_persitable", 4, _O, _F.TYPE_BOOL),
        ("doc_string", 5, _O, _F.TYPE_STRING)],
    "Attribute": [                                  # Table 12
        ("val", 1, _O, _F.TYPE_MESSAGE, "Type"), ("list", 2, _R, _F.TYPE_MESSAGE, "Type"),
        ("name", 3, _O, _F.TYPE_STRING)],
    "Type": [                                       # Table 13 (a oneof: one kind of value)
        ("i", 1, _O, _F.TYPE_INT64), ("f", 2, _O, _F.TYPE_FLOAT), ("d", 3, _O, _F.TYPE_DOUBLE),
        ("s", 4, _O, _F.TYPE_BYTES), ("b", 5, _O, _F.TYPE_BOOL), ("vt", 6, _O, _F.TYPE_MESSAGE, "Vector"),
        ("c", 7, _O, _F.TYPE_INT64), ("v", 8, _O, _F.TYPE_ENUM, "ValueType"),
        ("t", 9, _O, _F.TYPE_MESSAGE, "Tensor"), ("shape", 10, _O, _F.TYPE_MESSAGE, "TensorShape")],
    "Vector": [("value", 1, _R, _F.TYPE_DOUBLE, None, True)],
    "Tensor": [                                     # Table 15
        ("name", 1, _O, _F.TYPE_STRING), ("version", 2, _O, _F.TYPE_STRING),
        ("shape", 3, _O, _F.TYPE_MESSAGE, "TensorShape"), ("data_type", 4, _O, _F.TYPE_ENUM, "ValueType"),
        ("content", 5, _O, _F.TYPE_BYTES),
        ("int32_data", 6, _R, _F.TYPE_INT32, None, True), ("uint32_data", 7, _R, _F.TYPE_UINT32, None, True),
        ("int64_data", 8, _R, _F.TYPE_INT64, None, True), ("uint64_data", 9, _R, _F.TYPE_UINT64, None, True),
        ("float_data", 10, _R, _F.TYPE_FLOAT, None, True), ("double_data", 11, _R, _F.TYPE_DOUBLE, None, True),
        ("bool_data", 12, _R, _F.TYPE_BOOL, None, True), ("string_data", 13, _R, _F.TYPE_BYTES),
        ("format", 14, _O, _F.TYPE_STRING), ("doc_string", 15, _O, _F.TYPE_STRING),
        ("parameter_layer", 16, _O, _F.TYPE_STRING), ("parameter_key", 17, _O, _F.TYPE_STRING)],
    "TensorShape": [                                # Table 16
        ("unkown", 1, _O, _F.TYPE_BOOL), ("dim", 2, _R, _F.TYPE_MESSAGE, "Dimension")],
    "Dimension": [("size", 1, _O, _F.TYPE_INT64), ("name", 2, _O, _F.TYPE_STRING)],    # Table 17
}
_ONEOF = {"Type": "value"}


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The schema as a FileDescriptorProto (docs/tai.md prints it as .proto text)."""
    proto = descriptor_pb2.FileDescriptorProto(name="tai115_1_2021.proto", package=PACKAGE, syntax="proto2")
    enum = proto.enum_type.add(name="ValueType")
    for name, code in CODE.items():
        enum.value.add(name=name, number=code)
    for message_name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=message_name)
        if message_name in _ONEOF:
            message.oneof_decl.add(name=_ONEOF[message_name])
        for name, number, label, kind, *rest in fields:
            field = message.field.add(name=name, number=number, label=label, type=kind)
            if rest and rest[0]:
                field.type_name = f".{PACKAGE}.{rest[0]}"
            if len(rest) > 1 and rest[1]:
                field.options.packed = True
            if message_name in _ONEOF:
                field.oneof_index = 0
    return proto


def _classes() -> dict[str, type]:
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_descriptor())
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
            for name in _MESSAGES}


_CLASSES = _classes()
Model = _CLASSES["Model"]
Graph = _CLASSES["Graph"]
OperatorNode = _CLASSES["OperatorNode"]
VariableEntry = _CLASSES["VariableEntry"]
VariableType = _CLASSES["VariableType"]
Attribute = _CLASSES["Attribute"]
Type = _CLASSES["Type"]
Tensor = _CLASSES["Tensor"]
TensorShape = _CLASSES["TensorShape"]
Dimension = _CLASSES["Dimension"]

DENSE_TENSOR = 1        # VariableType.data_type (Table 11: "dense or sparse tensor, as an integer")
SPARSE_TENSOR = 2


def numpy_dtype(value_type: str) -> np.dtype:
    """The numpy dtype that holds one element of ``value_type`` (a key of NUMPY)."""
    return np.dtype(NUMPY[value_type])


def value_type_of(dtype: np.dtype) -> str:
    """The ValueType of a numpy array's dtype (booleans: BOOL; one byte an element); KeyError if none."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return "BOOL"
    for name in ("INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FLOAT16", "FLOAT32",
                 "FLOAT64", "COMPLEX64", "COMPLEX128"):
        if np.dtype(NUMPY[name]) == dtype.newbyteorder("<"):
            return name
    raise KeyError(str(dtype))
