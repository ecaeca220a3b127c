"""How a MAC layer's weights are quantized (``aipu compile --weights`` and the per-layer mapping file): the
formats, which layers can take each, and the INT4 quantizer (docs/compiler.md §3.2).

* ``int8``: symmetric [-127, 127], a scale per output channel (whitepaper §2.2.2);
* ``int4``: T/AI 115.1-2021 §7.2.3.3's single INT4 parameters, signed [-8, 7], each output channel's step by
  the §9.4 grid search (Table 285) with the mean-squared-error criterion; CONV computes two products a MAC
  cell (docs/arithmetic.md D23);
* ``pow2``: the shift-quantization patent's 7-bit kernels at a power-of-two scale per layer.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from aipu.quant.int4_search import quantize as int4_search
from aipu.sim import golden
from aipu.sim.machine.arch import INT4_MAX, INT4_MIN
from aipu.sim.machine.errors import InputError

WEIGHT_FORMATS = ("int8", "int4", "pow2")
CODE_MAX = {"int8": 127, "int4": INT4_MAX, "pow2": golden.KERNEL_QUAN}     # the largest |code| of each
_MAPPING_BYTES_MAX = 1 << 20          # a mapping file names layers: a megabyte is far beyond any network's


def check_format(option: str, value) -> str:
    """``value`` if it names a weight format, else an InputError naming ``option``."""
    if value not in WEIGHT_FORMATS:
        raise InputError(option, value, " or ".join(WEIGHT_FORMATS))
    return value


def read_layer_formats(path) -> tuple[tuple[str, str], ...]:
    """The mapping file: a JSON object from layer (node) name to weight format, e.g. {"conv1": "int8"}."""
    path = Path(path)
    try:
        if path.stat().st_size > _MAPPING_BYTES_MAX:
            raise InputError("size", path.stat().st_size, f"at most {_MAPPING_BYTES_MAX} bytes")
        mapping = json.loads(path.read_bytes())
    except OSError as exc:
        raise InputError("file", "unreadable", exc.strerror or str(exc)).within(str(path)) from None
    except (ValueError, RecursionError) as exc:
        raise InputError("contents", "not JSON", f"a JSON object of layer name to format ({exc})").within(
            str(path)) from None
    except InputError as exc:
        raise exc.within(str(path)) from None
    if not isinstance(mapping, dict):
        raise InputError("contents", type(mapping).__name__, "a JSON object of layer name to format").within(str(path))
    try:
        return tuple((name, check_format(f"layer {name!r}", value)) for name, value in mapping.items())
    except InputError as exc:
        raise exc.within(str(path)) from None


def int4_refusal(weight_shape: tuple[int, ...], groups: int) -> str | None:
    """Why a layer with these weights [K, C/groups, KH, KW] cannot take INT4 weights, or None."""
    per_group = weight_shape[1]
    if per_group % 2 == 0:
        return None
    kind = "depthwise" if groups > 1 and per_group == 1 else f"{per_group} input channel{'s' * (per_group > 1)} a group"
    return f"INT4 weights pack two input channels a byte: {kind} (docs/arithmetic.md D23)"


def int4_weights(weight: np.ndarray, floor: np.ndarray, per_channel: bool) -> tuple[np.ndarray, np.ndarray]:
    """Signed INT4 codes [-8, 7] (as int8) and a step per output channel (one shared when not ``per_channel``):
    Table 285's grid search with the MSE criterion, the step raised to ``floor`` where the bias or the
    requantizer needs it (the codes are then rounded again at that step)."""
    units = weight.reshape(weight.shape[0], -1) if per_channel else weight.reshape(1, -1)
    steps = np.array([int4_search(unit, criterion="mse")[1] for unit in units])
    steps = np.broadcast_to(steps, (weight.shape[0],)) if not per_channel else steps
    scale = np.maximum(steps, floor if per_channel else np.full(weight.shape[0], floor.max()))
    codes = golden.round_half_away(np.clip(weight / scale.reshape(-1, *([1] * (weight.ndim - 1))), INT4_MIN, INT4_MAX))
    return codes.astype(np.int8), scale
