"""The one way a user's file is opened: regular files only, never past a stated size, never blocking."""
from __future__ import annotations

import os

import pytest

from aipu.sim.machine.errors import InputError
from aipu.sim.machine.files import file_sha256, open_regular, read_at_most


def test_a_regular_file_within_its_limit_is_read_whole(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    assert read_at_most(tmp_path / "f", 3) == b"abc"
    assert file_sha256(open_regular(tmp_path / "f", 3)) == \
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


@pytest.mark.parametrize("make, kind", [
    (lambda path: os.mkfifo(path), "a FIFO"),
    (lambda path: path.mkdir(), "a directory"),
])
def test_what_is_not_a_regular_file_is_refused_by_kind_without_blocking(tmp_path, make, kind):
    make(tmp_path / "f")
    with pytest.raises(InputError, match=f"f: file type = '{kind}': a regular file"):
        read_at_most(tmp_path / "f", 100)


def test_a_device_that_never_ends_is_refused():
    with pytest.raises(InputError, match="/dev/zero: file type = 'a character device': a regular file"):
        read_at_most("/dev/zero", 100)


def test_a_file_over_the_limit_and_a_missing_one_are_named(tmp_path):
    (tmp_path / "big").write_bytes(bytes(101))
    with pytest.raises(InputError, match="big: size = 101: at most 100 bytes"):
        read_at_most(tmp_path / "big", 100)
    with pytest.raises(InputError, match="missing: open = 'No such file or directory': a readable regular file"):
        read_at_most(tmp_path / "missing", 100)
