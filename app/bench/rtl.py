"""`aipu bench rtl`: the RTL on each simulator: simulated cycles per wall second of each unit alone and of the
whole System on lowered layers, and what the units achieve on those layers (MAC utilisation of the array, WDEC
bins per cycle when a layer decodes weights).

Per unit: each unit family (``aipu.sim.cosim.stimulus.RANDOM``) runs ``UNIT_COMMANDS`` random commands on a
System of only its own units, on the Verilog simulators (Amaranth's simulator is timed by the layers); every run
is also compared with the interpreter and the cycle formulas, so a rate never comes from a wrong run unnoticed.

Each layer workload is a program with its memory image; it runs on the interpreter (the expected bytes) and on
every backend. A figure is a function of (program, initial memory, interpreter result, RTL result) returning
None where it does not apply: adding a unit's measurement is adding one entry to ``FIGURES``, and it is taken on
the layers and on the unit runs. Verilog builds are cached; their compile time is reported apart from the rates.

The real layers also run on the NPU top, on a Verilator model of one thread and of two, in rounds with the
System harness (``npu_layers``): each median rate over the System's on the same layer in the same run is the
anchor that makes the figure comparable across machines.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
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
NPU_ROUNDS = 3           # rounds of the real layers on the NPU top and the System, in turn (npu_rates)
CONV_TILES = "conv_resnet18_l2_tiles"     # the MAC array alone on the first Verilator layer's CONV commands
UNIT_COMMANDS = 250       # per unit family: long enough that the simulator's start and stop do not set the rate
# (the slow test_a_thousand_random_commands_per_unit_on_verilog uses the same builds)


def _layer(name: str, channels: int, size: int, out_channels: int, kernel: int, groups: int):
    from aipu.app.sample_layers import shaped_layer
    from aipu.compiler.lowering.conv_layers import lower_conv_layer
    from aipu.sim.interpreter import run as interpret

    lowered = lower_conv_layer(shaped_layer(np.random.default_rng(0), channels, size, out_channels, kernel,
                                            groups=groups), dwconv=False)     # CONV alone, as docs/rtl-cosim.md measured
    memory = lowered.memory()
    return lowered.program, memory, interpret(lowered.program, memory.copy())


def demo_model_streams() -> list[tuple[bytes, tuple[int, ...]]]:
    """The embedded digits CNN's conv kernels, quantised to int8 per layer and encoded in the npu profile: WDEC's
    workload of real weights."""
    import onnx
    from onnx import numpy_helper

    from aipu.app.models.train_digits import MODEL_PATH
    from aipu.sim.cosim.stimulus.wdec import layer_stream

    model = onnx.load(MODEL_PATH)
    initializers = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    streams = []
    for node in model.graph.node:
        if node.op_type == "Conv":
            weights = initializers[node.input[1]]
            levels = np.clip(np.round(weights / np.abs(weights).max() * 127), -128, 127).astype(np.int8)
            streams.append((layer_stream(levels), levels.shape))
    return streams


def mac_utilisation(program, memory, expected, result) -> dict | None:
    """MACs done over what the array could do in the CONV unit's busy cycles and in the whole run."""
    from aipu.sim.machine.isa import Unit

    config = program.config
    per_cycle = config.mac.rows * config.mac.cols
    busy = sum(result.command_cycles(Unit.CONV))
    macs = expected.stats.macs
    if not busy:
        return None
    return {"macs": macs, "conv_cycles": busy, "of_conv_cycles": round(macs / (busy * per_cycle), 4),
            "of_all_cycles": round(macs / (result.total_cycles * per_cycle), 4)}


def wdec_throughput(program, memory, expected, result) -> dict | None:
    """Bins (the codec's count for each stream, the terminating bin included) and decoded weights per WDEC busy
    cycle."""
    from aipu.codec.npu_profile import decode_profile_compiled
    from aipu.sim.machine.isa import Opcode, Unit

    busy = sum(result.command_cycles(Unit.WDEC))
    if not busy:
        return None
    bins = weights = 0
    for command in program.queues[Unit.WDEC]:
        if command.opcode == Opcode.WDEC:
            stream = memory.dram[command.dram_addr:command.dram_addr + command.length].tobytes()
            shape = (command.out_c, command.in_c, command.k_h, command.k_w)
            bins += decode_profile_compiled(stream, shape).bins
            weights += int(np.prod(shape))
    return {"bins": bins, "weights": weights, "wdec_cycles": busy, "bins_per_cycle": round(bins / busy, 3),
            "weights_per_cycle": round(weights / busy, 3)}


FIGURES = {"mac_utilisation": mac_utilisation, "wdec": wdec_throughput}


def _widest_cascade(config):
    """``config`` with the most bins a cycle its WDEC key allows (issue 49's bins per cycle on real weights)."""
    from aipu.sim.machine.arch import WdecConfig

    key = next(f for f in dataclasses.fields(WdecConfig) if f.name == "bins_per_cycle")
    return dataclasses.replace(config, wdec=dataclasses.replace(config.wdec, bins_per_cycle=key.metadata["maximum"]))


def _backends() -> list[str]:
    from aipu.sim.cosim.cocotb_run import BACKENDS

    chosen = os.environ.get(BACKENDS_VARIABLE)
    return [name for name in chosen.split(",") if name] if chosen else list(BACKENDS)


def _rate(cycles: int, seconds: float) -> int | None:
    return round(cycles / seconds) if seconds else None


def unit_rates(backends: list[str], config=None, commands: int = UNIT_COMMANDS) -> dict:
    """Each unit family alone (default configuration unless ``config``), WDEC on the demo model's weights
    where they fit the WEIGHT buffer (on the configuration and on its widest cascade, ``_widest_cascade``),
    and on Verilator CONV on the ResNet-18 layer's tiles:
    build time, then simulated cycles per second of the free-running RTL (``run_s``) and per second of the whole
    call (``wall_s``: interpreter, preload and read-back included), what the comparison found (empty:
    bit-exact, every command on its formula) and the unit's figures."""
    from aipu.sim.cosim.stimulus import RANDOM, compare
    from aipu.sim.cosim.stimulus.conv import tiles_alone
    from aipu.sim.cosim.stimulus.wdec import streams_stimulus
    from aipu.sim.cosim.verilog import get_build
    from aipu.sim.machine.arch import DEFAULT, Buffer

    config = config or DEFAULT
    workloads = {family: draw(config, np.random.default_rng(0), commands) for family, draw in RANDOM.items()}
    demo = demo_model_streams()
    if max(int(np.prod(shape)) for _, shape in demo) <= config.buffer(Buffer.WEIGHT).bytes:
        workloads["wdec_demo_model"] = streams_stimulus(config, demo, np.random.default_rng(0))
        widest = _widest_cascade(config)
        if widest != config:
            workloads[f"wdec_demo_model_b{widest.wdec.bins_per_cycle}"] = streams_stimulus(widest, demo,
                                                                                        np.random.default_rng(0))
    if "verilator" in backends:    # a real layer's tiles: about 460k cycles, hours on Icarus
        workloads[CONV_TILES] = tiles_alone(_layer(*VERILATOR_LAYERS[0])[0], np.random.default_rng(0))
    depth = commands + 1       # one build per family, whatever share of the queues a program takes
    rates = {}
    for name, stimulus in workloads.items():
        entry = rates[name] = {"units": [cls.UNIT.name for cls in stimulus.units], "commands": stimulus.commands}
        for backend in backends:
            if name == CONV_TILES and backend != "verilator":
                continue
            started = time.perf_counter()
            if backend != "amaranth":
                get_build(stimulus.program.config, stimulus.units, program_depth=depth,
                          dram_bytes=stimulus.memory.dram.size, simulator=backend)
            built = time.perf_counter()
            comparison = compare(stimulus, backend, build_at_least=(depth, 0))
            seconds, result = time.perf_counter() - built, comparison.result
            entry[backend] = {"build_s": round(built - started, 1), "cycles": result.total_cycles,
                              "run_s": round(result.run_seconds, 3), "wall_s": round(seconds, 3),
                              "cycles_per_s": _rate(result.total_cycles, result.run_seconds),
                              "cycles_per_wall_s": _rate(result.total_cycles, seconds),
                              "problems": comparison.problems,
                              **{figure: value for figure, measure in FIGURES.items()
                                 if (value := measure(stimulus.program, stimulus.memory, comparison.expected,
                                                      result)) is not None}}
    return rates


def run() -> dict:
    from aipu.sim.cosim.cocotb_run import run_on
    from aipu.sim.cosim.result import first_mismatch
    from aipu.sim.cosim.verilog import available_units, get_build

    units = list(available_units().values())
    backends = _backends()
    verilog = [backend for backend in backends if backend != "amaranth"]
    report = {"unit_rates": unit_rates(verilog)}
    workloads = {spec[0]: _layer(*spec) for spec in LAYERS + (VERILATOR_LAYERS if "verilator" in backends else ())}
    report.update({"units": sorted(cls.UNIT.name for cls in units), "layers": {}, "builds": {}})
    shape = (max(len(q) for program, _, _ in workloads.values() for q in program.queues.values()),
             max(memory.dram.size for _, memory, _ in workloads.values()))
    for backend in verilog:       # compile (or find) the one build every layer runs on first: not part of the rates
        started = time.perf_counter()
        build = get_build(next(iter(workloads.values()))[0].config, units, program_depth=shape[0],
                          dram_bytes=shape[1], simulator=backend)
        report["builds"][backend] = {"seconds": round(time.perf_counter() - started, 1),
                                     "program_depth": build.program_depth, "dram_bytes": build.dram_bytes}
    if "verilator" in backends:
        report["npu_layers"] = npu_rates({name: workloads[name] for name in VERILATOR_ONLY}, units, shape,
                                         npu_threads())
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
                "cycles_per_s": _rate(result.total_cycles, result.run_seconds),
                "cycles_per_wall_s": _rate(result.total_cycles, seconds), "done": result.done,
                "errors": [str(error) for error in result.errors],
                "first_mismatch": str(mismatch) if (mismatch := first_mismatch(program, expected, result)) else None,
                **{figure: value for figure, measure in FIGURES.items()
                   if (value := measure(program, memory, expected, result)) is not None},
            }
    return report


def npu_threads() -> tuple[int, ...]:
    """The Verilator model thread counts the NPU layers run on: 1, and 2 where two cores exist."""
    return (1, 2) if (os.cpu_count() or 1) >= 2 else (1,)


def npu_rates(workloads: dict, units: list, system_shape: tuple[int, int], threads: tuple[int, ...] = (1,),
              rounds: int = NPU_ROUNDS) -> dict:
    """The real layers on the NPU top under Verilator (docs/rtl.md, "The NPU top"), started over AXI4-Lite, the
    commands fetched and the data moved through the one AXI master, against the System harness on the same layer.
    The NPU models: a plain build on one thread (``npu_plain``) and a profile-guided build on each thread count
    (``npu_threads_N``, trained on aipu.app.rtl_training's programs, none of them these layers). One build per
    model first (not part of the rates), then ``rounds`` rounds, each running every layer on the System and on
    each NPU model in turn, so that a machine's swings touch all alike. Per layer: the cycles, every round's
    simulated cycles per second, their medians, and each NPU model's median over the System's (``over_system``:
    the anchor that compares across machines)."""
    from aipu.app.rtl_run import training
    from aipu.sim.cosim.cocotb_run import run_on
    from aipu.sim.cosim.npu_verilog import build_npu, run_npu_verilog
    from aipu.sim.cosim.result import first_mismatch
    from aipu.sim.machine.program_image import build_image, with_image

    shape = (max(len(q) for program, _, _ in workloads.values() for q in program.queues.values()),
             max(with_image(program.config, memory.dram, build_image(program))[0].size
                 for program, memory, _ in workloads.values()))
    config = next(iter(workloads.values()))[0].config
    models = {"npu_plain": (1, None), **{f"npu_threads_{count}": (count, training(config)) for count in threads}}
    report = {"rounds": rounds, "build_s": {}}
    for name, (count, trained_on) in models.items():
        started = time.perf_counter()
        build_npu(config, dram_bytes=shape[1], trace_depth=shape[0], threads=count, training=trained_on)
        report["build_s"][name] = round(time.perf_counter() - started, 1)
    tops = {"system": lambda program, memory: run_on("verilator", program, memory, units, max_cycles=MAX_CYCLES,
                                                      build_at_least=system_shape)}
    for name, (count, trained_on) in models.items():
        tops[name] = (lambda program, memory, count=count, trained_on=trained_on: run_npu_verilog(
            program, memory, max_cycles=MAX_CYCLES, build_at_least=shape, threads=count, training=trained_on))
    for _ in range(rounds):
        for name, (program, memory, expected) in workloads.items():
            entry = report.setdefault(name, {"cycles": {}, "cycles_per_s": {top: [] for top in tops},
                                             "bit_exact": True, "errors": []})
            for top, run in tops.items():
                result = run(program, memory)
                entry["cycles"][top] = result.total_cycles
                entry["cycles_per_s"][top].append(_rate(result.total_cycles, result.run_seconds))
                entry["bit_exact"] &= result.done and first_mismatch(program, expected, result) is None
                entry["errors"] += [f"{top}: {error}" for error in result.errors]
    for name in workloads:
        entry = report[name]
        entry["median"] = {top: statistics.median(rates) for top, rates in entry["cycles_per_s"].items()}
        entry["over_system"] = {top: round(rate / entry["median"]["system"], 3)
                                for top, rate in entry["median"].items() if top != "system"}
    return report
