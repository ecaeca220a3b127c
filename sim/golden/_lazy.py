"""The golden units' numba kernel modules, imported on first use: importing the golden model stays cheap, and the
cached lookup costs about 0.03 us a call where an import statement inside a function costs 0.5 (measured)."""
from __future__ import annotations

import functools
import importlib


@functools.cache
def kernels(module: str):
    """The module ``aipu.sim.golden.<module>`` (one of the ``_*_kernels`` / ``_*_conv`` modules)."""
    return importlib.import_module(f"aipu.sim.golden.{module}")
