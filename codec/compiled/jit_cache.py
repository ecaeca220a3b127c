"""numba decorators with an on-disk cache keyed by everything the compiled code is built from.

numba revalidates a cached function against its own source file only. Compiled functions that call each
other across modules, or freeze globals read from other modules (tables, constants) into their machine
code, would silently keep code built from an old version of those files after an edit. A
:class:`SourceKeyedJit` therefore caches in a directory named after a hash of every source its key lists,
so that any edit starts a fresh cache. The codec's decorator is :func:`njit` (its key: the compiled path,
the reference it reads its tables and constants from, and the one other codec module they import;
tests/codec/compiled/test_jit_cache.py checks that every codec module an njit module imports, directly or
not, is among them); the interpreter's compiled run loop has its own (sim/interpreter/run_loop.py).
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numba
from numba.core import config

CODEC_DIR = Path(__file__).resolve().parent.parent      # the folder of the aipu.codec package
KEY_SOURCES = ("compiled/*.py", "reference/*.py", "errors.py")


class SourceKeyedJit:
    """``numba.njit(cache=True, nogil=True, **defaults, **options)`` caching in ``<NUMBA_CACHE_DIR or
    root/__pycache__>/numba-<hash of the files under root matching key_sources>``; ``@jit`` or
    ``@jit(inline="always")``.

    numba picks a function's cache directory when the decorator runs, from ``config.CACHE_DIR``; it is set
    only for that moment, so numba code elsewhere in the process keeps its own setting."""

    def __init__(self, root: Path, key_sources: tuple[str, ...], **defaults) -> None:
        self.root, self.key_sources, self.defaults = root, key_sources, defaults

    def source_files(self) -> list[Path]:
        """The files the cache directory's name is a hash of."""
        return sorted({path for pattern in self.key_sources for path in self.root.glob(pattern)})

    @functools.cached_property
    def cache_dir(self) -> str:
        digest = hashlib.sha256()
        for path in self.source_files():
            digest.update(str(path.relative_to(self.root)).encode() + b"\0" + path.read_bytes())
        return str(Path(config.CACHE_DIR or self.root / "__pycache__") / f"numba-{digest.hexdigest()[:16]}")

    def __call__(self, func=None, **options):
        if func is None:
            return functools.partial(self, **options)
        saved = config.CACHE_DIR
        config.CACHE_DIR = self.cache_dir
        try:
            return numba.njit(cache=True, nogil=True, **self.defaults, **options)(func)
        finally:
            config.CACHE_DIR = saved


# The codec's decorator (``@njit`` or ``@njit(inline="always")``). No codec function allocates, so none needs
# numba's reference counting (``_nrt=False``): with it, every call passing arrays paid atomic incref/decref
# pairs, which made a bin 3-6 times slower (measured: 60-80 ns against 11-26 ns per bin). Code compiled with
# reference counting may still call these functions.
njit = SourceKeyedJit(CODEC_DIR, KEY_SOURCES, _nrt=False)
