"""`aipu bench rtl`: the RTL System on each simulator: simulated cycles per wall second, and what the units
achieve on test layers (MAC utilisation of the array, WDEC bins per cycle when a layer decodes weights).

Each workload is a program with its memory image; it runs on the interpreter (the expected bytes) and on
every backend. A workload is a function returning (program, memory, interpreter result) and a unit's figure is
a function of (workload, RTL result): adding a unit's measurement is adding one entry to ``FIGURES``.
Verilog builds are cached, so their compile time is reported once and excluded from the rates.
"""
from __future__ import annotations

import os
import time

import numpy as np

# (name, channels in, size, channels out, kernel, groups): small enough for Amaranth's simulator.
LAYERS = (("conv3x3_16x8", 16, 8, 16, 3, 1), ("conv1x1_32x8", 32, 8, 32, 1, 1), ("dw3x3_16x8", 16, 8, 16, 3, 16))
# Real network layers, on Verilator only (hundreds of thousands of cycles): ResNet-18's layer2 3x3 conv and a
# MobileNet depthwise one.
VERILATOR_LAYERS = (("resnet18_l2_3x3_128x28", 128, 28, 128, 3, 1), ("mobilenet_dw3x3_128x28", 128, 28, 128, 3, 128))
VERILATOR_ONLY = {spec[0] for spec in VERILATOR_LAYERS}
BACKENDS_VARIABLE = "AIPU_BENCH_RTL_BACKENDS"   # e.g. "verilator" to skip the slow ones
MAX_CYCLES = 2_000_000


def _layer(name: str, channels: int, size: int, out_channels: int, kernel: int, groups: int):
    from aipu.compiler.tiling import lower_conv_layer, shaped_layer
    from aipu.sim.interpreter import run as interpret

    lowered = lower_conv_layer(shaped_layer(np.random.default_rng(0), channels, size, out_channels, kernel,
                                            groups=groups))
    memory = lowered.memory()
    return lowered.program, memory, interpret(lowered.program, memory.copy())


def mac_utilisation(program, expected, result) -> dict:
    """MACs done over what the array could do in the CONV unit's busy cycles and in the whole run."""
    from aipu.sim.machine.isa import Unit

    config = program.config
    per_cycle = config.mac.rows * config.mac.cols
    busy = sum(result.command_cycles(Unit.CONV))
    macs = expected.stats.macs
    return {"macs": macs, "conv_cycles": busy,
            "of_conv_cycles": round(macs / (busy * per_cycle), 4) if busy else None,
            "of_all_cycles": round(macs / (result.total_cycles * per_cycle), 4) if result.total_cycles else None}


def wdec_bins_per_cycle(program, expected, result) -> dict | None:
    """Decoded weight bytes (one bin each) per WDEC busy cycle, for workloads that decode weights."""
    from aipu.sim.machine.isa import Unit

    busy = sum(result.command_cycles(Unit.WDEC))
    moved = sum(count for path, count in expected.stats.bytes_moved.items() if path.startswith("WDEC"))
    return {"bins": moved, "wdec_cycles": busy, "bins_per_cycle": round(moved / busy, 3)} if busy else None


FIGURES = {"mac_utilisation": mac_utilisation, "wdec_bins_per_cycle": wdec_bins_per_cycle}


def _backends() -> list[str]:
    from aipu.sim.cosim.cocotb_run import BACKENDS

    chosen = os.environ.get(BACKENDS_VARIABLE)
    return [name for name in chosen.split(",") if name] if chosen else list(BACKENDS)


def run() -> dict:
    from aipu.sim.cosim.cocotb_run import run_on
    from aipu.sim.cosim.result import first_mismatch
    from aipu.sim.cosim.verilog import available_units, get_build

    units = list(available_units().values())
    backends = _backends()
    verilog = [backend for backend in backends if backend != "amaranth"]
    workloads = {spec[0]: _layer(*spec) for spec in LAYERS + (VERILATOR_LAYERS if "verilator" in backends else ())}
    report = {"units": sorted(cls.UNIT.name for cls in units), "layers": {}, "builds": {}}
    shape = (max(len(q) for program, _, _ in workloads.values() for q in program.queues.values()),
             max(memory.dram.size for _, memory, _ in workloads.values()))
    for backend in verilog:       # compile (or find) the one build every layer runs on first: not part of the rates
        started = time.perf_counter()
        build = get_build(next(iter(workloads.values()))[0].config, units, program_depth=shape[0],
                          dram_bytes=shape[1], simulator=backend)
        report["builds"][backend] = {"seconds": round(time.perf_counter() - started, 1),
                                     "program_depth": build.program_depth, "dram_bytes": build.dram_bytes}
    for name, (program, memory, expected) in workloads.items():
        entry = report["layers"].setdefault(name, {"commands": len(program), "macs": expected.stats.macs})
        for backend in backends:
            if backend != "verilator" and name in VERILATOR_ONLY:
                continue
            started = time.perf_counter()
            try:
                result = run_on(backend, program, memory, units, max_cycles=MAX_CYCLES, build_at_least=shape)
            except Exception as exc:    # a unit still in progress must not hide the other backends' numbers
                entry[backend] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
                continue
            seconds = time.perf_counter() - started
            entry[backend] = {
                "cycles": result.total_cycles, "wall_s": round(seconds, 3), "run_s": round(result.run_seconds, 3),
                "cycles_per_s": round(result.total_cycles / result.run_seconds) if result.run_seconds else None,
                "cycles_per_wall_s": round(result.total_cycles / seconds), "done": result.done,
                "errors": [str(error) for error in result.errors],
                "first_mismatch": str(mismatch) if (mismatch := first_mismatch(program, expected, result)) else None,
                **{figure: measure(program, expected, result) for figure, measure in FIGURES.items()},
            }
    return report
