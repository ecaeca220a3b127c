"""`aipu bench cycle`: the cycle model's own cost (wall time, peak memory) and what it finds, on the whole
ResNet-18-shaped program of `aipu bench compile` and on the embedded demo network. Goal: under 2 s wall for
the ResNet-18-shaped program on one core (docs/cycle-model.md)."""
from __future__ import annotations

import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

GOAL_SECONDS = 2.0
CALIBRATION_SAMPLES = 2


def measure(program, memory, repeats: int = 3) -> dict:
    """The best wall time of ``repeats`` simulations (one DRAM shared by the DMA units), the peak of Python
    allocations in one more, and the simulated figures."""
    from aipu.sim.cycle import simulate

    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = simulate(program, memory)
        seconds.append(time.perf_counter() - started)
    tracemalloc.start()
    simulate(program, memory)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    total = result.total_cycles
    return {"commands": len(program), "total_cycles": total,
            "time_at_clock_ms": round(total / program.config.clock_mhz / 1e3, 3),
            "mac_utilisation": round(result.mac_utilisation, 4),
            "busy_cycles": {unit.name: cycles for unit, cycles in result.busy.items() if cycles},
            "dram_model": result.dram,
            "dram_stall_cycles": {unit.name: cycles for unit, cycles in result.dram_stall.items() if cycles},
            "simulate_s": round(min(seconds), 3), "peak_python_mib": round(peak / 2 ** 20, 2)}


def run() -> dict:
    import onnx

    from aipu.app.models.synthetic import resnet18_shaped
    from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH
    from aipu.compiler.driver import compile_model
    from aipu.sim.machine.memory import Memory

    rng = np.random.default_rng(0)
    figures = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        onnx.save(resnet18_shaped(), root / "resnet18.onnx")
        np.savez(root / "resnet18.npz", image=rng.normal(0, 1, (CALIBRATION_SAMPLES, 3, 224, 224)).astype(np.float32))
        np.savez(root / "digits.npz", images=np.load(DATA_PATH)["calibration_images"])
        for name, model, calibration in (("resnet18_shaped", root / "resnet18.onnx", root / "resnet18.npz"),
                                         ("demo_digits", MODEL_PATH, root / "digits.npz")):
            network = compile_model(model, calibration).network     # cycles do not depend on the input data
            figures[name] = measure(network.program, Memory.create(network.program.config, network.dram))
    return {"goal_s": GOAL_SECONDS, "programs": figures,
            "within_goal": figures["resnet18_shaped"]["simulate_s"] < GOAL_SECONDS}
