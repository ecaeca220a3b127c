"""The benchmarks' helpers (app/bench/): the weight sets they time and the statistics they print."""
from __future__ import annotations

import numpy as np

from aipu.app.bench.codec import SHAPES, order0_entropy_bits, trained_like_weights


def test_benchmark_helpers():
    assert order0_entropy_bits(np.array([0, 0, 1, 1])) == 4.0
    weights = trained_like_weights()
    assert {name: w.shape for name, w in weights.items()} == SHAPES
    assert all((np.abs(w).reshape(w.shape[0], -1).max(axis=1) == 0).any() for w in weights.values())


def test_unit_rates_compare_every_unit_and_report_its_figures():
    """The per-unit part of `aipu bench rtl` on Amaranth's simulator (the bench itself runs the Verilog ones);
    SMALL's 1 KiB WEIGHT buffer leaves out the demo model's weights."""
    from aipu.app.bench.rtl import unit_rates
    from aipu.sim.cosim.stimulus import RANDOM
    from tests.rtl.configs import SMALL

    rates = unit_rates(["amaranth"], SMALL, commands=3)
    assert set(rates) == set(RANDOM)
    for name, entry in rates.items():
        run = entry["amaranth"]
        assert run["problems"] == [] and run["cycles"] > 0 and run["cycles_per_s"] > 0, (name, run)
    assert rates["conv"]["amaranth"]["mac_utilisation"]["macs"] > 0
    wdec = rates["wdec"]["amaranth"]["wdec"]
    assert wdec["weights"] > 0 and 0 < wdec["bins_per_cycle"] <= 1.0
