"""`aipu compile` as a function: ONNX file + calibration set -> quantized model -> one command program, with the
per-layer report (docs/compiler.md). Each stage is its own module; this one only runs them in order."""
from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from aipu.compiler.activation_functions import TABLE_OPS
from aipu.compiler.calibrate import HISTOGRAM_METHODS, collect, float_session, read_labeled_samples, read_samples
from aipu.compiler.consistency import check_consistency
from aipu.compiler.graph import Graph, load_graph
from aipu.compiler.lowering.network import NetworkProgram, lower_model
from aipu.compiler.normalize import normalize
from aipu.compiler.program_dir import write_program_dir
from aipu.compiler.prequantized import import_quantized, is_prequantized
from aipu.compiler.qir import QConv, QLut, QModel
from aipu.compiler.quantize import LAYOUT_OPS, QuantOptions, quantize_graph, sqnr_from_powers
from aipu.compiler.weight_formats import stored_bytes
from aipu.quant.brelu import N_SIGMA_PERCENTILE
from aipu.sim.machine.arch import DEFAULT, HardwareConfig
from aipu.sim.machine.errors import InputError

REPORT_SAMPLES = 16          # calibration samples the per-layer report compares float and int8 on
LOW_SQNR_DB = 20.0           # a layer's output under this SQNR against float is flagged (table, warning, report)
PRECISION_ROUNDS = 4         # --target-sqnr: rounds of making tensors int16, each followed by a new layer report


@dataclass
class Compiled:
    graph: Graph
    qmodel: QModel
    network: NetworkProgram
    layers: list[dict]
    options: QuantOptions
    evaluation: dict | None = None


def quantize_model(model_path, calibration_path=None, *, input_shapes: dict[str, tuple[int, ...]] | None = None,
                   options: QuantOptions = QuantOptions(), batch_size: int = 16, progress: bool = False,
                   threads: int = 1) -> tuple[Graph, QModel, dict[str, np.ndarray] | None]:
    """The normalized graph, its quantized model and the calibration samples (None without a data set): what
    lowering for any hardware configuration starts from (`aipu sweep` lowers one for many). A float model is
    calibrated on ``calibration_path``; a pre-quantized one (QDQ or QOperator) keeps its own quantization."""
    loaded = load_graph(model_path, input_shapes)
    try:
        check_consistency(loaded)
    except InputError as error:
        raise error.within(loaded.source) from None
    dynamic = any(node.op == "DynamicQuantizeLinear" for node in loaded.nodes)
    graph = normalize(loaded)
    prequantized = is_prequantized(graph)
    if calibration_path is None and not prequantized:
        raise InputError("--calib", None, "a calibration set for a dynamically quantized model (its activation "
                                          "scales, computed per input at run time, become calibrated ones)"
                         if dynamic else "a calibration set for a float model (only a pre-quantized one has its "
                                         "own scales)")
    samples = (read_samples(calibration_path, {name: graph.shapes[name] for name in graph.inputs})
               if calibration_path is not None else None)
    if prequantized:
        return graph, import_quantized(graph), samples
    stats = collect(graph, samples, batch_size=batch_size, histograms=options.method in HISTOGRAM_METHODS,
                    progress=progress, threads=threads, keep_samples=options.activations == "int4",
                    bound_rate=N_SIGMA_PERCENTILE[options.n_std] if options.method == "brelu" else None)
    widened = widest_int16(graph, stats, options) if options.activations == "int16" else options
    if options.target_sqnr_db is None:
        qmodel = quantize_graph(graph, stats, widened)
    else:
        report_samples = {name: array[:REPORT_SAMPLES] for name, array in samples.items()}
        qmodel = raise_precision(graph, stats, widened, report_samples, threads)
    if options.activations == "int16":
        names = widened.int16
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        qmodel.notes.append(f"--activations int16: {len(names)} tensor{'s' * (len(names) != 1)} int16 ({shown}), "
                            "those only tables, pooling, reshapes or the outputs read (the MAC array, ELTWISE and "
                            "SOFTMAX read 8 bits)")
    return graph, qmodel, samples


def raise_precision(graph: Graph, stats: dict, options: QuantOptions, samples: dict[str, np.ndarray],
                    threads: int = 1) -> QModel:
    """The quantized model with more precision, round after round, around every layer whose output is under
    ``options.target_sqnr_db`` against float on ``samples``: a layer that clips gets its output's full range
    (the extrema, whatever the method); one that does not gets int16 for its output, else for an input,
    where the readers allow (the MAC array and a few units take 8 bits only). The model's notes say what
    was chosen and which layers still miss the target."""
    target = options.target_sqnr_db
    qmodel = quantize_graph(graph, stats, options)
    for _ in range(PRECISION_ROUNDS):
        low = low_sqnr_layers(layer_report(graph, qmodel, samples, threads), target)
        widened = _widened(graph, stats, options, qmodel, low)
        if widened == options:
            break
        options = widened
        qmodel = quantize_graph(graph, stats, options)
    else:
        low = low_sqnr_layers(layer_report(graph, qmodel, samples, threads), target)
    qmodel.notes.append(f"--target-sqnr {target:g}: full range for {_listed(options.full_range)}, int16 for "
                        f"{_listed(options.int16)}; " + (f"still under it: {', '.join(row['name'] for row in low)}"
                                                         if low else "every layer reaches it"))
    return qmodel


def _widened(graph: Graph, stats: dict, options: QuantOptions, qmodel: QModel, low: list[dict]) -> QuantOptions:
    """``options`` with one step more precision: the full range for the ``low`` layers that clip (clipping
    upstream spoils every layer after it), or when none does, int16 for each low layer that can take it."""
    clipping = [row["output"] for row in low if row["clipped_fraction"] and row["output"] not in options.full_range]
    if clipping:
        return replace(options, full_range=(*options.full_range, *clipping))
    for row in low:
        op = next(op for op in qmodel.ops if op.name == row["name"])
        for name in (op.y, *op.inputs):
            if name not in options.int16 and _takes_int16(graph, stats, options, (*options.int16, name)):
                options = replace(options, int16=(*options.int16, name))
                break
    return options


def _listed(names: tuple[str, ...]) -> str:
    return f"{len(names)} tensor{'s' if len(names) != 1 else ''}" + (f" ({', '.join(names)})" if names else "")


_INT16_READERS = (*TABLE_OPS, "MaxPool", "AveragePool", "GlobalAveragePool", *LAYOUT_OPS)


def widest_int16(graph: Graph, stats: dict, options: QuantOptions) -> QuantOptions:
    """``options`` with int16 for every computed tensor the units let be int16 (``--activations int16``): of
    those read only by tables, pooling or reshapes, or only as an output, each the quantizer takes (all at
    once when it takes them all, else one at a time in graph order) and makes int16 (pooling and reshapes
    keep their input's type)."""
    consumers = graph.consumers()
    candidates = tuple(name for node in graph.nodes for name in node.outputs
                       if name and name not in options.int16 and (consumers.get(name) or name in graph.outputs)
                       and all(user.op in _INT16_READERS for user in consumers.get(name, [])))
    widened = replace(options, int16=(*options.int16, *candidates))
    if not _takes_int16(graph, stats, options, widened.int16):
        widened = options
        for name in candidates:
            if _takes_int16(graph, stats, options, (*widened.int16, name)):
                widened = replace(widened, int16=(*widened.int16, name))
    tensors = quantize_graph(graph, stats, widened).tensors
    return replace(options, int16=tuple(name for name in widened.int16 if tensors[name].dtype == np.int16))


def _takes_int16(graph: Graph, stats: dict, options: QuantOptions, int16: tuple[str, ...]) -> bool:
    try:
        quantize_graph(graph, stats, replace(options, int16=int16))
    except InputError:
        return False
    return True


def compile_model(model_path, calibration_path=None, *, config: HardwareConfig = DEFAULT,
                  input_shapes: dict[str, tuple[int, ...]] | None = None, options: QuantOptions = QuantOptions(),
                  batch_size: int = 16, progress: bool = False, threads: int = 1, evaluation_path=None,
                  compress: str | None = None, circulant: dict | None = None) -> Compiled:
    """The model quantized (:func:`quantize_model`; with a pre-quantized one the data set, optional then, only
    feeds the report) and lowered for ``config``. With ``evaluation_path`` (samples and their ``labels``) the
    top-1 accuracy of float and int8 is measured. ``compress``: the policy by which conv weights become WDEC
    streams (lower_model). ``circulant``: {layer: (circ_size, sign vector)} of the Conv or Gemm layers whose
    weights are block-circulant C·diag(s): DRAM holds their first rows, LOAD expands them (docs/structured.md)."""
    if circulant:
        options = replace(options, circulant=circulant_options(circulant))
    graph, qmodel, samples = quantize_model(model_path, calibration_path, input_shapes=input_shapes, options=options,
                                            batch_size=batch_size, progress=progress, threads=threads)
    try:
        network = lower_model(qmodel, config, compress=compress)
    except InputError as error:              # what does not fit the hardware, named by layer and by file
        raise error.within(graph.source) from None
    layers = (layer_report(graph, qmodel, {name: array[:REPORT_SAMPLES] for name, array in samples.items()},
                           threads) if samples is not None else [])
    evaluation = None
    if evaluation_path is not None:
        inputs = {name: graph.shapes[name] for name in graph.inputs}
        evaluation = evaluate(graph, qmodel, *read_labeled_samples(evaluation_path, inputs), threads=threads,
                              source=evaluation_path, progress=progress)
    return Compiled(graph, qmodel, network, layers, options, evaluation)


def circulant_options(circulant: dict) -> tuple[tuple[str, int, tuple[int, ...]], ...]:
    """``{layer: (circ_size, sign vector)}`` as QuantOptions.circulant, each entry checked in one line."""
    entries = []
    for layer, entry in circulant.items():
        try:
            size, signs = entry
            signs = np.asarray(signs).reshape(-1)
        except (TypeError, ValueError):
            raise InputError(f"circulant layer {layer!r}", entry, "(circ_size, sign vector)") from None
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not np.isin(signs, (-1, 1)).all():
            raise InputError(f"circulant layer {layer!r}", entry, "an integer circ_size and signs of -1 or +1")
        entries.append((str(layer), int(size), tuple(int(value) for value in signs)))
    return tuple(entries)


def evaluate(graph: Graph, qmodel: QModel, samples: dict[str, np.ndarray], labels: np.ndarray, *, threads: int = 1,
             source="evaluation set", progress: bool = False) -> dict:
    """Top-1 of the float graph (onnxruntime) and of the quantized model (the golden units: what the program
    computes, bit for bit) on the first output, one sample at a time; and how often the two agree."""
    from tqdm import tqdm

    output = graph.outputs[0]
    shape = graph.shapes[output]
    classes = int(np.prod(shape[1:]))
    if len(shape) < 2 or classes != shape[1]:
        raise InputError(f"output {output!r}", list(shape), "[N, classes] (or [N, classes, 1, 1]) for top-1")
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        bad = labels[(labels < 0) | (labels >= classes)][0]
        raise InputError(f"{source}: labels", int(bad), f"class indices 0..{classes - 1}")
    session, _ = float_session(graph, threads)
    batch = shape[0]
    float_top, npu_top = [], []
    for start in tqdm(range(0, labels.size, batch), unit="sample", desc="evaluation", disable=not progress):
        feeds = {name: array[start:start + batch] for name, array in samples.items()}
        float_top.append(session.run([output], feeds)[0].reshape(batch, classes).argmax(axis=1))
        npu_top.append(qmodel.run(qmodel.quantize_inputs(feeds))[output].reshape(batch, classes).argmax(axis=1))
    float_top, npu_top = np.concatenate(float_top), np.concatenate(npu_top)
    return {"samples": int(labels.size), "output": output, "float_top1": float(np.mean(float_top == labels)),
            "npu_top1": float(np.mean(npu_top == labels)), "agreement": float(np.mean(float_top == npu_top))}


def layer_report(graph: Graph, qmodel: QModel, samples: dict[str, np.ndarray], threads: int = 1) -> list[dict]:
    """Per operator: its output's type and quantization; over ``samples`` (one at a time, as the graph's batch)
    the SQNR of the dequantized int8 result against the float graph's tensor, the fraction of float values
    beyond the quantized range (clipped by saturation), and for a table the range of input codes it sees.
    The sums are kept run by run, never the activations of every sample."""
    session, names = float_session(graph, threads)
    batch = graph.shapes[graph.inputs[0]][0]
    count = next(iter(samples.values())).shape[0]
    sums: dict[str, np.ndarray] = {}           # op output -> [signal, noise, clipped, values], float64
    channel_sums: dict[str, np.ndarray] = {}   # graph output -> [signal, noise] per channel (axis 1)
    table_codes: dict[str, list[int]] = {}
    for start in range(0, count, batch):
        feeds = {name: array[start:start + batch] for name, array in samples.items()}
        floats = dict(zip(names, session.run(names, feeds)))
        values = qmodel.run(qmodel.quantize_inputs(feeds), keep=True)
        for op in qmodel.ops:
            if op.y in floats:
                sums[op.y] = sums.get(op.y, 0) + _error_sums(floats[op.y], qmodel.tensors[op.y], values[op.y])
            if op.y in floats and op.y in qmodel.outputs and floats[op.y].ndim >= 3:
                channel_sums[op.y] = channel_sums.get(op.y, 0) + _channel_error_sums(
                    floats[op.y], qmodel.tensors[op.y], values[op.y])
            if isinstance(op, QLut):
                low, high = int(values[op.x].min()), int(values[op.x].max())
                seen = table_codes.setdefault(op.name, [low, high])
                table_codes[op.name] = [min(seen[0], low), max(seen[1], high)]
    rows = []
    for op in qmodel.ops:
        tensor = qmodel.tensors[op.y]
        row = {"name": op.name, "kind": type(op).__name__.removeprefix("Q").lower(), "output": op.y,
               "shape": list(tensor.shape), "dtype": tensor.type_name, "scale": tensor.scale,
               "zero_point": tensor.zero_point, "sqnr_db": None, "clipped_fraction": None}
        if op.y in sums:
            signal, noise, clipped, total = sums[op.y]
            sqnr = sqnr_from_powers(signal, noise)
            row["sqnr_db"] = round(sqnr, 2) if math.isfinite(sqnr) else None    # JSON has no infinity
            row["clipped_fraction"] = float(clipped / total)
        if op.y in channel_sums:
            row.update(_low_channels(channel_sums[op.y]))
        if op.name in table_codes:     # which part of the table the data reaches
            row["table_input_range"] = table_codes[op.name]
        if isinstance(op, QConv):
            row["weights"] = op.weight_format
        rows.append(row)
    return rows


def weight_sizes(qmodel: QModel) -> dict:
    """The MAC layers' weights in the format the program computes with: each layer's format and bytes
    (weight_formats.stored_bytes) and L of a block-circulant one (DRAM holds 1/L of it), the total, and the total
    the same weights take as int8."""
    layers = [{"name": op.name, "format": op.weight_format, "bytes": stored_bytes(op.weight_format, op.w.size),
               **({"circulant": op.circulant[0]} if op.circulant is not None else {})}
              for op in qmodel.ops if isinstance(op, QConv)]
    return {"bytes": sum(layer["bytes"] for layer in layers),
            "int8_bytes": sum(op.w.size for op in qmodel.ops if isinstance(op, QConv)), "layers": layers}


def _error_sums(reference: np.ndarray, tensor, codes: np.ndarray) -> np.ndarray:
    """[signal power, noise power, values beyond the quantized range, values] of one run of one tensor, as
    quantize.sqnr_db sums them."""
    reference = reference.astype(np.float64)
    low, high = tensor.dequantize(np.array(tensor.limits))
    clipped = np.count_nonzero((reference < low - tensor.scale / 2) | (reference > high + tensor.scale / 2))
    noise = reference - tensor.dequantize(codes).astype(np.float64)
    return np.array([np.sum(reference ** 2), np.sum(noise ** 2), clipped, reference.size], np.float64)


def _channel_error_sums(reference: np.ndarray, tensor, codes: np.ndarray) -> np.ndarray:
    """[signal power, noise power] of each channel (axis 1) of one run of an output."""
    reference = reference.astype(np.float64)
    noise = reference - tensor.dequantize(codes).reshape(reference.shape)
    axes = tuple(axis for axis in range(reference.ndim) if axis != 1)
    return np.stack([np.sum(reference ** 2, axis=axes), np.sum(noise ** 2, axis=axes)])


def _low_channels(sums: np.ndarray, threshold: float = LOW_SQNR_DB) -> dict:
    """An output's channels under ``threshold`` dB against float, when it has any: a channel whose range is a
    small part of the tensor's (a detector's scores joined to its box coordinates) can lose every level while
    the tensor's SQNR, dominated by the large channels, looks fine."""
    sqnr = np.array([sqnr_from_powers(signal, noise) for signal, noise in sums.T])
    low = np.flatnonzero(sqnr < threshold)
    if not low.size:
        return {}
    return {"low_channels": {"count": int(low.size), "of": int(sqnr.size), "first": low[:8].tolist(),
                             "worst_db": round(float(sqnr[low].min()), 2)}}


def low_sqnr_layers(rows: list[dict], threshold: float = LOW_SQNR_DB) -> list[dict]:
    """The report rows whose output is under ``threshold`` dB SQNR against float."""
    return [row for row in rows if row.get("sqnr_db") is not None and row["sqnr_db"] < threshold]


def write(compiled: Compiled, out: Path, model_path) -> dict:
    """The program directory of ``compiled``; returns its manifest."""
    network = compiled.network
    model_bytes = Path(model_path).read_bytes()
    manifest = {**network.manifest(),
                "source": {"model": str(model_path), "sha256": hashlib.sha256(model_bytes).hexdigest()},
                "config_hash": network.program.config.config_hash(),
                "quantization": asdict(compiled.options),
                "commands_per_unit": {unit.name: len(queue) for unit, queue in network.program.queues.items() if queue},
                "weights": weight_sizes(compiled.qmodel), "layers": compiled.layers, "notes": compiled.qmodel.notes,
                **({"evaluation": compiled.evaluation} if compiled.evaluation is not None else {})}
    write_program_dir(Path(out), network.program, network.dram, manifest,
                      compiled.graph.to_onnx().SerializeToString())
    return manifest
