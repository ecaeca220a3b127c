"""`aipu bench interpreter`: lower ResNet-like conv layers, interpret them, check against the golden model."""
from __future__ import annotations

import time

import numpy as np

# (name, channels in, size, channels out, kernel, groups)
LAYERS = (("conv3x3_64x56", 64, 56, 64, 3, 1), ("conv3x3_256x14", 256, 14, 256, 3, 1),
          ("dw3x3_128x28", 128, 28, 128, 3, 128), ("conv1x1_512x7", 512, 7, 2048, 1, 1))


def run() -> dict:
    from aipu.compiler.tiling import ConvLayer, lower_conv_layer
    from aipu.sim.interpreter import run as interpret

    rng = np.random.default_rng(0)
    results = {}
    for name, c, size, k, kernel, groups in LAYERS:
        layer = ConvLayer(x=rng.integers(-128, 128, (1, c, size, size)).astype(np.int8),
                          w=rng.integers(-128, 128, (k, c // groups, kernel, kernel)).astype(np.int8),
                          bias=np.zeros(k, np.int32), multiplier=np.full(k, 30000), shift=np.full(k, 30),
                          padding=(kernel // 2,) * 4, groups=groups)
        started = time.perf_counter()
        lowered = lower_conv_layer(layer)
        lowered_s = time.perf_counter() - started
        timings = {}
        for hazards in (True, False):
            started = time.perf_counter()
            result = interpret(lowered.program, lowered.memory(), check_hazards=hazards)
            timings[hazards] = time.perf_counter() - started
        exact = bool(np.array_equal(lowered.read_output(result.memory), layer.reference()))
        results[name] = {"commands": len(lowered.program), "macs": result.stats.macs,
                         "dram_bytes": sum(result.stats.bytes_moved.values()),
                         "lower_s": round(lowered_s, 4), "interpret_s": round(timings[True], 4),
                         "interpret_no_hazard_check_s": round(timings[False], 4),
                         "mmacs_per_s": round(result.stats.macs / timings[True] / 1e6, 1), "bit_exact": exact}
    return {"layers": results}
