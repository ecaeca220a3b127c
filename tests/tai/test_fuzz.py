"""A .tai file a user hands us never crashes, hangs or allocates without bound: it is an InputError of one line.

Every case runs in the forked ``Sandbox`` (tests/sandbox.py) under a memory and a time limit. The inputs: every
truncation and every one-byte change of a small valid file, both as they are (the CRC refuses them) and with
the CRC made right again (so the Model's protobuf and the parameter records are what is checked); huge
declared counts and sizes; sub-graphs nested past the limit; and the same through `aipu tai show|import`
and `aipu compile`, which exit with status 2 and one line on stderr.
"""
from __future__ import annotations

import functools
import struct
import zlib
from pathlib import Path

import onnx
import pytest
from hypothesis import strategies as st

from aipu.sim.machine.errors import InputError
from aipu.tai.file import HEADER, MAX_GRAPH_DEPTH, dumps, loads
from aipu.tai.from_onnx import from_onnx
from aipu.tai.to_onnx import to_onnx
from tests.sandbox import assert_one_line_error, fuzz, profiles, run_case, run_cli
from tests.strategies import mangled_bytes


def _small_model() -> onnx.ModelProto:
    """A conv, a relu, a reshape with an int64 constant: every part of the format, in about 500 bytes."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    weight = numpy_helper.from_array(np.arange(8, dtype=np.float32).reshape(2, 1, 2, 2), "w")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Reshape", ["r", "shape"], ["y"], name="flat")],
        "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 18])], [weight, shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


SMALL = dumps(from_onnx(_small_model()))


def _sealed(data: bytes) -> bytes:
    """``data`` with its header's CRC-32 computed again (when the header is whole)."""
    if len(data) < HEADER.size:
        return data
    crc = zlib.crc32(data[HEADER.size:], zlib.crc32(data[:32]))
    return data[:32] + struct.pack("<I", crc) + data[36:]


def _read(data: bytes) -> str:
    """'ok' or the one-line error of reading ``data`` and turning it into ONNX; anything else escapes."""
    try:
        to_onnx(loads(data))
    except InputError as error:
        text = str(error)
        assert "\n" not in text and text, text
        return text
    return "ok"


def read_each(read, cases: list[bytes]) -> list[str]:
    """``read`` of each case; one that raises anything but an InputError comes back as "escaped: ..." with its
    input, so that the failure shows that input rather than the whole list."""
    results = []
    for case in cases:
        try:
            results.append(read(case))
        except Exception as error:      # reported by the test, with the input
            results.append(f"escaped: {type(error).__name__}: {error}; input {case.hex()}")
    return results


_read_many = functools.partial(read_each, _read)


def no_escape(results: list[str]) -> list[str]:
    escaped = [result for result in results if result.startswith("escaped")]
    assert not escaped, escaped[0]
    return results


def test_the_small_file_reads(sandbox):
    assert run_case(sandbox, _read, SMALL) == "ok"


def test_every_truncation(sandbox):
    results = no_escape(run_case(sandbox, _read_many, [SMALL[:n] for n in range(len(SMALL))] +
                       [_sealed(SMALL[:n]) for n in range(HEADER.size, len(SMALL))]))
    assert all(result != "ok" for result in results)


@pytest.mark.parametrize("sealed", [False, True], ids=["raw", "crc-fixed"])
def test_every_byte_changed(sandbox, sealed):
    """Each byte with all its bits flipped, and with its lowest bit flipped: refused with one line (by the CRC
    when it is not made right), or read (a changed value the format allows, e.g. a float's bits)."""
    cases = []
    for position in range(len(SMALL)):
        for value in (SMALL[position] ^ 0xFF, SMALL[position] ^ 0x01):
            changed = SMALL[:position] + bytes((value,)) + SMALL[position + 1:]
            cases.append(_sealed(changed) if sealed else changed)
    results = no_escape(run_case(sandbox, _read_many, cases))
    if not sealed:
        assert all(result.startswith(("CRC-32", "magic", "format version", "parameter count", "structure and",
                                      "reserved")) for result in results)


@pytest.mark.parametrize("profile", profiles(60, 2000))
def test_mangled_files(sandbox, profile):
    def check(data: bytes) -> None:
        run_case(sandbox, _read, data)

    fuzz(profile, st.one_of(mangled_bytes(SMALL), mangled_bytes(SMALL).map(_sealed)), check)


def _header(count=0, structure=0, section=0) -> bytes:
    return HEADER.pack(b"TAI115.1", 1, count, structure, section, 0, 0)


@pytest.mark.parametrize("data, field", [
    (_sealed(_header(count=1 << 32 - 1)), "parameter count"),
    (_sealed(_header(structure=1 << 62)), "lengths"),
    (_sealed(_header(section=(1 << 64) - 1)), "lengths"),
    (_sealed(_header()), "graph"),
    (b"TAI115.1", "header"),
    (b"", "header"),
])
def test_huge_or_empty_declarations(sandbox, data, field):
    assert field in run_case(sandbox, _read, data)


def _length(payload: bytes) -> bytes:
    """A varint length prefix and ``payload`` (written here: protobuf's API itself refuses to nest this deep)."""
    size, prefix = len(payload), bytearray()
    while True:
        size, low = size >> 7, size & 0x7F
        prefix.append(low | (0x80 if size else 0))
        if not size:
            return bytes(prefix) + payload


def _nested(depth: int) -> bytes:
    """A file whose Model's graph holds sub-graphs ``depth`` deep (Graph.sub_graphs is field 9, Model.graph 8)."""
    graph = b"\x32\x01g"                                   # name "g"
    for _ in range(depth - 1):
        graph = b"\x4a" + _length(graph) + b"\x32\x01g"
    structure = b"\x42" + _length(graph)
    return _sealed(_header(structure=len(structure)) + structure)


@pytest.mark.parametrize("depth, field", [(MAX_GRAPH_DEPTH + 1, "sub-graph depth"), (120, "structure")])
def test_nested_sub_graphs_are_bounded(sandbox, depth, field):
    assert field in run_case(sandbox, _read, _nested(depth))


def test_a_sub_graph_within_the_limit_reads_but_has_no_onnx_form(sandbox):
    assert "sub-graphs" in run_case(sandbox, _read, _nested(2))


def _cli(argv: list[str]) -> tuple[int, str, str]:
    return run_cli(argv)


@pytest.mark.parametrize("command", [["tai", "show"], ["tai", "import"], ["compile"]])
def test_the_cli_answers_one_line_and_status_2(sandbox, tmp_path, command):
    path = tmp_path / "bad.tai"
    for data in (SMALL[:-3], _sealed(SMALL[:40] + b"\x0a\xff" + SMALL[42:]), _nested(MAX_GRAPH_DEPTH + 1)):
        path.write_bytes(data)
        extra = ["-o", str(tmp_path / "out")]
        code, _, err = run_case(sandbox, _cli, [*command, str(path), *(extra if command[-1] != "show" else [])])
        assert_one_line_error(code, err, command[0], str(path))


def test_the_cli_round_trip(tmp_path):
    source = tmp_path / "small.onnx"
    source.write_bytes(_small_model().SerializeToString())
    code, out, err = run_cli(["tai", "export", str(source), "-o", str(tmp_path / "s.tai")])
    assert code == 0, err
    code, out, err = run_cli(["tai", "show", str(tmp_path / "s.tai")])
    assert code == 0 and "conv: conv2d(X=x, W=w) -> Y=c" in out and "conv/W: FLOAT32 [2, 1, 2, 2] 32 bytes" in out
    code, out, err = run_cli(["tai", "import", str(tmp_path / "s.tai"), "-o", str(tmp_path / "back.onnx")])
    assert code == 0, err
    assert Path(tmp_path / "back.onnx").read_bytes() == to_onnx(loads(SMALL)).SerializeToString()
    code, _, err = run_cli(["tai", "export", str(tmp_path / "s.tai"), "-o", str(tmp_path / "x.tai")])
    assert code == 0, err          # a .tai read as a model: read_model knows it by its magic
