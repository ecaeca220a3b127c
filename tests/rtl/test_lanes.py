"""The log2-stage shifters of rtl/lanes.py agree with Python's shifts on every amount, including amounts wider
than the value (which must give zero) and values shorter than the output."""
from __future__ import annotations

import random

import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from aipu.rtl.lanes import byte_mask, select_word, shift_down, shift_up

CASES = [  # value bits, amount bits, unit bits, output units
    (64, 3, 8, 4), (64, 8, 8, 8), (40, 6, 8, 3), (24, 4, 8, 5), (96, 2, 32, 1), (16, 5, 1, 16), (8, 1, 8, 1),
    (32, 6, 8, 40),   # a narrow value into a wide window (a DRAM beat into WEIGHT words)
]


def _simulate(value_bits: int, amount_bits: int, build, trials: list[tuple[int, int]]) -> list[int]:
    m = Module()
    value, amount = Signal(value_bits), Signal(amount_bits)
    out = build(m, value, amount)
    results = []

    async def bench(ctx):
        for v, a in trials:
            ctx.set(value, v)
            ctx.set(amount, a)
            results.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return results


def _trials(value_bits: int, amount_bits: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    amounts = list(range(min(1 << amount_bits, 64))) + [(1 << amount_bits) - 1]
    return [(rng.getrandbits(value_bits), a) for a in amounts]


@pytest.mark.parametrize("value_bits,amount_bits,unit_bits,out_units", CASES)
def test_shift_down_matches_python(value_bits, amount_bits, unit_bits, out_units):
    trials = _trials(value_bits, amount_bits, value_bits * amount_bits)
    got = _simulate(value_bits, amount_bits,
                    lambda m, v, a: shift_down(m, "d", v, a, unit_bits, out_units), trials)
    mask = (1 << (out_units * unit_bits)) - 1
    assert got == [(v >> (a * unit_bits)) & mask for v, a in trials]


@pytest.mark.parametrize("value_bits,amount_bits,unit_bits,out_units", CASES)
def test_shift_up_matches_python(value_bits, amount_bits, unit_bits, out_units):
    trials = _trials(value_bits, amount_bits, value_bits + amount_bits)
    got = _simulate(value_bits, amount_bits, lambda m, v, a: shift_up(m, "u", v, a, unit_bits, out_units), trials)
    mask = (1 << (out_units * unit_bits)) - 1
    assert got == [(v << (a * unit_bits)) & mask for v, a in trials]


def test_select_word_reads_zero_beyond_the_value():
    trials = _trials(48, 3, 7)
    got = _simulate(48, 3, lambda m, v, a: select_word(m, "w", v, a, 16), trials)
    assert got == [(v >> (16 * a)) & 0xFFFF for v, a in trials]


def test_byte_mask_sets_the_bytes_from_low_to_high():
    trials = [(low, high) for low in range(16) for high in range(16)]     # every pair, beyond the 10 bits too
    got = _simulate(4, 4, lambda m, low, high: byte_mask(m, "mask", low, high, 10), trials)
    assert got == [sum(1 << i for i in range(10) if low <= i < high) for low, high in trials]
