"""Every file a user hands the CLI is hostile: a bad one ends in one line naming the file, the field and
what is allowed, with exit status 2 (never a traceback, a hang or unbounded memory).

The listed cases are the ones issue 6 section 4 reported; the hypothesis fuzzers build well-formed files
with random bodies (layer .npz, configuration, listing, program) and run them through the CLI, each case in a
forked child under a time and a memory limit.
The default suite runs a seeded quick subset; ``-m slow`` runs many more examples.
"""
from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import strategies as st

from aipu.app.cli import main
from aipu.sim.machine.arch import DEFAULT
from aipu.sim.machine.isa import COMMAND_BYTES, ISA_LAYOUT_HASH, Opcode, Unit
from aipu.sim.machine.program import _CRC, _HEADER, FORMAT_VERSION, MAGIC, Command, Program
from tests.sandbox import accepted_or_one_line, assert_one_line_error, fuzz, profiles, run_case, run_cli
from tests.strategies import mangled_bytes, random_array

PROFILES = profiles(quick=100, long=5000)


def _layer_arrays(**changes) -> dict:
    """A small valid layer (1x4x6x6 int8 input, eight 3x3 kernels), with ``changes`` applied."""
    rng = np.random.default_rng(0)
    arrays = dict(x=rng.integers(-128, 128, (1, 4, 6, 6)).astype(np.int8),
                  w=rng.integers(-128, 128, (8, 4, 3, 3)).astype(np.int8), bias=np.zeros(8, np.int32),
                  multiplier=np.full(8, 30000), shift=np.full(8, 22))
    arrays.update(changes)
    return arrays


def _small_program() -> Program:
    program = Program(DEFAULT)
    program.append(Command.make(Opcode.LOAD, push=[Unit.CONV], y_size=3, x_size=3, run=8))
    program.append(Command.make(Opcode.CONV, pop=[Unit.LOAD], push=[Unit.STORE], in_h=3, in_w=3, in_c=8, out_c=8,
                                k_h=3, k_w=3))
    program.append(Command.make(Opcode.STORE, pop=[Unit.CONV], run=8))
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    return program


def _program_bytes(config_json: bytes, counts: list[int], words: bytes, config_hash: bytes | None = None) -> bytes:
    """A program file with a well-formed header and checksum around any configuration and commands."""
    config_hash = config_hash or DEFAULT.config_hash().encode()
    body = (_HEADER.pack(MAGIC, FORMAT_VERSION, len(Unit), config_hash, ISA_LAYOUT_HASH.encode(), len(config_json))
            + config_json + struct.pack(f"<{len(Unit)}I", *counts) + words)
    return body + _CRC.pack(zlib.crc32(body))


def _write(path, content) -> str:
    if isinstance(content, dict):
        with open(path, "wb") as handle:
            np.savez(handle, **content)
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(path)


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def _run_sandboxed(sandbox, argv: list[str]) -> tuple[int, str]:
    code, _, err = run_case(sandbox, run_cli, argv)
    return code, err


# --- the inputs the issue listed ---------------------------------------------------------------------
VALID_NPZ = _layer_arrays()
RUN_LAYER = ("run-layer", "--layer", "{path}")
ISSUE_CASES = {   # argv ({path}: the file), file name, content, what the message must say
    "truncated npz": (RUN_LAYER, "layer.npz", "truncated", "format = 'not a complete zip archive'"),
    "npy instead of npz": (RUN_LAYER, "layer.npz", np.float64, "format = 'a single .npy array'"),
    "groups as an array": (RUN_LAYER, "layer.npz", _layer_arrays(groups=np.array([1, 2])),
                           "groups = int64 array of shape [2]"),
    "groups = 0": (RUN_LAYER, "layer.npz", _layer_arrays(groups=np.array(0)), "groups = 0"),
    "stride = [1]": (RUN_LAYER, "layer.npz", _layer_arrays(stride=np.array([1])), "stride = (1,)"),
    "stride = [0, 0]": (RUN_LAYER, "layer.npz", _layer_arrays(stride=np.array([0, 0])), "stride = (0, 0)"),
    "out_type int7": (RUN_LAYER, "layer.npz", _layer_arrays(out_type=np.array("int7")), "out_type = 'int7'"),
    "rounding sideways": (RUN_LAYER, "layer.npz", _layer_arrays(rounding=np.array("sideways")),
                          "rounding = 'sideways'"),
    "float x": (RUN_LAYER, "layer.npz", _layer_arrays(x=np.zeros((1, 4, 6, 6))), "x = float64"),
    "float bias": (RUN_LAYER, "layer.npz", _layer_arrays(bias=np.zeros(8)), "bias = float64"),
    "9x9 kernel on 6x6": (RUN_LAYER, "layer.npz", _layer_arrays(w=np.zeros((8, 4, 9, 9), np.int8)),
                          "a 9x9 kernel with dilation (1, 1) on a 6x6 input with padding (0, 0, 0, 0) gives an "
                          "empty output"),
    "bias of the wrong length": (RUN_LAYER, "layer.npz", _layer_arrays(bias=np.zeros(5, np.int32)),
                                 "bias = int32 array of shape [5]"),
    "empty input": (RUN_LAYER, "layer.npz", _layer_arrays(x=np.zeros((1, 4, 0, 6), np.int8)),
                    "x = int8 array of shape [1, 4, 0, 6]"),
    "unknown unit in push": (("asm", "{path}", "-o", "{path}.aipu"), "prog.lst", "CONV[0] CONV pop[] push[XYZ]\n",
                             "line 1: push = 'XYZ': not a unit; units are LOAD, WDEC, CONV"),
    "deeply nested embedded config": (("disasm", "{path}"), "prog.aipu",
                                      _program_bytes(b"[" * 5000 + b"]" * 5000, [0] * 7, b""),
                                      "embedded configuration at byte 48: nesting"),
    "1M x 1M MAC array": (("run-layer", "--config", "{path}"), "hw.json",
                          '{"mac": {"rows": 1048576, "cols": 1048576}}', "mac.rows = 1048576: at most 4096"),
}


FUZZER_FINDS = {   # found by the fuzzers below, kept as fixed cases
    "zip directory at a bad offset": (RUN_LAYER, "layer.npz", ("set byte", -5, 23),
                                      "x = '[Errno 22] Invalid argument': expected a readable .npy member"),
    "FINISH in queue 9": (("asm", "{path}", "-o", "{path}.aipu"), "prog.lst", "STORE[0] FINISH pop[] push[] unit=9\n",
                          "line 1: FINISH field unit = 9: not one of LOAD=0"),
}
CASES = {**ISSUE_CASES, **FUZZER_FINDS}


def _issue_file(tmp_path, name: str, content) -> str:
    path = tmp_path / name
    if content == "truncated" or isinstance(content, tuple):
        data = bytearray(open(_write(tmp_path / "full.npz", VALID_NPZ), "rb").read())
        if content == "truncated":
            return _write(path, bytes(data[:len(data) // 2]))
        _, position, value = content
        data[position] = value
        return _write(path, bytes(data))
    if content is np.float64:   # np.save output under an .npz name
        with open(path, "wb") as handle:
            np.save(handle, np.zeros(3))
        return str(path)
    return _write(path, content)


def _issue_argv(case: str, tmp_path) -> tuple[list[str], str]:
    template, name, content, _ = CASES[case]
    path = _issue_file(tmp_path, name, content)
    return [arg.format(path=path) for arg in template], path


@pytest.mark.parametrize("case", CASES)
def test_each_reported_input_gives_one_named_line(case, tmp_path, capsys):
    argv, path = _issue_argv(case, tmp_path)
    code, err = _run(capsys, argv)
    assert_one_line_error(code, err, argv[0], path)
    assert CASES[case][3] in err, err


def test_no_traceback_reaches_the_terminal(tmp_path):
    """The entry point as a user runs it: one line on stderr, status 2."""
    for case in ("truncated npz", "deeply nested embedded config"):
        argv, path = _issue_argv(case, tmp_path)
        result = subprocess.run([sys.executable, "-m", "aipu.app.cli", *argv], capture_output=True, text=True,
                                timeout=120)
        assert_one_line_error(result.returncode, result.stderr, argv[0], path)


def test_valid_layer_file_still_runs(tmp_path, capsys):
    path = _write(tmp_path / "layer.npz", _layer_arrays(stride=np.array([2, 1]), padding=np.array([1, 1, 1, 1]),
                                                       rounding=np.array("HALF_TO_EVEN"), groups=np.array(2),
                                                       w=np.ones((8, 2, 3, 3), np.int8)))
    assert main(["run-layer", "--layer", path]) == 0
    assert "bit-exact" in capsys.readouterr().out


# --- fuzzers -----------------------------------------------------------------------------------------
_LAYER_VALUES = {
    "groups": st.integers(-2, 9).map(np.array), "x_zero_point": st.integers(-300, 300).map(np.array),
    "w_zero_point": st.integers(-300, 300).map(np.array), "out_zero_point": st.integers(-70000, 70000).map(np.array),
    "stride": st.lists(st.integers(-1, 9), max_size=5).map(np.array),
    "dilation": st.lists(st.integers(-1, 9), max_size=5).map(np.array),
    "padding": st.lists(st.integers(-1, 17), max_size=5).map(np.array),
    "out_type": st.sampled_from(["int8", "uint8", "INT16", "int7", "", "float"]).map(np.array),
    "rounding": st.sampled_from(["floor", "half_up", "sideways", "HALF_TO_EVEN"]).map(np.array),
    "multiplier": st.integers(-5, 70000).map(lambda v: np.full(8, v)),
    "shift": st.integers(-5, 60).map(np.array),
    "bias": st.integers(-2 ** 32, 2 ** 32).map(lambda v: np.full(8, v)),
}
_LAYER_NAMES = st.sampled_from([*_LAYER_VALUES, "x", "w", "unknown"])


@st.composite
def _layer_file(draw) -> dict:
    """The valid layer with a few entries changed, dropped, added or replaced by random arrays."""
    arrays = _layer_arrays()
    for _ in range(draw(st.integers(1, 4))):
        name = draw(_LAYER_NAMES)
        action = draw(st.sampled_from(["typed", "random", "drop"]))
        if action == "drop":
            arrays.pop(name, None)
        elif action == "typed" and name in _LAYER_VALUES:
            arrays[name] = draw(_LAYER_VALUES[name])
        else:
            arrays[name] = draw(random_array())
    return arrays


@pytest.mark.parametrize("profile", PROFILES)
def test_fuzz_layer_files(profile, tmp_path, sandbox):
    path = tmp_path / "layer.npz"
    valid = open(_write(tmp_path / "valid.npz", VALID_NPZ), "rb").read()

    def check(content):
        _write(path, content)
        code, err = _run_sandboxed(sandbox, ["run-layer", "--layer", str(path)])
        accepted_or_one_line(code, err, "run-layer", str(path))

    fuzz(profile, st.one_of(_layer_file(), mangled_bytes(valid)), check)


_CONFIG_KEYS = st.sampled_from(["mac", "rows", "cols", "buffers", "act", "acc", "param", "bytes", "port_bytes",
                                "dram", "address_bits", "queues", "token_depth", "clock_mhz", "extra"])
_CONFIG_LEAVES = st.one_of(st.integers(-2, 2 ** 27), st.sampled_from([2 ** 20, 2 ** 64, 10 ** 30, 4096, 16]),
                           st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.text(max_size=5),
                           st.lists(st.integers(), max_size=3))
_CONFIGS = st.recursive(_CONFIG_LEAVES, lambda inner: st.dictionaries(_CONFIG_KEYS, inner, max_size=4), max_leaves=12)


def _toml(data: dict, prefix: str = "") -> str:
    """TOML for nested tables of scalars (json spells TOML's integers, strings, booleans and arrays)."""
    lines = [f"{key} = {json.dumps(value)}" for key, value in data.items() if not isinstance(value, dict)]
    for key, value in data.items():
        if isinstance(value, dict):
            lines += [f"[{prefix}{key}]", _toml(value, f"{prefix}{key}.")]
    return "\n".join(lines)


@pytest.mark.parametrize("profile", PROFILES)
def test_fuzz_configurations(profile, tmp_path, sandbox):
    def check(data, syntax):
        path = tmp_path / f"hw.{syntax}"
        path.write_text(json.dumps(data) if syntax == "json" or not isinstance(data, dict) else _toml(data))
        code, err = _run_sandboxed(sandbox, ["isa-doc", "--config", str(path), "-o", str(tmp_path / "isa.md")])
        accepted_or_one_line(code, err, "isa-doc", str(path))

    fuzz(profile, st.tuples(_CONFIGS, st.sampled_from(["json", "toml"])), lambda pair: check(*pair))


VALID_LISTING = _small_program().disassemble()
_LISTING_TOKENS = st.one_of(st.sampled_from(["LOAD[0]", "CONV", "FINISH", "pop[]", "push[LOAD,XYZ]", "push[", "unit=9",
                                             "unit=STORE", "in_h=0x10", "in_h=", "in_h=-1", "buffer=ACC", "=",
                                             "k_w=99999999999999999999", "in_type=FLOAT", "in_h=1e3", ";"]),
                            st.text(max_size=8))


@st.composite
def _listing(draw) -> str:
    """The valid listing with tokens replaced, inserted or dropped."""
    lines = [line.split() for line in VALID_LISTING.splitlines()]
    for _ in range(draw(st.integers(1, 4))):
        line = lines[draw(st.integers(0, len(lines) - 1))]
        position = draw(st.integers(0, len(line)))
        action = draw(st.sampled_from(["replace", "insert", "drop"]))
        if action == "insert" or position == len(line):
            line.insert(position, draw(_LISTING_TOKENS))
        elif action == "replace":
            line[position] = draw(_LISTING_TOKENS)
        else:
            del line[position]
    return "\n".join(" ".join(line) for line in lines)


@pytest.mark.parametrize("profile", PROFILES)
def test_fuzz_listings(profile, tmp_path, sandbox):
    path = tmp_path / "prog.lst"

    def check(content):
        _write(path, content)
        code, err = _run_sandboxed(sandbox, ["asm", str(path), "-o", str(tmp_path / "prog.aipu")])
        accepted_or_one_line(code, err, "asm", str(path))

    fuzz(profile, st.one_of(_listing(), st.binary(max_size=64)), check)


VALID_PROGRAM = _small_program().to_bytes()
_CONFIG_JSON = json.dumps(DEFAULT.to_dict()).encode()


@st.composite
def _program_file(draw) -> bytes:
    """Well-formed header and checksum around random commands (valid opcodes) or a random configuration."""
    if draw(st.booleans()):
        return _program_bytes(json.dumps(draw(_CONFIGS)).encode(), [0] * 6 + [1], bytes(COMMAND_BYTES))
    counts = draw(st.lists(st.integers(0, 2), min_size=len(Unit), max_size=len(Unit)))
    words = b"".join((draw(st.sampled_from(list(Opcode))) | draw(st.integers(0, 2 ** 256 - 1)) >> 4 << 4)
                     .to_bytes(COMMAND_BYTES, "little") for _ in range(sum(counts)))
    counts_or_lies = draw(st.one_of(st.just(counts), st.lists(st.integers(0, 2 ** 32 - 1), min_size=len(Unit),
                                                             max_size=len(Unit))))
    return _program_bytes(_CONFIG_JSON, counts_or_lies, words)


@pytest.mark.parametrize("profile", PROFILES)
def test_fuzz_program_files(profile, tmp_path, sandbox):
    path = tmp_path / "prog.aipu"

    def check(content):
        _write(path, content)
        code, err = _run_sandboxed(sandbox, ["disasm", str(path)])
        accepted_or_one_line(code, err, "disasm", str(path))

    fuzz(profile, st.one_of(_program_file(), mangled_bytes(VALID_PROGRAM)), check)
