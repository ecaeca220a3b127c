"""NNCodec 2.1.3 (Fraunhofer's NNC/DeepCABAC implementation) in an environment of its own, for
`aipu bench codec --compare nncodec`.

NNCodec needs numpy < 2, which the project does not use, so it never enters the project's environment:
:func:`environment` creates a venv beside the real-model cache on first use and installs NNCodec there
without its dependencies (torch and the rest are needed only by its training front ends, not by the
DeepCABAC extension the benchmark drives). :func:`run_nncodec` codes integer tensors in it with
app/bench/nncodec_worker.py and returns that script's JSON.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

NNCODEC = "nncodec==2.1.3"
NUMPY = "numpy<2"
INSTALL_TIMEOUT = 900        # seconds: pip builds the DeepCABAC extension from source (about a minute)
WORKER = Path(__file__).with_name("nncodec_worker.py")


def default_location() -> Path:
    """$AIPU_NNCODEC_ENV, else ~/.cache/aipu/nncodec-2.1.3."""
    return Path(os.environ.get("AIPU_NNCODEC_ENV", Path.home() / ".cache" / "aipu" / "nncodec-2.1.3"))


def environment(location: Path | None = None) -> Path:
    """The Python of NNCodec's venv, created and installed on first use."""
    location = location or default_location()
    python = location / "bin" / "python"
    ready = location / ".installed"
    if ready.exists():
        return python
    # No ensurepip needed: the project's own pip installs into the new interpreter (pip --python).
    _run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(location)], "create its venv")
    _run([sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check", "install",
          "--quiet", "--no-deps", NNCODEC, NUMPY], f"pip install --no-deps {NNCODEC} '{NUMPY}'")
    ready.touch()
    return python


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT)
    if done.returncode:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"NNCodec's environment: could not {what}: {tail[0]}")


def run_nncodec(tensors: dict[str, np.ndarray], repeats: int = 3, location: Path | None = None) -> dict:
    """NNCodec's bytes and best-of-``repeats`` encode and decode seconds for each integer tensor."""
    python = environment(location)
    with tempfile.TemporaryDirectory() as scratch:
        archive, result = Path(scratch) / "tensors.npz", Path(scratch) / "result.json"
        np.savez(archive, **{f"t{i}": array for i, array in enumerate(tensors.values())})
        done = subprocess.run([str(python), str(WORKER), str(archive), str(result), str(repeats)],
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"NNCodec's worker failed: {(done.stderr or done.stdout).strip()[-500:]}")
        coded = json.loads(result.read_text())["tensors"]
    return {name: coded[f"t{i}"] for i, name in enumerate(tensors)}
