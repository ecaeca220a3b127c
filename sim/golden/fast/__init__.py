"""The golden model's fast paths: numba kernels that compute what the definitions in aipu.sim.golden define.

Each module here serves the unit of the same name (``checks`` serves sim/golden/_checks.py; ``grouped_conv``,
``channels_last_conv`` and ``simd`` serve conv). The public functions of aipu.sim.golden choose them after
checking their inputs; tests/sim/golden compares every kernel with its unit's definition. The kernels import
numba, so they are loaded on first use through :func:`kernels`, and importing the golden model stays cheap.
"""
from __future__ import annotations

import functools
import importlib


@functools.cache
def kernels(module: str):
    """The module ``aipu.sim.golden.fast.<module>``, imported on its first use (a cached lookup: cheaper per call
    than an import statement inside a function)."""
    return importlib.import_module(f"aipu.sim.golden.fast.{module}")
