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
import itertools
import re
import shutil
import time
from pathlib import Path

import numba
from numba.core import config

CODEC_DIR = Path(__file__).resolve().parent.parent      # the folder of the aipu.codec package
KEY_SOURCES = ("compiled/*.py", "reference/*.py", "errors.py")
#: a cache directory of other sources than today's with nothing written in it for this long is removed (each
#: edit, or each upgrade, leaves one behind: 10-20 MB)
STALE_SECONDS = 7 * 24 * 3600


class SourceKeyedJit:
    """``numba.njit(cache=True, nogil=True, **defaults, **options)`` caching in ``<NUMBA_CACHE_DIR or
    root/__pycache__>/numba-<root's name>-<hash of the files under root matching key_sources>``; ``@jit`` or
    ``@jit(inline="always")``. The directories of the same root's other hashes (and of the unnamed form
    ``numba-<hash>`` of earlier versions) are removed once nothing has been written in them for
    :data:`STALE_SECONDS`: a process still running other sources would not compile new signatures that long.

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
        parent = Path(config.CACHE_DIR or self.root / "__pycache__")
        current = parent / f"numba-{self.root.name}-{digest.hexdigest()[:16]}"
        self._remove_stale(parent, current)
        return str(current)

    def _remove_stale(self, parent: Path, current: Path) -> None:
        """Remove the directories of this root's other hashes (and of the unnamed form) in ``parent`` that have
        had nothing written in them for STALE_SECONDS."""
        ours = re.compile(rf"numba-({re.escape(self.root.name)}-)?[0-9a-f]{{16}}")
        moment = time.time() - STALE_SECONDS
        try:
            candidates = [path for path in parent.iterdir() if path != current and ours.fullmatch(path.name)]
        except OSError:         # no cache yet, or not ours to read
            return
        for directory in candidates:
            if _untouched_since(directory, moment):
                shutil.rmtree(directory, ignore_errors=True)     # another process may be removing it too

    def __call__(self, func=None, **options):
        if func is None:
            return functools.partial(self, **options)
        saved = config.CACHE_DIR
        config.CACHE_DIR = self.cache_dir
        try:
            return numba.njit(cache=True, nogil=True, **self.defaults, **options)(func)
        finally:
            config.CACHE_DIR = saved


def _untouched_since(directory: Path, moment: float) -> bool:
    """Whether nothing in ``directory``, nor the directory itself, was written after ``moment`` (False where
    that cannot be told: it vanished, or is not a directory)."""
    try:
        return directory.is_dir() and all(path.stat().st_mtime < moment
                                          for path in itertools.chain((directory,), directory.rglob("*")))
    except OSError:
        return False


# The codec's decorator (``@njit`` or ``@njit(inline="always")``). No codec function allocates, so none needs
# numba's reference counting (``_nrt=False``): with it, every call passing arrays paid atomic incref/decref
# pairs, which made a bin 3-6 times slower (measured: 60-80 ns against 11-26 ns per bin). Code compiled with
# reference counting may still call these functions.
njit = SourceKeyedJit(CODEC_DIR, KEY_SOURCES, _nrt=False)
