"""Reading an .npz (numpy.savez) or .npy a user hands us: every array's header is checked before its data is read.

The archive is opened without pickles; a caller's ``check_member(name, dtype, shape)`` refuses a member by
its header alone (raising :class:`~aipu.sim.machine.errors.InputError`), so no member can allocate more
than the caller allows, and a truncated or corrupt member is an InputError naming it.
"""
from __future__ import annotations

import math
import tokenize
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from aipu.sim.machine.errors import InputError
from aipu.sim.machine.files import open_regular

_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
# What zipfile, zlib and numpy's .npy header parser raise on corrupt data (seeks to bad offsets: OSError; a
# version-1 header whose brackets do not close: tokenize.TokenError, from numpy's _filter_header).
_CORRUPT = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError, tokenize.TokenError)

MAX_FILE_BYTES = 1 << 40           # the file; what its members may allocate is the caller's check_member
MAX_MEMBERS = 4096
MemberCheck = Callable[[str, np.dtype, tuple[int, ...]], None]


def read_npz(path, check_member: MemberCheck, *, single_npy: bool = False) -> dict[str, np.ndarray]:
    """Every member of the archive ``path`` by name (without ".npy"), each header passed to ``check_member``
    before its data is read. ``single_npy`` also takes a lone .npy file (one array, named by the file's stem).
    The caller adds the file's name to errors (``InputError.within``)."""
    with open_regular(path, MAX_FILE_BYTES) as handle:
        npy = handle.read(6) == b"\x93NUMPY"
        handle.seek(0)
        if npy and single_npy:
            name = Path(path).stem
            return {name: _read_array(handle, name, check_member)}
        try:
            archive = zipfile.ZipFile(handle)
        except _CORRUPT:
            raise InputError("format", "a single .npy array" if npy else "not a complete zip archive",
                             "expected an .npz of named arrays, as numpy.savez writes") from None
        with archive:
            if len(archive.infolist()) > MAX_MEMBERS:
                raise InputError("members", len(archive.infolist()), f"at most {MAX_MEMBERS} arrays")
            members = {info.filename.removesuffix(".npy"): info for info in archive.infolist()}
            return {name: _read_member(archive, name, info, check_member) for name, info in members.items()}


def _read_member(archive: zipfile.ZipFile, name: str, info: zipfile.ZipInfo, check_member: MemberCheck) -> np.ndarray:
    """One array, its header checked (kind, dimensions, size) before its data is read."""
    if info.flag_bits & 1 or info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise InputError(name, "encrypted or unusually compressed", "numpy.savez(_compressed) members only")
    try:
        with archive.open(info) as handle:
            return _read_array(handle, name, check_member)
    except InputError:
        raise
    except _CORRUPT as exc:
        raise InputError(name, str(exc), "expected a readable .npy member (the archive is corrupt)") from None


def _read_array(handle, name: str, check_member: MemberCheck) -> np.ndarray:
    """One .npy stream: magic, header (checked by the caller's ``check_member``), then exactly its data."""
    try:
        version = np.lib.format.read_magic(handle)
        if version not in _NPY_HEADERS:
            raise InputError(name, f".npy format {version}", "formats 1.0 and 2.0 (numpy.save)")
        shape, fortran_order, dtype = _NPY_HEADERS[version](handle)
        if dtype.hasobject:
            raise InputError(name, str(dtype), "plain numeric arrays (no Python objects)")
        if any(size < 0 for size in shape):
            raise InputError(name, list(shape), "an array shape (sizes of at least 0)")
        check_member(name, dtype, shape)
        nbytes = math.prod(shape) * dtype.itemsize
        data = handle.read(nbytes)
    except InputError:
        raise
    except _CORRUPT as exc:
        raise InputError(name, str(exc), "expected a readable .npy array (the file is corrupt)") from None
    if len(data) != nbytes:
        raise InputError(name, f"{len(data)} bytes", f"truncated: shape {list(shape)} of {dtype} needs {nbytes}")
    return np.frombuffer(data, dtype).reshape(shape, order="F" if fortran_order else "C").copy()
