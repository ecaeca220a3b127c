"""One BLAS thread count for a whole command, for every BLAS it will load.

threadpoolctl limits the libraries loaded when it is applied. numpy's OpenBLAS is loaded with numpy, but the
interpreter's compiled run loop calls ``np.dot`` through numba, which reaches scipy's own OpenBLAS, loaded
only when that code first runs: unlimited, it kept a thread per core and one run varied 400-fold on a busy
machine. So every BLAS is loaded first, then limited.
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def pinned_threads(count: int):
    """Run the block with ``count`` threads in every BLAS (and OpenMP pool) a command may use."""
    import scipy.linalg.cython_blas  # noqa: F401  (loads the OpenBLAS numba's np.dot calls)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=count):
        yield
