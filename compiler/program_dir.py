"""The compiled program directory that `aipu compile` writes and `aipu run` (and later the cycle model and the
RTL) reads: ``program.aipu`` (the command queues and the hardware configuration, sim/machine/program.py),
``dram.bin`` (the initial DRAM image: weights, records, tables), ``manifest.json`` (inputs and outputs: DRAM
address, shape, layout, type, scale and zero point; the per-layer report) and ``float.onnx`` (the normalized
float graph, the reference for ``aipu run --compare-onnx``).

Reading is hostile-input checking. The directory is sealed: the manifest records each file's size and SHA-256
and its own digest (``sha256``, over the rest of the manifest in canonical JSON), so a flipped bit in any file,
an edited field or a file swapped in from another directory is refused by name before anything runs. Past the
seal, the manifest is bounded in size, every field has its type and range, every tensor lies inside the DRAM
image and matches its shape and type.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aipu.compiler.qir import QTensor
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.files import file_sha256, open_regular, read_at_most
from aipu.sim.machine.program import MAX_PROGRAM_BYTES, Program

FORMAT, VERSION = "aipu-program", 2     # version 2: the directory is sealed (``files``, ``sha256``)
PROGRAM_FILE, DRAM_FILE, MANIFEST_FILE, FLOAT_MODEL_FILE = "program.aipu", "dram.bin", "manifest.json", "float.onnx"
MAX_MANIFEST_BYTES = 1 << 22
MAX_DRAM_BYTES = 1 << 32
MAX_FLOAT_MODEL_BYTES = 1 << 31          # onnx's own limit for one serialized model
SEALED_FILES = {PROGRAM_FILE: MAX_PROGRAM_BYTES, DRAM_FILE: MAX_DRAM_BYTES, FLOAT_MODEL_FILE: MAX_FLOAT_MODEL_BYTES}
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
    contents = {PROGRAM_FILE: program.to_bytes(), DRAM_FILE: dram.tobytes(), FLOAT_MODEL_FILE: float_model}
    for name, data in contents.items():
        (out / name).write_bytes(data)
    files = {name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in contents.items()}
    document = {"format": FORMAT, "version": VERSION, "program": PROGRAM_FILE, "dram_image": DRAM_FILE,
                "float_model": FLOAT_MODEL_FILE, **manifest, "files": files}
    _write_manifest(out, document)


def reseal(path) -> None:
    """Seal the directory ``path`` again as its files now are: for whoever changes a file on purpose (a fault
    injected into the DRAM image, a test). The files are read within the same bounds as by the reader."""
    path = Path(path)
    manifest = json.loads(read_at_most(path / MANIFEST_FILE, MAX_MANIFEST_BYTES))
    manifest["files"] = {name: {"bytes": os.stat(path / name).st_size,
                                "sha256": file_sha256(open_regular(path / name, limit))}
                         for name, limit in SEALED_FILES.items()}
    _write_manifest(path, manifest)


def _write_manifest(path: Path, document: dict) -> None:
    (path / MANIFEST_FILE).write_text(json.dumps(seal(document), indent=1, allow_nan=False) + "\n")


def seal(document: dict) -> dict:
    """``document`` with its ``sha256``: the digest of the rest of it in canonical JSON (sorted keys, no
    spaces). Whoever edits a manifest on purpose (a test) seals it again."""
    rest = json.loads(json.dumps({key: value for key, value in document.items() if key != "sha256"},
                                 allow_nan=False))       # as a reader will see it: string keys, JSON numbers
    return {**rest, "sha256": _manifest_digest(rest)}


def _manifest_digest(rest: dict) -> str:
    canonical = json.dumps(rest, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def read_program_dir(path) -> ProgramDir:
    """The directory ``path`` checked: InputError naming the file and field on anything unusable."""
    path = Path(path)
    manifest_path = path / MANIFEST_FILE
    if not path.is_dir():
        raise InputError("program directory", str(path), "a directory written by `aipu compile`").within(path)
    text = read_at_most(manifest_path, MAX_MANIFEST_BYTES)
    try:
        manifest = _manifest(text)
    except InputError as error:
        raise error.within(manifest_path) from None
    files = manifest["files"]
    for name in (PROGRAM_FILE, FLOAT_MODEL_FILE):
        with open_regular(path / name, files[name]["bytes"]) as handle:
            _check_sealed(path / name, files[name], handle, lambda: file_sha256(handle))
    program = Program.read(path / PROGRAM_FILE)
    address_bits = program.config.dram.address_bits
    if manifest["dram_bytes"] > 1 << address_bits:
        raise InputError("dram_bytes", manifest["dram_bytes"],
                         f"at most 2**{address_bits}, the DRAM the program's configuration addresses"
                         ).within(manifest_path)
    dram = np.empty(manifest["dram_bytes"], np.uint8)

    def read_dram() -> str:
        handle.readinto(memoryview(dram))
        return hashlib.sha256(dram).hexdigest()

    with open_regular(path / DRAM_FILE, dram.size) as handle:
        _check_sealed(path / DRAM_FILE, files[DRAM_FILE], handle, read_dram)
    entries = {}
    try:
        for group in ("inputs", "outputs"):
            entries[group] = [_tensor(f"{group}[{index}]", entry, manifest["dram_bytes"])
                              for index, entry in enumerate(manifest[group])]
    except InputError as error:
        raise error.within(manifest_path) from None
    return ProgramDir(path, program, dram, entries["inputs"], entries["outputs"], manifest)


def _check_sealed(path: Path, sealed: dict, handle, digest) -> None:
    """The open file has the size and the SHA-256 (``digest()`` reads it) the manifest seals."""
    size = os.fstat(handle.fileno()).st_size
    if size != sealed["bytes"]:
        raise InputError("size", size, f"{sealed['bytes']} bytes, as manifest.json seals").within(path)
    actual = digest()
    if actual != sealed["sha256"]:
        raise InputError("sha256", actual[:16], f"{sealed['sha256'][:16]}..., the digest manifest.json seals: the "
                                                "file was changed or comes from another directory; compile again"
                         ).within(path)


def _manifest(text: bytes) -> dict:
    try:
        document = json.loads(text, parse_constant=_refuse_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise InputError("json", type(exc).__name__, f"a JSON document ({exc})") from None
    if not isinstance(document, dict):
        raise InputError("document", type(document).__name__, "a JSON object")
    if document.get("format") != FORMAT or not _is_int(document.get("version")) or document["version"] != VERSION:
        raise InputError("format/version", f"{document.get('format')!r} {document.get('version')!r}",
                         f"{FORMAT!r} version {VERSION} (a directory of another aipu version: compile again)")
    rest = {key: value for key, value in document.items() if key != "sha256"}
    if document.get("sha256") != _manifest_digest(rest):
        raise InputError("sha256", document.get("sha256"), "the digest of the rest of the manifest: it was edited "
                                                           "after `aipu compile` wrote it; compile again")
    _check_files(document.get("files"))
    dram_bytes = document.get("dram_bytes")
    if not _is_int(dram_bytes) or not 1 <= dram_bytes <= MAX_DRAM_BYTES:
        raise InputError("dram_bytes", dram_bytes, f"an integer 1 .. {MAX_DRAM_BYTES}")
    if document["files"][DRAM_FILE]["bytes"] != dram_bytes:
        raise InputError("dram_bytes", dram_bytes, f"the size of {DRAM_FILE} the manifest seals, "
                                                   f"{document['files'][DRAM_FILE]['bytes']}")
    for group in ("inputs", "outputs"):
        if not isinstance(document.get(group), list) or not 1 <= len(document[group]) <= 64:
            raise InputError(group, document.get(group), "a list of 1 .. 64 tensors")
    return document


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _check_files(files) -> None:
    if not isinstance(files, dict) or set(files) != set(SEALED_FILES):
        raise InputError("files", files if not isinstance(files, dict) else sorted(files),
                         f"an object sealing {', '.join(SEALED_FILES)}")
    for name, limit in SEALED_FILES.items():
        entry = files[name]
        if (not isinstance(entry, dict) or not _is_int(entry.get("bytes")) or not 0 <= entry["bytes"] <= limit
                or not isinstance(entry.get("sha256"), str) or len(entry["sha256"]) != 64):
            raise InputError(f"files.{name}", entry, f"{{bytes: 0 .. {limit}, sha256: 64 hex digits}}")


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
