"""A small mutation check: realistic bugs planted in the RTL's source must be caught by the default suite's own
random stimulus.

A mutant is one edit of one expression in one module of ``aipu.rtl``: the module is executed again from the
edited source, and every module that imported a class or function from it gets the mutant's instead, for the
length of the test. The check fails when the stimulus still agrees with the interpreter, that is, when the
default suite would not notice the bug.
"""
from __future__ import annotations

import importlib
import inspect
import sys
import types
from dataclasses import dataclass

import pytest

from aipu.sim.cosim.stimulus import compare
from tests.rtl.configs import SMALL
from tests.rtl import test_conv, test_dma, test_requant


@dataclass(frozen=True)
class Mutant:
    module: str
    original: str       # occurs exactly once in the module's source
    mutated: str
    stimulus: object    # the default suite's stimulus (a function of the configuration) that must kill it
    survives: str = ""  # for a known survivor: why the stimulus misses it


MUTANTS = {
    "CONV steps its vertical taps by dilation_w": Mutant(
        "aipu.rtl.conv_parts.setup", "geo.tap_y.eq(cmd.dilation_h * row_bytes)",
        "geo.tap_y.eq(cmd.dilation_w * row_bytes)", test_conv.mixed_stimulus),
    "DWCONV steps its vertical taps by dilation_w": Mutant(
        "aipu.rtl.conv_parts.taps", "down, across = self.ky * cmd.dilation_h, self.kx * cmd.dilation_w",
        "down, across = self.ky * cmd.dilation_w, self.kx * cmd.dilation_w", test_conv.depthwise_stimulus),
    "CONV accumulates where it should overwrite": Mutant(
        "aipu.rtl.conv_parts.blocks", "block.overwrites.eq(~cmd.accumulate &",
        "block.overwrites.eq(cmd.accumulate &", test_conv.mixed_stimulus),
    "DWCONV overwrites where it should accumulate": Mutant(
        "aipu.rtl.conv_parts.drain", "Mux(self.accumulate, old, 0)", "Mux(self.accumulate, 0, old)",
        test_conv.depthwise_stimulus),
    "CONV reads a block of groups' ACT run only as far as one group's channels": Mutant(
        "aipu.rtl.conv_parts.blocks", "packed_bytes(block_rows * block_groups, geo.int4_inputs)",
        "packed_bytes(block_rows, geo.int4_inputs)", test_conv.int4_stimulus),
    "LOAD expands a byte's indices high bits first": Mutant(
        "aipu.rtl.dma", "incoming[8 * (j // per_byte) + bits * (j % per_byte):]",
        "incoming[8 * (j // per_byte) + bits * (per_byte - 1 - j % per_byte):]", test_dma.codebook_stimulus),
    "LOAD starts the walk a cycle before the codebook's last word": Mutant(
        "aipu.rtl.dma", "fetched.eq(fetching & (issued == words))", "fetched.eq(fetching & (issued + 1 >= words))",
        test_dma.codebook_stimulus),
    "LOAD places a step of indices as if it were plain bytes": Mutant(
        "aipu.rtl.dma_pattern", "self.tile_count.eq(self.byte_count << self.dense_shift)",
        "self.tile_count.eq(self.byte_count)", test_dma.codebook_stimulus),
    "REQUANT scales the second plane by the first plane's multiplier": Mutant(
        "aipu.rtl.requant_parts.lane", "self.second * record.negative_multiplier",
        "self.second * record.multiplier", test_requant.dual_stimulus),
    "REQUANT pairs a lane's dual entries from even groups whatever acc_addr's parity": Mutant(
        "aipu.rtl.requant_parts.fetch", "(cmd.dual & (group[0] ^ cmd.acc_addr[0]))", "(cmd.dual & group[0])",
        test_requant.dual_stimulus),
}
# Known survivors: the default stimulus does not reach the corner yet (the test fails when it starts to)
SURVIVORS = {
    "ties round up instead of to even": Mutant(
        "aipu.rtl.arith", "Rounding.HALF_TO_EVEN: above | (tie & quotient[0]),",
        "Rounding.HALF_TO_EVEN: above | tie,", test_requant.mixed_stimulus,
        "random products rarely land exactly on a tie"),
}


def plant(mutant: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace ``mutant.module``'s classes and functions, wherever an ``aipu`` module holds them, by those of its
    edited source."""
    module = importlib.import_module(mutant.module)
    source = inspect.getsource(module)
    assert source.count(mutant.original) == 1, f"{mutant.module} no longer reads {mutant.original!r}"
    edited = types.ModuleType(mutant.module)
    edited.__file__ = module.__file__
    exec(compile(source.replace(mutant.original, mutant.mutated), module.__file__, "exec"), edited.__dict__)
    defined = {name: value for name, value in vars(module).items()
               if (inspect.isclass(value) or inspect.isfunction(value)) and value.__module__ == mutant.module}
    for holder in [m for name, m in sys.modules.items() if name.startswith("aipu.") and m is not None]:
        for name, value in list(vars(holder).items()):
            if name in defined and defined[name] is value:
                monkeypatch.setattr(holder, name, getattr(edited, name))


@pytest.mark.parametrize("name", [*MUTANTS, *(pytest.param(name, marks=pytest.mark.xfail(
    strict=True, reason=mutant.survives)) for name, mutant in SURVIVORS.items())])
def test_the_default_stimulus_kills_the_mutant(name, monkeypatch):
    mutant = MUTANTS.get(name) or SURVIVORS[name]
    plant(mutant, monkeypatch)      # on the real RTL the same stimulus passes (tests/rtl/test_conv.py)
    assert compare(mutant.stimulus(SMALL), "amaranth").problems, f"survived: {name}"
