"""Every RTL unit that exists, together in one System, against the interpreter: random conv layers lowered by
the compiler (LOAD, CONV, REQUANT, LUT, STORE and whatever else it emits) must leave every buffer and DRAM
byte as the interpreter leaves them, on Amaranth's simulator and on the Verilog simulators ($AIPU_SIM)."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.compiler.tiling import lower_conv_layer, random_layer
from aipu.sim.cosim.cocotb_run import run_on, verilog_backends
from aipu.sim.cosim.result import first_mismatch
from aipu.sim.cosim.verilog import available_units
from aipu.sim.interpreter import run as interpret
from aipu.sim.machine.isa import Unit
from tests.rtl.configs import CONFIGS, SMALL

MAX_CYCLES = 1_000_000
BACKENDS = pytest.mark.parametrize("backend", ["amaranth", *verilog_backends()])
# A Verilog build of the System with every real unit takes about 1.5 minutes for SMALL (one xdist worker) and
# about 9 for DEFAULT: the default suite runs the real units on Verilog once, on SMALL; the rest is slow.


def check_layers(config, backend: str, seeds, **limits) -> dict:
    """Lower one random layer per seed, run it on the RTL and the interpreter; return the RTL result per seed."""
    units = available_units()
    results = {}
    for seed in seeds:
        rng = np.random.default_rng(seed)
        lowered = lower_conv_layer(random_layer(rng, with_lut=bool(seed % 2), **limits), config)
        used = {unit for unit, queue in lowered.program.queues.items() if queue}
        missing = used - set(units)
        if missing:     # only while a unit has not landed yet
            pytest.skip(f"no RTL yet for {sorted(u.name for u in missing)}, which the compiler emits")
        expected = interpret(lowered.program, lowered.memory())
        got = run_on(backend, lowered.program, lowered.memory(), list(units.values()), max_cycles=MAX_CYCLES)
        context = f"seed {seed} on {backend}: {got.errors or ''}"
        assert got.done and not got.errors and not got.token_error and not got.dram_faults, context
        mismatch = first_mismatch(lowered.program, expected, got)
        assert mismatch is None, f"{context}\n{mismatch}"
        assert all(len(got.cycles[unit]) == len(lowered.program.queues[unit]) for unit in Unit), context
        results[seed] = got
    return results


SMALL_LAYERS = {"seeds": [0, 1], "max_channels": 6, "max_size": 5}


def test_a_small_layer_is_bit_exact_on_amaranth():
    assert check_layers(SMALL, "amaranth", **SMALL_LAYERS)


@pytest.mark.parametrize("backend", verilog_backends())
def test_a_small_layer_is_bit_exact_on_verilog_cycle_for_cycle(backend):
    """Every real unit as Verilog: the interpreter's bytes, and Amaranth's cycles for every command."""
    verilog = check_layers(SMALL, backend, **SMALL_LAYERS)
    amaranth = check_layers(SMALL, "amaranth", **SMALL_LAYERS)
    for seed, result in verilog.items():
        assert (result.cycles, result.total_cycles) == (amaranth[seed].cycles, amaranth[seed].total_cycles), seed


@pytest.mark.slow
@BACKENDS
@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
def test_random_layers_are_bit_exact(config, backend):
    assert check_layers(config, backend, seeds=range(2, 12), max_channels=24, max_size=10)
