"""Shared test set-up.

* BLAS threads: the golden model's float32 GEMMs run on numpy's BLAS, which would otherwise start one thread
  per core in every pytest-xdist worker. The suite pins BLAS to one thread per worker, as the `aipu` CLI does
  by default (README, "Threads"), so the tests exercise what users run and never oversubscribe the cores.
* Hypothesis: the default suite is repeatable (``derandomize``: the same examples on every run and machine),
  so a red CI is a real change, not a new random draw. Random exploration is the slow suite's job; run any
  test with fresh draws by ``HYPOTHESIS_PROFILE=explore``.
* Vectors: numba compiles for 512-bit vectors on AVX-512 CPUs, as the `aipu` CLI asks it to
  (aipu.app.vector_width), so the tests run the kernels users run; set before anything is compiled.
* Kernels: numba's cache holds every kernel before the first test runs (compiled once in the controller where
  it does not, with the CLI's notice): no test's time limit or subprocess meets minutes of compiling, no xdist
  worker compiles what another does, and no CLI test sees the notice on stderr.
* ``--sim icarus`` (or ``--sim verilator,icarus``): the Verilog simulators the co-simulation tests run on; the
  same as ``AIPU_SIM`` in the environment (default: Verilator).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from aipu.app.threads import pinned_threads
from aipu.app.vector_width import use_full_width_vectors

use_full_width_vectors()

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def pytest_addoption(parser):
    parser.addoption("--sim", default=None, metavar="SIMULATORS",
                     help="Verilog simulators for the co-simulation tests: verilator, icarus or both, comma-separated "
                          "(default: $AIPU_SIM, else verilator)")


def pytest_configure(config):
    """Before collection (which parametrizes over the simulators), in the controller and every xdist worker."""
    if not config.getoption("--sim"):
        return
    from aipu.sim.cosim.cocotb_run import BACKEND_VARIABLE, verilog_backends

    os.environ[BACKEND_VARIABLE] = config.getoption("--sim")
    try:
        verilog_backends()
    except ValueError as error:     # once, with the known names, instead of at every parametrization
        raise pytest.UsageError(str(error)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """In the controller (or the only process), before xdist starts any worker."""
    if not hasattr(session.config, "workerinput"):
        from aipu.app.warm_up import compile_kernels_once
        from aipu.sim.interpreter.kernel_cache import GROUPS

        compile_kernels_once(*GROUPS)


@pytest.fixture(autouse=True, scope="session")
def one_blas_thread_per_worker():
    with pinned_threads(1):
        yield


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout (tests/ lies directly below it): for files the tests compare against, such as docs/isa.md."""
    return Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def digits_data() -> dict[str, np.ndarray]:
    """The embedded model's images and labels (calibration_images, eval_images, eval_labels), loaded once."""
    from aipu.app.models.train_digits import DATA_PATH

    with np.load(DATA_PATH) as archive:
        return {name: archive[name] for name in archive.files}


@pytest.fixture(scope="module")
def sandbox():
    """A forked child for a test module's fuzz cases (tests/sandbox.py), closed after them. A module whose
    children should start with something loaded defines its own."""
    from tests.sandbox import Sandbox

    box = Sandbox()
    yield box
    box.close()
