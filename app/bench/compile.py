"""`aipu bench compile`: compile a ResNet-18-shaped ONNX graph (224x224, random weights) and report each stage's
time and the program's size; then run the whole program once on the interpreter next to the quantized model
on the golden units (one BLAS thread for both), and check they agree bit for bit; the same with the weights
compressed (`--compress`). Last, `aipu compile` of a MobileNetV3-Large-shaped graph at 224x224 with 64
calibration samples as a user runs it, a process of its own: its wall time and peak memory against the goals
(60 s, 1 GiB)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CALIBRATION_SAMPLES = 8
MOBILENET_SAMPLES = 64
MOBILENET_GOALS = {"wall_s": 60.0, "peak_rss_mib": 1024.0}


def run() -> dict:
    import onnx

    from aipu.app.bench.golden import best_seconds
    from aipu.app.models.synthetic import resnet18_shaped
    from aipu.app.threads import pinned_threads
    from aipu.compiler.calibrate import collect, read_samples
    from aipu.compiler.driver import REPORT_SAMPLES, layer_report
    from aipu.compiler.graph import load_graph
    from aipu.compiler.lowering.network import lower_model
    from aipu.compiler.normalize import normalize
    from aipu.compiler.quantize import quantize_graph
    from aipu.sim.interpreter import prepare

    rng = np.random.default_rng(0)
    seconds = {}
    with tempfile.TemporaryDirectory() as folder, pinned_threads(1):
        model_path, calibration_path = Path(folder) / "resnet18.onnx", Path(folder) / "calibration.npz"
        onnx.save(resnet18_shaped(), model_path)
        np.savez(calibration_path, image=rng.normal(0, 1, (CALIBRATION_SAMPLES, 3, 224, 224)).astype(np.float32))

        def timed(stage: str, func):
            started = time.perf_counter()
            value = func()
            seconds[stage] = round(time.perf_counter() - started, 3)
            return value

        graph = timed("front_end_s", lambda: normalize(load_graph(model_path)))
        samples = timed("read_calibration_s", lambda: read_samples(calibration_path, {"image": graph.shapes["image"]}))
        stats = timed("calibrate_s", lambda: collect(graph, samples))
        qmodel = timed("quantize_s", lambda: quantize_graph(graph, stats))
        network = timed("lower_s", lambda: lower_model(qmodel))
        timed("layer_report_s", lambda: layer_report(graph, qmodel, {"image": samples["image"][:REPORT_SAMPLES]}))
        program_path = Path(folder) / "program.aipu"
        network.program.write(program_path)
        program_bytes = program_path.stat().st_size

        x = qmodel.quantize_inputs({"image": samples["image"][:1]})
        prepared = timed("prepare_s", lambda: prepare(network.program, network.dram.size))
        memory = network.memory(x)
        result = prepared.run(memory)
        output = qmodel.outputs[0]
        exact = bool(np.array_equal(network.read(result.memory, output), qmodel.run(x)[output]))
        interpret_s = best_seconds(lambda: prepared.run(memory), budget=3.0, max_reps=3)
        golden_s = best_seconds(lambda: qmodel.run(x), budget=3.0, max_reps=3)
        ort_s = _onnxruntime_seconds(model_path, {"image": samples["image"][:1]})
        compressed = _compressed(qmodel, x, timed)
    compile_s = sum(value for key, value in seconds.items() if key not in ("prepare_s", "lower_compressed_s"))
    return {"model": "resnet18_shaped 1x3x224x224, 1000 classes", "calibration_samples": CALIBRATION_SAMPLES,
            "operators": len(qmodel.ops), "commands": len(network.program),
            "commands_per_unit": {unit.name: len(queue) for unit, queue in network.program.queues.items() if queue},
            "program_bytes": program_bytes, "dram_image_bytes": int(network.dram.size),
            "weight_bytes": int(sum(len(blob) for blob in network.plan.blobs.values())),
            "stage_seconds": seconds, "compile_s": round(compile_s, 3),
            "whole_network": {"macs": result.stats.macs, "interpret_s": round(interpret_s, 3),
                              "golden_s": round(golden_s, 3),
                              "interpreter_over_golden": round(interpret_s / golden_s, 2), "bit_exact": exact,
                              "onnxruntime_float_s": round(ort_s, 3),
                              "golden_over_onnxruntime": round(golden_s / ort_s, 2)},
            "compressed": compressed, "mobilenetv3_cli": _mobilenet_cli()}


def _onnxruntime_seconds(model_path: Path, feeds: dict[str, np.ndarray]) -> float:
    """The best time of onnxruntime on the float model, one thread: the anchor of the functional path (the
    quantized model on the golden units is what `aipu compile --eval` runs a data set through)."""
    import onnxruntime

    from aipu.app.bench.golden import best_seconds

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    return best_seconds(lambda: session.run(None, feeds), budget=3.0, max_reps=3)


def _compressed(qmodel, x, timed) -> dict:
    """The same quantized model lowered with ``--compress``: the time to encode every weight tile, what WDEC
    decodes (random weights are close to incompressible), and the interpreter: its first run decodes every
    tile, later runs reuse the decoded levels."""
    from aipu.app.bench.golden import best_seconds
    from aipu.compiler.lowering.network import lower_model
    from aipu.sim.interpreter import prepare

    network = timed("lower_compressed_s", lambda: lower_model(qmodel, compress="all"))
    packed = network.manifest()["weight_compression"]
    prepared = prepare(network.program, network.dram.size)
    memory = network.memory(x)
    started = time.perf_counter()
    result = prepared.run(memory)
    first_s = time.perf_counter() - started
    output = qmodel.outputs[0]
    return {"tiles": packed["tiles"], "decoded_tiles": packed["decoded_tiles"],
            "decoded_weight_bytes": packed["weight_bytes"], "stream_bytes": packed["stream_bytes"],
            "bits_per_weight": packed["bits_per_weight"], "dram_image_bytes": int(network.dram.size),
            "interpret_first_s": round(first_s, 3),
            "interpret_s": round(best_seconds(lambda: prepared.run(memory), budget=3.0, max_reps=3), 3),
            "bit_exact": bool(np.array_equal(network.read(result.memory, output), qmodel.run(x)[output]))}


def _mobilenet_cli() -> dict:
    """`aipu compile` of the MobileNetV3-Large-shaped graph (64 samples) in a child process, timed whole; its
    peak resident memory from the kernel's accounting of that child alone."""
    import onnx

    from aipu.app.models.synthetic import mobilenetv3_shaped

    with tempfile.TemporaryDirectory() as folder:
        model, calibration = Path(folder) / "mobilenetv3.onnx", Path(folder) / "calibration.npz"
        onnx.save(mobilenetv3_shaped(), model)
        samples = np.random.default_rng(0).normal(0, 1, (MOBILENET_SAMPLES, 3, 224, 224)).astype(np.float32)
        np.savez(calibration, image=samples)
        command = [sys.executable, "-m", "aipu.app.cli", "compile", str(model), "--calib", str(calibration),
                   "-o", str(Path(folder) / "program"), "--quiet"]
        with open(Path(folder) / "stderr.txt", "w+") as stderr:
            started = time.perf_counter()
            child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.perf_counter() - started
            child.returncode = os.waitstatus_to_exitcode(status)
            if child.returncode != 0:
                stderr.seek(0)
                raise RuntimeError(f"aipu compile of the MobileNetV3-shaped graph failed: {stderr.read()[-400:]}")
    figures = {"wall_s": round(wall, 2), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}
    return {"model": "mobilenetv3_shaped 1x3x224x224, 1000 classes", "calibration_samples": MOBILENET_SAMPLES,
            **figures, "goals": MOBILENET_GOALS,
            "within_goals": all(figures[key] < goal for key, goal in MOBILENET_GOALS.items())}
