"""Constrained-random stimulus for the RTL units, and the one comparison every unit test, the long random runs
and `aipu bench rtl` apply to it.

A :class:`Stimulus` is a program of one unit's legal commands (LOAD and STORE come as a pair) over a random
memory image, with the RTL unit classes that execute it. :func:`compare` runs it on a backend and on the
interpreter and lists every way the RTL departs: not finished, an error or DRAM fault, the first differing
element (named by :func:`aipu.sim.cosim.result.first_mismatch`), a command whose cycles differ from its
documented formula (:func:`expected_cycles`). ``RANDOM`` maps a unit family to its generator, so a run over
every unit is a loop over it.
"""
from __future__ import annotations

from functools import partial

from aipu.sim.cosim.stimulus import conv, dma, lut, pool, requant, wdec
from aipu.sim.cosim.stimulus.base import Comparison, Stimulus, compare, expected_cycles, unit_program

RANDOM = {"conv": conv.random_stimulus, "load_store": dma.random_stimulus, "requant": requant.random_stimulus,
          "lut": lut.random_stimulus, "softmax": lut.random_softmax_stimulus, "pool": pool.random_stimulus,
          "wdec": wdec.random_stimulus, "load_codebook": partial(dma.random_stimulus, codebook=True)}
"""Unit family -> ``(config, rng, commands) -> Stimulus``: about that many random legal commands of the family
(fewer where a buffer runs out of room for disjoint outputs, as REQUANT's OUT does)."""

__all__ = ["RANDOM", "Comparison", "Stimulus", "compare", "expected_cycles", "unit_program"]
