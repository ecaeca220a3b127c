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


def _fine_tuned_row(folder: Path, name: str, chosen: list, circulant: dict | None = None) -> dict:
    """The digits CNN with the ``chosen`` structured layers fine-tuned in shape: `digits_row`."""
    from aipu.app.bench.pruning import digits_row
    from aipu.app.models import structured_digits

    params = structured_digits.fine_tune(structured_digits.float_params(), chosen, epochs=FINE_TUNE_EPOCHS, seed=SEED)
    return digits_row(structured_digits.structured_model(params, chosen), folder, name, circulant)


def circulant_row(base: onnx.ModelProto, folder: Path, size: int) -> dict:
    """Every layer ``size`` divides block-circulant, fine-tuned, its first rows expanded on chip by LOAD."""
    from aipu.compress import structured_onnx

    _, chosen = structured_onnx.circulant_layers(base, size, np.random.default_rng(SEED))
    circulant = {entry.layer.name: (entry.circ_size, entry.sign_vector) for entry in chosen}
    return {"layers": sorted(circulant), **_fine_tuned_row(folder, f"circulant{size}", chosen, circulant)}


def low_rank_row(base: onnx.ModelProto, folder: Path, ratio: float) -> dict:
    """Every layer's factors keeping ``ratio`` of its weights, fine-tuned."""
    from aipu.compress import structured_onnx

    chosen = structured_onnx.low_rank_layers(base, ratio)
    return {"layers": [entry.layer.name for entry in chosen], **_fine_tuned_row(folder, f"low_rank{ratio}", chosen)}


def _digits(folder: Path) -> dict:
    from aipu.app.bench.pruning import digits_row
    from aipu.app.models import train_digits

    base = onnx.load(train_digits.MODEL_PATH)
    rows = {"int8 baseline": digits_row(base, folder, "baseline")}
    for size in CIRC_SIZES[1:]:
        rows[f"block-circulant {size}"] = circulant_row(base, folder, size)
    for ratio in LOW_RANK_RATIOS:
        rows[f"low-rank {ratio}"] = low_rank_row(base, folder, ratio)
    return rows


def run() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        return {"fine_tune_epochs": FINE_TUNE_EPOCHS, "digits": _digits(Path(folder))}
