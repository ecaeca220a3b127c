"""The codec's numba cache is keyed by all of its njit sources, so an edit to one never leaves stale code."""
from __future__ import annotations

import shutil

from numba.core import config

from aipu.codec import _jit


def test_cache_directory_changes_when_any_njit_source_changes(tmp_path, monkeypatch):
    for name in _jit.NJIT_SOURCES:
        shutil.copy(_jit._HERE / name, tmp_path / name)
    monkeypatch.setattr(_jit, "_HERE", tmp_path)
    seen = set()
    for name in (None,) + _jit.NJIT_SOURCES:
        if name:
            with open(tmp_path / name, "a") as source:
                source.write("\n# edited\n")
        _jit.cache_dir.cache_clear()
        seen.add(_jit.cache_dir())
    _jit.cache_dir.cache_clear()
    assert len(seen) == 1 + len(_jit.NJIT_SOURCES)


def test_compiled_functions_cache_there_and_numba_config_is_left_alone():
    from aipu.codec import fast

    before = config.CACHE_DIR
    probe = _jit.njit()(lambda x: x + 1)
    assert config.CACHE_DIR == before
    assert probe(1) == 2
    for dispatcher in (probe, fast.decode_decision):
        assert dispatcher._cache._impl.locator.get_cache_path().startswith(_jit.cache_dir())
