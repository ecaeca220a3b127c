"""The codec's numba decorator, with an on-disk cache keyed by every one of the codec's njit sources.

numba revalidates a cached function against its own source file only, but the codec's compiled functions
call each other across codec/fast.py, codec/syntax_fast.py and codec/decode_fast.py: after an edit to one
file, another file's cache would silently keep machine code built from the old version. The cache
directory is therefore named after a hash of all of them, so that any edit starts a fresh cache.
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numba
from numba.core import config

_HERE = Path(__file__).resolve().parent
NJIT_SOURCES = ("fast.py", "syntax_fast.py", "decode_fast.py")


@functools.cache
def cache_dir() -> str:
    """<NUMBA_CACHE_DIR or codec/__pycache__>/numba-<hash of the njit sources>."""
    digest = hashlib.sha256(b"".join((_HERE / name).read_bytes() for name in NJIT_SOURCES)).hexdigest()[:16]
    return str(Path(config.CACHE_DIR or _HERE / "__pycache__") / f"numba-{digest}")


def njit(**options):
    """``numba.njit(cache=True, nogil=True, **options)`` with its cache in :func:`cache_dir`.

    numba picks a function's cache directory when the decorator runs, from ``config.CACHE_DIR``; it is
    set only for that moment, so numba code elsewhere in the process keeps its own setting.
    """
    decorator = numba.njit(cache=True, nogil=True, **options)

    def decorate(func):
        saved = config.CACHE_DIR
        config.CACHE_DIR = cache_dir()
        try:
            return decorator(func)
        finally:
            config.CACHE_DIR = saved
    return decorate
