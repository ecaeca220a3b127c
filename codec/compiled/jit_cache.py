"""The codec's numba decorator, with an on-disk cache keyed by everything the compiled code is built from.

numba revalidates a cached function against its own source file only. The codec's compiled functions call
each other across the modules of codec/compiled/, and numba freezes the globals they read (the element
table, the engine's constants from codec/reference/) into their machine code: after an edit to one of
those files, another file's cache would silently keep code built from the old version. The cache directory
is therefore named after a hash of every source in ``KEY_SOURCES``, so that any edit starts a fresh cache
(tests/codec/compiled/test_jit_cache.py checks that every codec module an njit module imports, directly or
not, is among them).
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numba
from numba.core import config

CODEC_DIR = Path(__file__).resolve().parent.parent      # the folder of the aipu.codec package
# The compiled path, the reference it reads its tables and constants from, and the one other codec module
# they import.
KEY_SOURCES = ("compiled/*.py", "reference/*.py", "errors.py")


def source_files() -> list[Path]:
    """The files the cache directory's name is a hash of."""
    return sorted({path for pattern in KEY_SOURCES for path in CODEC_DIR.glob(pattern)})


@functools.cache
def cache_dir() -> str:
    """<NUMBA_CACHE_DIR or codec/__pycache__>/numba-<hash of source_files()>."""
    digest = hashlib.sha256()
    for path in source_files():
        digest.update(str(path.relative_to(CODEC_DIR)).encode() + b"\0" + path.read_bytes())
    return str(Path(config.CACHE_DIR or CODEC_DIR / "__pycache__") / f"numba-{digest.hexdigest()[:16]}")


def njit(func=None, **options):
    """``numba.njit(cache=True, nogil=True, _nrt=False, **options)`` with its cache in :func:`cache_dir`;
    ``@njit`` or ``@njit(inline="always")``.

    No codec function allocates, so none needs numba's reference counting (``_nrt=False``): with it, every
    call passing arrays paid atomic incref/decref pairs, which made a bin 3-6 times slower (measured: 60-80 ns
    against 11-26 ns per bin). Code compiled with reference counting may still call these functions.

    numba picks a function's cache directory when the decorator runs, from ``config.CACHE_DIR``; it is set
    only for that moment, so numba code elsewhere in the process keeps its own setting.
    """
    if func is None:
        return functools.partial(njit, **options)
    saved = config.CACHE_DIR
    config.CACHE_DIR = cache_dir()
    try:
        return numba.njit(cache=True, nogil=True, _nrt=False, **options)(func)
    finally:
        config.CACHE_DIR = saved
