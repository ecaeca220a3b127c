"""The compiled program directory that `aipu compile` writes and `aipu run` (and later the cycle model and the
RTL) reads: ``program.aipu`` (the command queues and the hardware configuration, sim/machine/program.py),
``dram.bin`` (the initial DRAM image: weights, records, tables), ``manifest.json`` (inputs and outputs: DRAM
address, shape, layout, type, scale and zero point; the per-layer report) and ``float.onnx`` (the normalized
float graph, the reference for ``aipu run --compare-onnx``).

Reading is hostile-input checking: the manifest is bounded in size, every field has its type and range,
every tensor lies inside the DRAM image and matches its shape and type, and the image has the stated size.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aipu.compiler.qir import QTensor
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.program import Program

FORMAT, VERSION = "aipu-program", 1
PROGRAM_FILE, DRAM_FILE, MANIFEST_FILE, FLOAT_MODEL_FILE = "program.aipu", "dram.bin", "manifest.json", "float.onnx"
MAX_MANIFEST_BYTES = 1 << 22
MAX_DRAM_BYTES = 1 << 32
_TYPES = ("int8", "uint8", "int16")
_ROUNDINGS = ("half_away_from_zero", "onnx_quantize_linear")   # how the host quantizes an input (D3, or ONNX's)


@dataclass(frozen=True)
class TensorEntry:
    """A boundary tensor of the program: its quantization and where it lives in DRAM (channels-last)."""

    tensor: QTensor
    dram_address: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.tensor.shape) * self.tensor.dtype.itemsize


@dataclass
class ProgramDir:
    path: Path
    program: Program
    dram: np.ndarray
    inputs: list[TensorEntry]
    outputs: list[TensorEntry]
    manifest: dict


def write_program_dir(out: Path, program: Program, dram: np.ndarray, manifest: dict, float_model: bytes) -> None:
    out.mkdir(parents=True, exist_ok=True)
    program.write(out / PROGRAM_FILE)
    (out / DRAM_FILE).write_bytes(dram.tobytes())
    (out / FLOAT_MODEL_FILE).write_bytes(float_model)
    document = {"format": FORMAT, "version": VERSION, "program": PROGRAM_FILE, "dram_image": DRAM_FILE,
                "float_model": FLOAT_MODEL_FILE, **manifest}
    (out / MANIFEST_FILE).write_text(json.dumps(document, indent=1) + "\n")


def read_program_dir(path) -> ProgramDir:
    """The directory ``path`` checked: InputError naming the file and field on anything unusable."""
    path = Path(path)
    manifest_path = path / MANIFEST_FILE
    try:
        if not path.is_dir():
            raise InputError("program directory", str(path), "a directory written by `aipu compile`")
        manifest = _manifest(manifest_path)
    except InputError as error:
        raise error.within(manifest_path if path.is_dir() else path) from None
    dram_path = path / DRAM_FILE
    size = dram_path.stat().st_size if dram_path.is_file() else -1
    if size != manifest["dram_bytes"]:
        raise InputError("size", size, f"{manifest['dram_bytes']} bytes, as manifest.json states").within(dram_path)
    program = Program.read(path / PROGRAM_FILE)
    entries = {}
    try:
        for group in ("inputs", "outputs"):
            entries[group] = [_tensor(f"{group}[{index}]", entry, manifest["dram_bytes"])
                              for index, entry in enumerate(manifest[group])]
    except InputError as error:
        raise error.within(manifest_path) from None
    dram = np.fromfile(dram_path, np.uint8)
    return ProgramDir(path, program, dram, entries["inputs"], entries["outputs"], manifest)


def _manifest(path: Path) -> dict:
    if not path.is_file():
        raise InputError("file", str(path.name), "missing (write the directory with `aipu compile`)")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise InputError("size", path.stat().st_size, f"at most {MAX_MANIFEST_BYTES} bytes")
    try:
        document = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise InputError("json", type(exc).__name__, f"a JSON document ({exc})") from None
    if not isinstance(document, dict):
        raise InputError("document", type(document).__name__, "a JSON object")
    if document.get("format") != FORMAT or document.get("version") != VERSION:
        raise InputError("format/version", f"{document.get('format')!r} {document.get('version')!r}",
                         f"{FORMAT!r} version {VERSION}")
    dram_bytes = document.get("dram_bytes")
    if not _is_int(dram_bytes) or not 1 <= dram_bytes <= MAX_DRAM_BYTES:
        raise InputError("dram_bytes", dram_bytes, f"an integer 1 .. {MAX_DRAM_BYTES}")
    for group in ("inputs", "outputs"):
        if not isinstance(document.get(group), list) or not 1 <= len(document[group]) <= 64:
            raise InputError(group, document.get(group), "a list of 1 .. 64 tensors")
    return document


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor(where: str, entry, dram_bytes: int) -> TensorEntry:
    if not isinstance(entry, dict):
        raise InputError(where, entry, "an object with name, dram_address, shape, dtype, scale, zero_point")
    name, address, shape = entry.get("name"), entry.get("dram_address"), entry.get("shape")
    dtype, scale, zero_point = entry.get("dtype"), entry.get("scale"), entry.get("zero_point")
    if not isinstance(name, str) or not name or len(name) > 256:
        raise InputError(f"{where}.name", name, "a non-empty string of at most 256 characters")
    if dtype not in _TYPES:
        raise InputError(f"{where}.dtype", dtype, f"one of {', '.join(_TYPES)}")
    if (not isinstance(shape, list) or not 1 <= len(shape) <= 8
            or not all(_is_int(d) and 1 <= d <= dram_bytes for d in shape)):
        raise InputError(f"{where}.shape", shape, "a list of 1 .. 8 positive integers")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not (math.isfinite(scale) and scale > 0):
        raise InputError(f"{where}.scale", scale, "a finite positive number")
    info = np.iinfo(dtype)
    if not _is_int(zero_point) or not info.min <= zero_point <= info.max:
        raise InputError(f"{where}.zero_point", zero_point, f"an integer {info.min} .. {info.max}")
    rounding = entry.get("rounding", _ROUNDINGS[0])
    if rounding not in _ROUNDINGS:
        raise InputError(f"{where}.rounding", rounding, f"one of {', '.join(_ROUNDINGS)}")
    tensor = TensorEntry(QTensor(name, tuple(shape), np.dtype(dtype), float(scale), zero_point,
                                 onnx_rounding=rounding == _ROUNDINGS[1]), address)
    if not _is_int(address) or address < 0 or address + tensor.nbytes > dram_bytes:
        raise InputError(f"{where}.dram_address", address, f"a region of {tensor.nbytes} bytes inside the "
                                                           f"{dram_bytes}-byte DRAM image")
    return tensor
