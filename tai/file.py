"""The .tai file: a header, the serialized Model (T/AI 115.1-2021 §6.1.1) and the parameter section (§6.1.2).

Byte by byte, little-endian (docs/tai.md, "File layout"):

    0  8  magic b"TAI115.1"
    8  4  u32 format version (1)
    12 4  u32 number of parameter records
    16 8  u64 structure length S
    24 8  u64 parameter section length P
    32 4  u32 CRC-32 (zlib) of bytes 0..31, then of everything after byte 39
    36 4  reserved, zero
    40 S  the Model message (schema.Model), protobuf wire format
    40+S P the parameter records (aipu.tai.params)

The file ends exactly after the parameter section. :func:`loads` checks the header, the lengths against the
bytes present, the CRC, parses the Model (protobuf's own DecodeError, and its nesting limit, become one
InputError), then checks what protobuf cannot: names, ValueType codes, the depth of nested sub-graphs, and
that every tensor reference into the parameter section meets a stored parameter of its type and shape.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from aipu.sim.machine.errors import InputError
from aipu.sim.machine.files import read_at_most

from . import params
from .params import Parameter
from .records import RECORDS, check_record
from .schema import NAME, Model

MAGIC = b"TAI115.1"
VERSION = 1
HEADER = struct.Struct("<8sIIQQII")
MAX_FILE_BYTES = 1 << 31
MAX_PARAMETERS = 1 << 20
MAX_GRAPH_DEPTH = 8                # a main graph and sub-graphs nested at most this deep (Table 9)


@dataclass
class TaiFile:
    """A model representation: the Model record and its parameters by (layer, key)."""

    model: Model
    parameters: dict[tuple[str, str], Parameter] = field(default_factory=dict)

    def add(self, parameter: Parameter) -> None:
        key = (parameter.layer, parameter.key)
        if key in self.parameters:
            raise ValueError(f"parameter {parameter.layer}/{parameter.key} stored twice")
        self.parameters[key] = parameter


def dumps(document: TaiFile) -> bytes:
    """The file's bytes: header, Model (deterministic protobuf serialization), parameter section."""
    check_model(document.model, document.parameters)
    structure = document.model.SerializeToString(deterministic=True)
    section = params.pack(list(document.parameters.values()))
    head = HEADER.pack(MAGIC, VERSION, len(document.parameters), len(structure), len(section), 0, 0)
    crc = zlib.crc32(structure + section, zlib.crc32(head[:32]))
    return HEADER.pack(MAGIC, VERSION, len(document.parameters), len(structure), len(section), crc, 0) \
        + structure + section


def is_tai(data: bytes) -> bool:
    """Whether ``data`` starts as a .tai file does (its magic), whatever the file's name."""
    return data[:len(MAGIC)] == MAGIC


def load(path: str | Path) -> TaiFile:
    """The .tai file ``path`` (a regular file of at most MAX_FILE_BYTES), checked; InputError naming it."""
    data = read_at_most(path, MAX_FILE_BYTES)
    try:
        return loads(data)
    except InputError as error:
        raise error.within(path)


def loads(data: bytes) -> TaiFile:
    """A .tai file's bytes, checked (module docstring); InputError naming the field otherwise."""
    if len(data) < HEADER.size:
        raise InputError("header", f"{len(data)} bytes", f"a file of at least {HEADER.size} bytes")
    magic, version, count, structure, section, crc, reserved = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise InputError("magic", magic, f"{MAGIC!r} (a T/AI 115.1 model representation)")
    if version != VERSION:
        raise InputError("format version", version, f"{VERSION}")
    if reserved:
        raise InputError("reserved", reserved, "0")
    if count > MAX_PARAMETERS:
        raise InputError("parameter count", count, f"at most {MAX_PARAMETERS}")
    if HEADER.size + structure + section != len(data):
        raise InputError("structure and parameter lengths", f"{structure} + {section}",
                         f"{len(data) - HEADER.size}: the bytes after the header")
    if zlib.crc32(data[HEADER.size:], zlib.crc32(data[:32])) != crc:
        raise InputError("CRC-32", f"{crc:#010x}", "the CRC-32 of the header and the rest of the file")
    model = Model()
    try:
        model.ParseFromString(data[HEADER.size:HEADER.size + structure])
    except DecodeError as exc:
        raise InputError("structure", "not a Model message", f"protobuf wire format ({exc})") from None
    _check_strings(model)
    parameters = params.unpack(data[HEADER.size + structure:], count)
    stored = {(p.layer, p.key): p for p in parameters}
    check_model(model, stored)
    return TaiFile(model, stored)


# --------------------------------------------------------------------------------------------- checks
def _check_strings(message) -> None:
    """Every string field valid UTF-8: protobuf's Python API hands a proto2 string with bad UTF-8 on as bytes
    (or lone surrogates), which fail only where the string is next used (in ONNX, in a message)."""
    for descriptor, value in message.ListFields():
        items = value if descriptor.is_repeated else (value,)
        if descriptor.message_type is not None:
            for item in items:
                _check_strings(item)
        elif descriptor.type == descriptor.TYPE_STRING:
            for item in items:
                try:
                    item.encode("utf-8")
                except (UnicodeEncodeError, AttributeError):
                    raise InputError(f"{message.DESCRIPTOR.name}.{descriptor.name}", item if isinstance(
                        item, bytes) else item.encode("utf-8", "surrogateescape"), "valid UTF-8") from None


def check_model(model: Model, stored: dict[tuple[str, str], Parameter]) -> None:
    """What the wire format leaves open: names, codes, nesting depth, references into the parameters."""
    if not model.graph:
        raise InputError("graph", "none", "a Model with at least one Graph (Table 7)")
    used: set[tuple[str, str]] = set()
    for attribute in model.attribute:
        _check_attribute(attribute, "model", stored, used)
    for index, graph in enumerate(model.graph):
        _check_graph(graph, f"graph {index}", stored, used, 1)
    unused = sorted(set(stored) - used)
    if unused:
        raise InputError(f"parameter {unused[0][0]}/{unused[0][1]}", "unreferenced",
                         "a parameter some tensor of the Model refers to")


def _check_graph(graph, where: str, stored: dict, used: set, depth: int) -> None:
    if depth > MAX_GRAPH_DEPTH:
        raise InputError(f"{where} sub-graph depth", depth, f"at most {MAX_GRAPH_DEPTH}")
    names = set()
    for node in graph.operator_node:
        name = params.check_name(f"{where} operator_node name", node.name)
        if name in names:
            raise InputError(f"{where} operator_node name", name, "unique within its graph")
        names.add(name)
        params.check_name(f"{where} node {name!r} operator_type", node.operator_type)
        if node.operator_type in RECORDS:
            check_record(node, f"{where} node {name!r}")
        for entries in (node.input, node.output):
            keys = [entry.key for entry in entries]
            if len(set(keys)) != len(keys):
                raise InputError(f"{where} node {name!r} input/output keys", keys, "each key once")
        for attribute in node.attribute:
            _check_attribute(attribute, f"{where} node {name!r}", stored, used)
    for kind in ("variable_type", "input_nodes", "output_nodes"):
        for variable in getattr(graph, kind):
            params.check_name(f"{where} {kind} name", variable.name)
            if variable.HasField("tensor"):
                check_tensor(variable.tensor, f"{where} variable {variable.name!r}", stored, used)
    for attribute in graph.attribute:
        _check_attribute(attribute, where, stored, used)
    for index, sub in enumerate(graph.sub_graphs):
        _check_graph(sub, f"{where} sub-graph {index}", stored, used, depth + 1)


def _check_attribute(attribute, where: str, stored: dict, used: set) -> None:
    name = params.check_name(f"{where} attribute name", attribute.name)
    for value in (attribute.val, *attribute.list) if attribute.HasField("val") else attribute.list:
        kind = value.WhichOneof("value")
        if kind == "v" and value.v not in NAME:
            raise InputError(f"{where} attribute {name!r} v", value.v, "a ValueType code 1 .. 21")
        if kind == "t":
            check_tensor(value.t, f"{where} attribute {name!r}", stored, used)


def check_tensor(tensor, where: str, stored: dict, used: set) -> None:
    """A Tensor record: its ValueType, shape, and where it points into the parameter section, that parameter."""
    if not tensor.HasField("data_type"):
        raise InputError(f"{where} data_type", "absent or unknown", "a ValueType code 1 .. 21 (Table 14)")
    shape = tensor_shape(tensor, where)
    if not tensor.HasField("parameter_layer") and not tensor.HasField("parameter_key"):
        return
    key = (tensor.parameter_layer, tensor.parameter_key)
    parameter = stored.get(key)
    if parameter is None:
        raise InputError(f"{where} parameter", f"{key[0]}/{key[1]}", "a stored parameter")
    if NAME[tensor.data_type] != parameter.value_type or (shape is not None and shape != parameter.array.shape):
        raise InputError(f"{where} parameter {key[0]}/{key[1]}",
                         f"{parameter.value_type} {list(parameter.array.shape)}",
                         f"the tensor's {NAME[tensor.data_type]} {list(shape or ())}")
    used.add(key)


def tensor_shape(tensor, where: str) -> tuple[int, ...] | None:
    """The sizes of a Tensor's shape, None when TensorShape says ``unkown`` or a dimension has only a name."""
    if not tensor.HasField("shape") or tensor.shape.unkown:
        return None
    sizes = []
    for dim in tensor.shape.dim:
        if dim.HasField("size") and not 0 <= dim.size <= params.MAX_ELEMENTS:
            raise InputError(f"{where} dimension size", dim.size, f"0 .. {params.MAX_ELEMENTS}")
        sizes.append(dim.size if dim.HasField("size") else None)
    return None if None in sizes else tuple(sizes)


def stored_array(document: TaiFile, tensor) -> np.ndarray | None:
    """The parameter a Tensor record refers to, or None for a tensor without a reference."""
    if not tensor.HasField("parameter_key"):
        return None
    return document.parameters[(tensor.parameter_layer, tensor.parameter_key)].array
