"""The one assertion the unit tests make on a stimulus: bit-exact with the interpreter, every command in the
cycles of its formula, finished without errors."""
from __future__ import annotations

from aipu.sim.cosim.stimulus import Comparison, Stimulus, compare


def assert_matches(stimulus: Stimulus, backend: str = "amaranth", **options) -> Comparison:
    comparison = compare(stimulus, backend, **options)
    assert not comparison.problems, "\n".join(comparison.problems)
    return comparison
