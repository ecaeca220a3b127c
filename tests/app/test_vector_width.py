"""The CLI and the test suite ask numba for 512-bit vectors on AVX-512 CPUs, and only there and only when asked."""
from __future__ import annotations

import os

import pytest

from aipu.app.vector_width import NARROW_PREFERENCE, VECTOR_BITS_VARIABLE, use_full_width_vectors


class _Features(dict):
    """llvmlite's host feature map, as far as use_full_width_vectors reads it."""

    def flatten(self) -> str:
        return ",".join(f"{'+' if on else '-'}{name}" for name, on in self.items())


@pytest.fixture
def host(monkeypatch):
    """A CPU of the given features and an environment of its own without numba's CPU variables (a copy:
    what the function writes must not reach the worker's later subprocesses, which a variable deleted
    with monkeypatch.delenv and set again would); numba's config is not reloaded (the worker's own
    compiles keep theirs). Returns the setter and the reloads seen."""
    reloads = []
    monkeypatch.setattr("numba.core.config.reload_config", lambda: reloads.append(True))
    environment = {name: value for name, value in os.environ.items()
                   if name not in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", VECTOR_BITS_VARIABLE)}
    monkeypatch.setattr(os, "environ", environment)

    def set_features(**features):
        monkeypatch.setattr("llvmlite.binding.get_host_cpu_features", lambda: _Features(features))
    return set_features, reloads


def test_an_avx512_cpu_gets_full_width_vectors(host):
    set_features, reloads = host
    set_features(avx512f=True, avx2=True)
    use_full_width_vectors()
    assert os.environ["NUMBA_CPU_FEATURES"] == f"+avx512f,+avx2,-{NARROW_PREFERENCE}"
    assert reloads == [True]


@pytest.mark.parametrize("features, environment", [
    ({"avx512f": False, "avx2": True}, {}),                              # no AVX-512: nothing to widen
    ({"avx512f": True}, {VECTOR_BITS_VARIABLE: "256"}),                  # asked for LLVM's own choice
    ({"avx512f": True}, {"NUMBA_CPU_FEATURES": "+avx2"}),                # the user's numba setting wins
    ({"avx512f": True}, {"NUMBA_CPU_NAME": "generic"}),
])
def test_full_width_vectors_only_where_wanted(host, features, environment):
    set_features, reloads = host
    set_features(**features)
    os.environ.update(environment)
    use_full_width_vectors()
    assert os.environ.get("NUMBA_CPU_FEATURES") == environment.get("NUMBA_CPU_FEATURES")
    assert reloads == []


def test_the_cli_refuses_a_bad_vector_width_in_one_line(host, capsys):
    from aipu.app.cli import main

    os.environ[VECTOR_BITS_VARIABLE] = "1024"
    assert main(["isa-doc"]) == 2
    assert capsys.readouterr().err == "aipu: error: $AIPU_VECTOR_BITS = '1024': expected one of 512, 256\n"
