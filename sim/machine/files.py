"""Opening a file a user hands us: only a regular file, and never more of it than a documented size.

A FIFO, a terminal or a device such as /dev/zero could block on open or never end, and a directory is no
data; each is refused by name before anything is read. The file is opened without blocking and its type and
size are taken from the open handle, so what is checked is what is read. Errors are ``InputError`` naming
the file.
"""
from __future__ import annotations

import hashlib
import os
import stat
from typing import BinaryIO

from aipu.sim.machine.errors import InputError

CHUNK_BYTES = 1 << 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def open_regular(path, limit: int) -> BinaryIO:
    """``path`` opened for binary reading, when it is a regular file of at most ``limit`` bytes."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError("open", exc.strerror, "a readable regular file").within(path) from None
    status = os.fstat(descriptor)
    kind = next((name for test, name in _KINDS if test(status.st_mode)), None)
    if kind is not None or status.st_size > limit:
        os.close(descriptor)
        if kind is not None:
            raise InputError("file type", kind, "a regular file").within(path)
        raise InputError("size", status.st_size, f"at most {limit} bytes").within(path)
    return os.fdopen(descriptor, "rb")


def read_at_most(path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, refused beyond ``limit`` however its size was reported."""
    with open_regular(path, limit) as handle:
        # a read's buffer is allocated at the size asked for: ask for what the file holds, one byte more
        data = handle.read(min(os.fstat(handle.fileno()).st_size, limit) + 1)
    if len(data) > limit:
        raise InputError("size", f"over {limit} bytes", f"at most {limit}").within(path)
    return data


def file_sha256(handle: BinaryIO) -> str:
    """The SHA-256 of what is left of the open file ``handle`` (opened with :func:`open_regular`, so bounded),
    read in chunks; closes it."""
    digest = hashlib.sha256()
    with handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()
