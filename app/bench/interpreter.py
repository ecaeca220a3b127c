"""`aipu bench interpreter`: lower each layer kind of `aipu bench golden` (ResNet-18 dense, strided and 1x1
layers, the 3-channel stem, MobileNet depthwise 3x3/5x5 at stride 1 and 2, grouped, dilated), interpret it with
hazard checking on, check it against the golden model, and time the golden model on the same layer in the same
run (one BLAS thread for both). Goal: the interpreter at no less than half the golden model's speed
(``interpreter_over_golden`` at most 2). ``interpret_s`` is one run of a prepared program (checked once:
fields, bounds, races, deadlock) on the layer's memory image in place, as a run on an image built for it
costs (the demo's, `aipu compile --input`'s); ``interpret_copy_s`` the same run on a copy of the image, which
leaves the caller's image as it was; ``first_run_s`` is `run()` on the bare program, preparation and copy
included, as a single run costs. The timed in-place runs repeat on one image: the output read after them is
checked against the golden model too.
"""
from __future__ import annotations

import math
import time

import numpy as np

GOAL_MAX_RATIO = 2.0     # the interpreter at no less than half the golden model's speed


def _layer(rng, c: int, h: int, k: int, kernel: int, stride: int, pad: int, groups: int, dilation: int):
    from aipu.compiler.lowering.conv_layer import ConvLayer

    return ConvLayer(x=rng.integers(-128, 128, (1, c, h, h)).astype(np.int8),
                     w=rng.integers(-128, 128, (k, c // groups, kernel, kernel)).astype(np.int8),
                     bias=rng.integers(-5000, 5000, k).astype(np.int32), multiplier=np.full(k, 30000),
                     shift=np.full(k, 30), x_zero_point=3, stride=(stride, stride), padding=(pad,) * 4,
                     dilation=(dilation, dilation), groups=groups)


def run() -> dict:
    from aipu.app.bench.golden import LAYERS, best_seconds, best_seconds_paired
    from aipu.app.threads import pinned_threads
    from aipu.compiler.lowering.conv_layers import lower_conv_layer
    from aipu.sim.interpreter import prepare
    from aipu.sim.interpreter import run as interpret

    rng = np.random.default_rng(0)
    results, ratios = {}, []
    with pinned_threads(1):
        for name, *shape in LAYERS:
            layer = _layer(rng, *shape)
            started = time.perf_counter()
            lowered = lower_conv_layer(layer)
            lowered_s = time.perf_counter() - started
            memory = lowered.memory()
            result = interpret(lowered.program, memory)
            exact = bool(np.array_equal(lowered.read_output(result.memory), layer.reference()))
            prepared = prepare(lowered.program, memory.dram.size)
            # up to 50 rounds of both in turn: a depthwise layer is 0.1-0.4 ms, and the ratio of two separate
            # bests of 10 moved by a fifth between runs
            work = memory.copy()
            interpret_s, golden_s = best_seconds_paired(
                (lambda: prepared.run(work, in_place=True), layer.reference), budget=2.0, max_reps=50)
            exact &= bool(np.array_equal(lowered.read_output(work), layer.reference()))
            copy_s = best_seconds(lambda: prepared.run(memory), budget=2.0, max_reps=20)
            first_run_s = best_seconds(lambda: interpret(lowered.program, memory), budget=2.0, max_reps=5)
            unchecked_s = best_seconds(lambda: interpret(lowered.program, memory, check_hazards=False),
                                        budget=2.0, max_reps=5)
            ratios.append(interpret_s / golden_s)
            results[name] = {"commands": len(lowered.program), "macs": result.stats.macs,
                             "dram_bytes": sum(result.stats.bytes_moved.values()), "lower_s": round(lowered_s, 6),
                             "interpret_s": round(interpret_s, 6), "interpret_copy_s": round(copy_s, 6),
                             "first_run_s": round(first_run_s, 6),
                             "first_run_no_hazard_check_s": round(unchecked_s, 6),
                             "golden_s": round(golden_s, 6),
                             "interpreter_over_golden": round(interpret_s / golden_s, 2),
                             "mmacs_per_s": round(result.stats.macs / interpret_s / 1e6, 1), "bit_exact": exact}
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return {"threads": 1, "layers": results, "geomean_interpreter_over_golden": round(geomean, 2),
            "goal_max_ratio": GOAL_MAX_RATIO,
            "layers_over_goal": [name for name, row in results.items()
                                 if row["interpreter_over_golden"] > GOAL_MAX_RATIO]}
