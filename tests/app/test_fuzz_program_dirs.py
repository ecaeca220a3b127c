"""A compiled program directory is hostile input: `aipu run` and `aipu report` on a tampered one end in one
line naming the directory's file, with status 2, or (when the change was sealed again on purpose and is
valid) run; never a traceback, a hang or unbounded memory.

Three families, each case in a forked child under a time and a memory limit (tests/sandbox.py):
* any file's bytes flipped, overwritten, cut or extended without sealing again: refused by the seal, naming
  the file;
* the manifest edited anywhere (a field replaced by random JSON, removed, or added) and sealed again: the
  checks past the seal;
* the DRAM image changed (weights, records, weight streams) and sealed again, as a fault injection would.
The default suite runs a seeded quick subset; ``-m slow`` runs many more examples.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import strategies as st

from aipu.app.cli import main
from aipu.app.models.train_digits import MODEL_PATH
from aipu.compiler.program_dir import DRAM_FILE, MANIFEST_FILE, SEALED_FILES, reseal, seal
from tests.sandbox import Sandbox, accepted_or_one_line, assert_one_line_error, fuzz, profiles, run_case, run_cli

FILES = [MANIFEST_FILE, *SEALED_FILES]
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 40, 2 ** 40)
                     | st.floats(allow_nan=False, allow_infinity=False)
                     | st.text(max_size=6) | st.sampled_from([0, 1, -1, 2 ** 31, 2 ** 32, 2 ** 64, "int8", "conv"]),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                     max_leaves=6)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory, digits_data):
    """The embedded model compiled plainly and with compressed weights, an input, and a warm sandbox (forked
    after one run in this process, so that the child starts with the interpreter's compiled code)."""
    root = tmp_path_factory.mktemp("compiled")
    np.savez(root / "calib.npz", images=digits_data["calibration_images"])
    np.save(root / "one.npy", digits_data["eval_images"][:1])
    for name, options in (("plain", []), ("compressed", ["--compress", "all"])):
        assert main(["compile", str(MODEL_PATH), "--calib", str(root / "calib.npz"), "-o", str(root / name),
                     "--quiet", *options]) == 0
        assert main(["run", str(root / name), "--input", str(root / "one.npy")]) == 0
    box = Sandbox()
    yield root, box
    box.close()


def _copy(root, tmp_path, which: str):
    copy = tmp_path / "program"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root / which, copy)
    return copy


def _commands(root, copy) -> list[tuple[list[str], str]]:
    """`aipu run` and `aipu report` on ``copy``, each with the command name its errors start with."""
    return [(["run", str(copy), "--input", str(root / "one.npy")], "run"),
            (["report", str(copy), "-o", str(copy.parent / "report.html")], "report")]


@st.composite
def _damage(draw, size: int) -> tuple:
    """('flip', bit) | ('set', offset, byte) | ('cut', length) | ('extend', bytes)."""
    kind = draw(st.sampled_from(["flip", "set", "cut", "extend"]))
    if kind == "flip":
        return kind, draw(st.integers(0, 8 * size - 1))
    if kind == "set":
        return kind, draw(st.integers(0, size - 1)), draw(st.integers(0, 255))
    if kind == "cut":
        return kind, draw(st.integers(0, size - 1))
    return kind, draw(st.binary(min_size=1, max_size=16))


def _damaged(data: bytes, damage: tuple) -> bytes:
    kind, *what = damage
    if kind == "cut":
        return data[:what[0]]
    if kind == "extend":
        return data + what[0]
    changed = bytearray(data)
    if kind == "flip":
        changed[what[0] // 8] ^= 1 << (what[0] % 8)
    else:
        changed[what[0]] = what[1]
    return bytes(changed)


@pytest.mark.parametrize("profile", profiles(quick=40, long=1000))
def test_a_damaged_file_is_refused_by_name(compiled, tmp_path, profile):
    root, box = compiled
    sizes = {name: (root / "plain" / name).stat().st_size for name in FILES}
    cases = st.sampled_from(FILES).flatmap(lambda name: st.tuples(st.just(name), _damage(sizes[name])))

    def check(case):
        name, damage = case
        copy = _copy(root, tmp_path, "plain")
        changed = _damaged((copy / name).read_bytes(), damage)
        (copy / name).write_bytes(changed)
        argv, command = _commands(root, copy)[0]
        code, _, err = run_case(box, run_cli, argv)
        if _same_content(name, changed, (root / "plain" / name).read_bytes()):
            assert code == 0, err
            return
        assert_one_line_error(code, err, command, str(copy / name))

    fuzz(profile, cases, check)


def _same_content(name: str, changed: bytes, original: bytes) -> bool:
    """A byte set to its own value, or a manifest whose JSON is the same (the seal covers the content, not the
    spacing: a cut final newline is no change)."""
    if changed == original or name != MANIFEST_FILE:
        return changed == original
    try:
        return json.loads(changed) == json.loads(original)
    except ValueError:
        return False


@st.composite
def _manifest_edit(draw, manifest: dict) -> tuple:
    """A path into the manifest (keys and list indices) and what happens there: ('set', value) or ('drop',)."""
    path, node = [], manifest
    while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)):
        key = draw(st.sampled_from(sorted(node)) if isinstance(node, dict) else st.integers(0, len(node) - 1))
        path.append(key)
        node = node[key]
    if path and draw(st.integers(0, 4)) == 0:
        return path, ("drop",)
    return path or [draw(st.text(max_size=4))], ("set", draw(_JSON))


def _edited(manifest: dict, path: list, action: tuple) -> dict:
    edited = json.loads(json.dumps(manifest))
    node = edited
    for key in path[:-1]:
        node = node[key]
    if action[0] == "drop":
        del node[path[-1]]
    else:
        node[path[-1]] = action[1]
    return edited


@pytest.mark.parametrize("profile", profiles(quick=30, long=600))
def test_an_edited_manifest_sealed_again_runs_or_is_one_named_line(compiled, tmp_path, profile):
    root, box = compiled
    manifests = {which: json.loads((root / which / MANIFEST_FILE).read_text()) for which in ("plain", "compressed")}
    cases = st.sampled_from(sorted(manifests)).flatmap(
        lambda which: st.tuples(st.just(which), _manifest_edit(manifests[which]), st.integers(0, 1)))

    def check(case):
        which, (path, action), command_index = case
        copy = _copy(root, tmp_path, which)
        edited = seal(_edited(manifests[which], path, action))
        (copy / MANIFEST_FILE).write_text(json.dumps(edited))
        argv, command = _commands(root, copy)[command_index]
        code, _, err = run_case(box, run_cli, argv)
        accepted_or_one_line(code, err, command, str(copy))

    fuzz(profile, cases, check)


@pytest.mark.parametrize("profile", profiles(quick=20, long=400))
def test_a_changed_dram_image_sealed_again_runs_or_is_one_named_line(compiled, tmp_path, profile):
    """Weights, records and weight streams changed on purpose (a fault injection): the program runs on what it
    finds, or a command that cannot is named."""
    root, box = compiled
    size = (root / "plain" / DRAM_FILE).stat().st_size
    changes = st.lists(st.tuples(st.integers(0, size - 1), st.integers(0, 255)), min_size=1, max_size=64)
    cases = st.tuples(st.sampled_from(["plain", "compressed"]), changes, st.integers(0, 1))

    def check(case):
        which, writes, command_index = case
        copy = _copy(root, tmp_path, which)
        image = bytearray((copy / DRAM_FILE).read_bytes())
        for offset, value in writes:
            image[offset % len(image)] = value
        (copy / DRAM_FILE).write_bytes(bytes(image))
        reseal(copy)
        argv, command = _commands(root, copy)[command_index]
        code, _, err = run_case(box, run_cli, argv)
        accepted_or_one_line(code, err, command, str(copy))

    fuzz(profile, cases, check)
