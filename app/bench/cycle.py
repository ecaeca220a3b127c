"""`aipu bench cycle`: the cycle model's own cost (wall time, peak memory) and what it finds, on the whole
ResNet-18-shaped program of `aipu bench compile` and on the embedded demo network. Goal: under 2 s wall for
the ResNet-18-shaped program on one core (docs/cycle-model.md).

It also times the MobileNetV3-shaped network on a 16x16 array and on 32x32 arrays, with DEFAULT's ports and
with ports widened with the array (``SCALED_32X32``). Goal: 32x32 at least 1.6 times faster than 16x16."""
from __future__ import annotations

import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

GOAL_SECONDS = 2.0
CALIBRATION_SAMPLES = 2
SCALING_GOAL = 1.6
# A 32x32 array fed as DEFAULT feeds 16x16: ACT and OUT ports (a row's or a column's bytes a cycle) and DRAM
# twice as wide, WEIGHT and ACC ports (a block of weights, a block of accumulators) four times.
SCALED_32X32 = {"mac": {"rows": 32, "cols": 32}, "dram": {"bytes_per_cycle": 32},
                "buffers": {"act": {"port_bytes": 32}, "out": {"port_bytes": 32}, "weight": {"port_bytes": 1024},
                            "acc": {"port_bytes": 256}}}


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
        scaling = array_scaling(root, rng)
    return {"goal_s": GOAL_SECONDS, "programs": figures,
            "within_goal": figures["resnet18_shaped"]["simulate_s"] < GOAL_SECONDS, "array_scaling": scaling}


def array_scaling(root: Path, rng: np.random.Generator) -> dict:
    """MobileNetV3-shaped cycles (224x224, shared DRAM) on 16x16, 32x32 and SCALED_32X32; quantized once."""
    import onnx

    from aipu.app.models.synthetic import mobilenetv3_shaped
    from aipu.compiler.driver import quantize_model
    from aipu.compiler.lowering.network import lower_model
    from aipu.sim.cycle import simulate
    from aipu.sim.machine.arch import DEFAULT, hardware_config_from_dict
    from aipu.sim.machine.memory import Memory

    model = mobilenetv3_shaped()
    onnx.save(model, root / "mobilenetv3.onnx")
    shape = (CALIBRATION_SAMPLES, 3, 224, 224)
    np.savez(root / "mobilenetv3.npz", **{model.graph.input[0].name: rng.normal(0, 1, shape).astype(np.float32)})
    _, qmodel, _ = quantize_model(root / "mobilenetv3.onnx", root / "mobilenetv3.npz")
    configs = {"16x16": DEFAULT, "32x32": hardware_config_from_dict({"mac": {"rows": 32, "cols": 32}}),
               "32x32_scaled_ports": hardware_config_from_dict(SCALED_32X32)}
    cycles = {}
    for name, config in configs.items():
        network = lower_model(qmodel, config)
        result = simulate(network.program, Memory.create(config, network.dram))
        cycles[name] = {"total_cycles": result.total_cycles, "mac_utilisation": round(result.mac_utilisation, 4)}
    speedup = cycles["16x16"]["total_cycles"] / cycles["32x32_scaled_ports"]["total_cycles"]
    return {"network": "mobilenetv3_shaped", "configurations": cycles, "scaled_ports": SCALED_32X32,
            "speedup_32x32": round(cycles["16x16"]["total_cycles"] / cycles["32x32"]["total_cycles"], 3),
            "speedup_32x32_scaled_ports": round(speedup, 3), "goal": SCALING_GOAL,
            "within_scaling_goal": speedup >= SCALING_GOAL}
