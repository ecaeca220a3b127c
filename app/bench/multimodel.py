"""`aipu bench multimodel`: T/AI 115.1-2021 §7.1 multi-model compression run on the NPU (docs/multimodel.md,
"Figures").

Three task variants of the digits CNN (app/models/multi_digits.py: digits, shifted, mirrored), made per method:
* ``separate``: each task fine-tuned alone, no sharing (the reference);
* ``sharing s``: Method 1 training (§9.3.1) with the first s of each conv layer's filters shared (the Gemm
  specific), compiled with tiles breaking there and merged onto one DRAM image (compiler/multi_model.py);
* ``residual n``: the separately fine-tuned tasks as the demo model plus an n-bit k-means difference per layer,
  centres trained with cluster-mean gradients (§9.3.2), each compiled from its reconstructed weights.

Per method: the weights the model set stores (float32, as a .tai holds them: shared parts once; residual:
the base once, per model centres, n-bit indices and biases), the int8 constant bytes on the NPU, the DRAM bytes
of the separate images and of the merged one, the bytes a switch to each model reloads, MACs and cycles (the
cycle model, one input, alone and on the merged image), top-1 of each model (float and int8 NPU) on the 360
held-out images, and every merged program checked bit for bit against its own (interpreter = golden).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

SHARED_FRACTIONS = (0.25, 0.5, 0.75)
RESIDUAL_BITS = (2, 4, 8)
CONV_FILTERS = {"conv1": 16, "conv2": 32, "conv3": 32}


def _float_bytes(arrays) -> int:
    return int(sum(np.asarray(a).size * 4 for a in arrays))


def _npu(models: list[dict], folder: Path, name: str, slices: dict[str, int], data: dict) -> dict:
    """The models compiled together and merged: sizes, cycles, top-1, bit-exactness."""
    from aipu.app.cli_multimodel import check_bit_exact
    from aipu.app.models.multi_digits import TASKS, task_labels
    from aipu.app.models.train_digits import to_onnx
    from aipu.compiler.driver import evaluate
    from aipu.compiler.lowering.memory import store_tensor
    from aipu.compiler.multi_model import compile_models, merge
    from aipu.sim.cycle import simulate
    from aipu.sim.interpreter import prepare
    from aipu.sim.machine.memory import Memory

    paths = []
    for task, params in zip(TASKS, models):
        paths.append(folder / f"{name}_{task}.onnx")
        onnx.save(to_onnx(params), paths[-1])
    members = compile_models(paths, data["calibration"], k_boundaries=slices, names=list(TASKS))
    merged = merge([member.network for member in members])
    check_bit_exact(members, merged, data["calibration"], samples=2)
    rows = []
    sample = np.load(data["calibration"])["image"][:1]
    for index, (task, member) in enumerate(zip(TASKS, members)):
        network, qmodel = member.network, member.qmodel
        x = qmodel.quantize_inputs({"image": sample})
        alone = simulate(network.program, network.memory(x))
        dram = merged.dram.copy()
        store_tensor(dram, merged.address(index, network.plan.regions["image"][0]), x["image"])
        together = simulate(merged.programs[index], Memory.create(network.program.config, dram))
        result = prepare(network.program, network.dram.size).run(network.memory(x))
        output = qmodel.outputs[0]
        evaluation = evaluate(member.graph, qmodel, {"image": data["images"]}, task_labels(task, data["labels"]))
        rows.append({"task": task, "macs": int(alone.macs), "cycles": int(alone.total_cycles),
                     "cycles_on_merged_image": int(together.total_cycles),
                     "switch_bytes": merged.figures["models"][index]["switch_bytes"],
                     "float_top1": round(evaluation["float_top1"], 4), "npu_top1": round(evaluation["npu_top1"], 4),
                     "interpreter_equals_golden": bool(np.array_equal(network.read(result.memory, output),
                                                                      qmodel.run(x)[output]))})
    figures = merged.figures
    return {"npu_weight_bytes": int(sum(m["constant_bytes"] for m in figures["models"]) - (len(members) - 1)
                                    * figures["shared_bytes"]),
            **_weight_figures(members, merged),
            "separate_dram_bytes": figures["separate_dram_bytes"], "merged_dram_bytes": figures["merged_dram_bytes"],
            "shared_dram_bytes": figures["shared_bytes"], "merged_programs_bit_exact": True, "models": rows}


def _weight_figures(members, merged) -> dict:
    """The models' int8 weight bytes, the DRAM their weight regions take in the separate images, and on the
    merged one (a byte several models share counted once)."""
    from aipu.app.bench.pruning import weight_dram_bytes, weight_regions
    from aipu.compiler.driver import weight_sizes

    placed = {merged.address(index, address) for index, member in enumerate(members)
              for start, size in weight_regions(member.network.plan) for address in range(start, start + size)}
    return {"int8_weight_bytes": int(sum(weight_sizes(member.qmodel)["bytes"] for member in members)),
            "separate_weight_dram_bytes": sum(weight_dram_bytes(member.network.plan) for member in members),
            "merged_weight_dram_bytes": len(placed)}


def _sharing(data: dict, folder: Path, fraction: float) -> dict:
    from aipu.app.models.multi_digits import shared_training

    slices = {layer: int(count * fraction) for layer, count in CONV_FILTERS.items()}
    models = shared_training(data["train_images"], data["train_labels"], slices)
    weights = [models[0][f"{layer}.{part}"][:cut] for layer, cut in slices.items() for part in ("weight", "bias")]
    specific = [m[key][slices.get(key.split(".")[0], 0):] for m in models for key in m]
    return {"slice_indicator": slices, "weight_bytes": _float_bytes(weights) + _float_bytes(specific),
            **_npu(models, folder, f"share{fraction}", slices, data)}


def _residual(data: dict, folder: Path, targets: list[dict], n: int) -> dict:
    from aipu.app.models.multi_digits import LAYERS, TASKS, residual_training, task_labels
    from aipu.app.models.prune_digits import load_params

    base = load_params()
    records, models = [], []
    for task, target in zip(TASKS, targets):
        record, params = residual_training(base, target, data["train_images"],
                                           task_labels(task, data["train_labels"]), n)
        records.append(record)
        models.append(params)
    stored = _float_bytes(base[f"{layer}.weight"] for layer in LAYERS) + sum(
        r.centre_bytes() + r.index_bytes() for r in records) + _float_bytes(
        m[f"{layer}.bias"] for m in models for layer in LAYERS)
    return {"bits": n, "weight_bytes": stored, **_npu(models, folder, f"residual{n}", {}, data)}


def task_data(folder: Path) -> dict:
    """The training split, the calibration file and the held-out images and labels the task variants use."""
    from aipu.app.models.train_digits import DATA_PATH, stored_split

    train_images, train_labels, eval_images, eval_labels = stored_split()
    calibration = folder / "calibration.npz"
    np.savez(calibration, image=np.load(DATA_PATH)["calibration_images"])
    return {"train_images": train_images, "train_labels": train_labels, "calibration": calibration,
            "images": eval_images.astype(np.float32), "labels": eval_labels}


def sharing(folder: Path, fraction: float) -> dict:
    """One `sharing` method measured on its own (`aipu bench compression`)."""
    return _sharing(task_data(folder), folder, fraction)


def run() -> dict:
    from aipu.app.models.multi_digits import fine_tuned

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        data = task_data(folder)
        separate = fine_tuned(data["train_images"], data["train_labels"])
        methods = {"separate": {"weight_bytes": _float_bytes(v for m in separate for v in m.values()),
                                **_npu(separate, folder, "separate", {}, data)}}
        for fraction in SHARED_FRACTIONS:
            methods[f"sharing {fraction:.0%}"] = _sharing(data, folder, fraction)
        for n in RESIDUAL_BITS:
            methods[f"residual n={n}"] = _residual(data, folder, separate, n)
    return {"model": "digits CNN (app/models/digits_cnn.onnx), 3 task variants (app/models/multi_digits.py)",
            "top1_images": int(data["labels"].size), "methods": methods}
