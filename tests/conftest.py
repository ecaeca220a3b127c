"""Shared test set-up.

The golden model's float32 GEMMs run on numpy's BLAS, which would otherwise start one thread per core in
every pytest-xdist worker. The suite pins BLAS to one thread per worker, as the `aipu` CLI does by default
(README, "Threads"), so the tests exercise the same configuration users run and never oversubscribe the cores.
"""
from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True, scope="session")
def one_blas_thread_per_worker():
    with threadpool_limits(limits=1):
        yield
