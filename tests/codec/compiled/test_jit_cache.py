"""The codec's numba cache is keyed by all of its njit sources, so an edit to one never leaves stale code."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from numba.core import config

from aipu.codec.compiled import jit_cache
from tests.codec.source_imports import imported_closure


def test_cache_directory_changes_when_any_njit_source_changes(tmp_path):
    copies = []
    for path in jit_cache.njit.source_files():
        copy = tmp_path / str(path.relative_to(jit_cache.CODEC_DIR)).replace("/", "-")
        shutil.copy(path, copy)
        copies.append(copy)
    probe = jit_cache.SourceKeyedJit(tmp_path, ("*.py",))
    assert probe.source_files() == sorted(copies)
    seen = set()
    for copy in (None, *copies):
        if copy:
            with open(copy, "a") as source:
                source.write("\n# edited\n")
        probe.__dict__.pop("cache_dir", None)
        seen.add(probe.cache_dir)
    assert len(seen) == 1 + len(copies)


def test_stale_cache_directories_of_other_sources_are_removed(tmp_path):
    """A directory of the same root's other sources (or of the unnamed form of earlier versions) goes once
    nothing was written in it for STALE_SECONDS; recent ones, the current one and others' stay."""
    root = tmp_path / "unit"
    root.mkdir()
    (root / "kernel.py").write_text("x = 1\n")
    parent = tmp_path / "cache"
    parent.mkdir()
    probe = jit_cache.SourceKeyedJit(root, ("*.py",))
    saved = config.CACHE_DIR
    config.CACHE_DIR = str(parent)
    try:
        current = Path(probe.cache_dir)
        probe.__dict__.pop("cache_dir")
        old = time.time() - jit_cache.STALE_SECONDS - 60
        names = {"stale": "numba-unit-0123456789abcdef", "unnamed": "numba-fedcba9876543210",
                 "recent": "numba-unit-00000000000000aa", "written_lately": "numba-unit-00000000000000bb",
                 "other_root": "numba-codec-0123456789abcdef", "not_a_cache": "numba-unit-notahash",
                 "current": current.name}
        for key, name in names.items():
            (parent / name / "module").mkdir(parents=True)
            (parent / name / "module" / "f.nbi").write_bytes(b"")
            if key != "recent":
                for path in (parent / name, parent / name / "module", parent / name / "module" / "f.nbi"):
                    if not (key == "written_lately" and path.name == "f.nbi"):
                        os.utime(path, (old, old))
        assert probe.cache_dir == str(current)
    finally:
        config.CACHE_DIR = saved
    assert sorted(path.name for path in parent.iterdir()) == sorted(
        name for key, name in names.items() if key not in ("stale", "unnamed"))


def test_the_key_covers_every_njit_module_and_what_it_imports():
    """Everything an njit module reads at compile time is hashed, whichever module it comes from."""
    njit_modules = [path for path in jit_cache.CODEC_DIR.rglob("*.py") if "@njit" in path.read_text()]
    reached = imported_closure(njit_modules)
    assert {path.name for path in njit_modules} >= {"aec_decoder.py", "tree_coders.py", "sublayer_decoder.py"}
    assert reached <= set(jit_cache.njit.source_files())


def test_compiled_functions_cache_there_and_numba_config_is_left_alone():
    from aipu.codec.compiled import aec_decoder

    before = config.CACHE_DIR
    probe = jit_cache.njit()(lambda x: x + 1)
    assert config.CACHE_DIR == before
    assert probe(1) == 2
    for dispatcher in (probe, aec_decoder.decode_decision):
        assert dispatcher._cache._impl.locator.get_cache_path().startswith(jit_cache.njit.cache_dir)
