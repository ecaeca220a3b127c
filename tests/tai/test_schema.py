"""The wire format of T/AI 115.1-2021 §6.1.1, rule by rule, on bytes written out by hand; Tables 7-17's fields."""
from __future__ import annotations

import struct

import pytest

from aipu.tai import schema


def _varint(value: int) -> bytes:
    """The reference varint (7 bits a byte, low group first, high bit = more), written out for the test."""
    out = bytearray()
    while True:
        value, low = value >> 7, value & 0x7F
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)             # rule a): field_number << 3 | wire_type, varint coded


def test_table_14_value_type_codes():
    assert schema.CODE["UNDEFINED"] == 1 and schema.CODE["BINARY"] == 2 and schema.CODE["INT4"] == 4
    assert schema.CODE["UINT8"] == 11 and schema.CODE["FLOAT32"] == 16 and schema.CODE["COMPLEX128"] == 21
    enum = schema.file_descriptor().enum_type[0]
    assert [(v.name, v.number) for v in enum.value] == [(name, code + 1) for code, name in
                                                         enumerate(schema.VALUE_TYPES)]


@pytest.mark.parametrize("message, fields", [
    ("Model", ["Version", "contributors", "framework_name", "framework_version", "model_name", "model_version",
               "doc_url", "graph", "attribute"]),
    ("Graph", ["operator_node", "variable_type", "input_nodes", "output_nodes", "id", "name", "parent_graph_id",
               "forward_graph_id", "sub_graphs", "sub_graphs_ids", "attribute"]),
    ("OperatorNode", ["name", "operator_type", "input", "output", "attribute", "doc_string", "definition", "domain"]),
    ("VariableType", ["name", "data_type", "tensor", "is_persitable", "doc_string"]),
    ("Attribute", ["val", "list", "name"]),
    ("Type", ["i", "f", "d", "s", "b", "vt", "c", "v", "t", "shape"]),
    ("TensorShape", ["unkown", "dim"]),
    ("Dimension", ["size", "name"]),
])
def test_fields_are_numbered_in_table_order(message, fields):
    descriptor = next(m for m in schema.file_descriptor().message_type if m.name == message)
    assert [(f.name, f.number) for f in descriptor.field][:len(fields)] == [(n, i + 1) for i, n in enumerate(fields)]


def test_rule_b_integers_bool_and_enum_are_varints():
    assert schema.Dimension(size=300).SerializeToString() == _tag(1, 0) + _varint(300)
    assert schema.Graph(parent_graph_id=-1).SerializeToString() == _tag(7, 0) + _varint((1 << 64) - 1)
    assert schema.VariableType(is_persitable=True).SerializeToString() == _tag(4, 0) + b"\x01"
    assert schema.Type(v=schema.CODE["FLOAT32"]).SerializeToString() == _tag(8, 0) + _varint(16)


def test_rule_c_strings_are_length_prefixed():
    name = "conv1" * 30                                # a length that needs two varint bytes
    assert schema.Dimension(name=name).SerializeToString() == _tag(2, 2) + _varint(150) + name.encode()


def test_rule_d_floats_are_raw_little_endian_copies():
    assert schema.Type(f=0.5).SerializeToString() == _tag(2, 5) + struct.pack("<f", 0.5)
    assert schema.Type(d=-1.25).SerializeToString() == _tag(3, 1) + struct.pack("<d", -1.25)


def test_rule_e_nested_messages_are_tagged_and_length_prefixed():
    inner = schema.Dimension(size=7).SerializeToString()
    shape = schema.TensorShape()
    shape.dim.add(size=7)
    assert shape.SerializeToString() == _tag(2, 2) + _varint(len(inner)) + inner


def test_rule_f_repeated_fields():
    """Repeated messages and strings: one tagged element after the other; repeated numbers: packed, one tag
    and the total length of the values (docs/tai.md, rule f)."""
    shape = schema.TensorShape()
    shape.dim.add(size=1)
    shape.dim.add(size=2)
    assert shape.SerializeToString() == (_tag(2, 2) + b"\x02" + _tag(1, 0) + b"\x01"
                                         + _tag(2, 2) + b"\x02" + _tag(1, 0) + b"\x02")
    graph = schema.Graph(sub_graphs_ids=[1, 300])
    assert graph.SerializeToString() == _tag(10, 2) + _varint(3) + b"\x01" + _varint(300)
    parsed = schema.Graph.FromString(_tag(10, 0) + b"\x05" + _tag(10, 0) + b"\x06")     # unpacked is read too
    assert list(parsed.sub_graphs_ids) == [5, 6]


def test_an_unknown_value_type_code_reads_as_absent():
    tensor = schema.Tensor.FromString(_tag(4, 0) + _varint(22))
    assert not tensor.HasField("data_type")


def test_value_type_of_numpy_dtypes():
    import numpy as np
    assert schema.value_type_of(np.dtype(">i4")) == "INT32"
    assert schema.value_type_of(np.bool_) == "BOOL"
    with pytest.raises(KeyError):
        schema.value_type_of(np.dtype("U3"))
