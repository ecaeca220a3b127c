"""numba helper of sim/golden/_checks.py: the fast path of its range check."""
from __future__ import annotations

import numba


@numba.njit(cache=True, nogil=True)
def first_outside(values, lo, hi):
    """The index of the first of the 1-D ``values`` not within [lo, hi] (NaN is not), or -1: one pass that
    stops at the first bad value, where numpy's min and max are two reductions."""
    for i in range(values.size):
        if not lo <= values[i] <= hi:
            return i
    return -1
