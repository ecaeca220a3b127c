"""`aipu bench structured`: T/AI 115.1-2021 §7.4 structured layers run on the NPU (docs/structured.md, "Figures").

The digits CNN (app/models/digits_cnn.onnx), fine-tuned FINE_TUNE_EPOCHS epochs on its training split from a
fixed seed (app/models/structured_digits.py), compiled with `aipu compile`'s defaults; per method: the int8
weight bytes, the DRAM bytes the weights take in the image, the DRAM bytes one inference moves, MACs and cycles
(cycle model, one input), top-1 of the int8 program on the 360 held-out images and whether the interpreter
equals the golden model. Block-circulant layers (every layer circ_size divides) are expanded on chip by LOAD;
low-rank layers compile as the convolutions their factors are.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

from aipu.sim.machine.isa import CIRC_SIZES

LOW_RANK_RATIOS = (0.5, 0.3)
FINE_TUNE_EPOCHS = 3
SEED = 0


def _row(model: onnx.ModelProto, folder: Path, name: str, circulant: dict | None = None) -> dict:
    from aipu.app.bench.pruning import program_figures
    from aipu.app.models.train_digits import DATA_PATH
    from aipu.compiler.driver import compile_model

    data = np.load(DATA_PATH)
    path, calib, evaluation = folder / f"{name}.onnx", folder / "calib.npz", folder / "eval.npz"
    onnx.save(model, path)
    np.savez(calib, image=data["calibration_images"])
    np.savez(evaluation, image=data["eval_images"], labels=data["eval_labels"])
    compiled = compile_model(path, calib, evaluation_path=evaluation, circulant=circulant)
    figures = program_figures(compiled, data["calibration_images"][:1])
    figures.pop("timing")
    regions = compiled.network.plan.regions
    figures["weight_dram_bytes"] = int(sum(size for region, (_, size) in regions.items()
                                           if region.endswith("/weights") or region.endswith("/signs")))
    figures["top1"] = round(compiled.evaluation["npu_top1"], 4)
    figures["float_top1"] = round(compiled.evaluation["float_top1"], 4)
    return figures


def _digits(folder: Path) -> dict:
    from aipu.app.models import structured_digits, train_digits
    from aipu.compress import structured_onnx

    base = onnx.load(train_digits.MODEL_PATH)
    rows = {"int8 baseline": _row(base, folder, "baseline")}
    for size in CIRC_SIZES[1:]:
        _, chosen = structured_onnx.circulant_layers(base, size, np.random.default_rng(SEED))
        params = structured_digits.fine_tune(structured_digits.float_params(), chosen, epochs=FINE_TUNE_EPOCHS,
                                             seed=SEED)
        circulant = {entry.layer.name: (entry.circ_size, entry.sign_vector) for entry in chosen}
        rows[f"block-circulant {size}"] = {
            "layers": sorted(circulant),
            **_row(structured_digits.structured_model(params, chosen), folder, f"circulant{size}", circulant)}
    for ratio in LOW_RANK_RATIOS:
        chosen = structured_onnx.low_rank_layers(base, ratio)
        params = structured_digits.fine_tune(structured_digits.float_params(), chosen, epochs=FINE_TUNE_EPOCHS,
                                             seed=SEED)
        rows[f"low-rank {ratio}"] = {"layers": [entry.layer.name for entry in chosen],
                                     **_row(structured_digits.structured_model(params, chosen), folder,
                                            f"low_rank{ratio}")}
    return rows


def run() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        return {"fine_tune_epochs": FINE_TUNE_EPOCHS, "digits": _digits(Path(folder))}
