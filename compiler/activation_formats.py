"""Which activations are INT4 (``aipu compile --activations int4``) and their quantization: T/AI 115.1-2021
§7.2.4.3's INT4 activation, one plane (docs/compiler.md §3.3).

A tensor is INT4 where the units carry it: a Conv, Gemm or MatMul layer writes it (REQUANT out_type INT4, two
a byte), it is not a model output, its channel count is even, and every reader is a conv or fc layer with
INT4 weights whose groups have an even channel count (CONV in_type INT4 needs w_type INT4, docs/arithmetic.md
D23). Every other tensor a MAC layer writes stays 8-bit, named by reason in :meth:`Int4Outputs.notes`.

The quantization is Table 191's first plane with an offset (offset_act): the step by §9.4.2.1 eq. 46
(:func:`aipu.quant.int4_activation.cal_sf`) over a sample of the tensor's calibration values, the offset the
calibrated minimum (0 after a ReLU). Signed codes -8..7 with zero point -8 - round(min / step) are the
standard's unsigned 0..15 with the offset rounded to a whole step, so that zero (padding) stays exact, as
for the 8-bit activations. ``--symmetric`` takes the signed plane without offset (zero point 0).
"""
from __future__ import annotations

import numpy as np

from aipu.compiler.calibrate import TensorStats
from aipu.compiler.graph import Graph, Node
from aipu.compiler.qir import QTensor
from aipu.compiler.weight_formats import refusal
from aipu.quant.int4_activation import cal_sf
from aipu.sim import golden
from aipu.sim.machine.arch import INT4_MAX, INT4_MIN
from aipu.sim.machine.errors import InputError

ACTIVATIONS = ("int8", "int16", "int4", "pow2")     # int16 and pow2: quantize.py and driver.py
_MAC_NODES = ("Conv", "Gemm", "MatMul")       # what writes INT4 and reads it (transposed convs do neither)
_NAMED = 4                                    # tensors a note names


def check_activations(option: str, value) -> str:
    """``value`` if it names an activation format, else an InputError naming ``option``."""
    if value not in ACTIVATIONS:
        raise InputError(option, value, ", ".join(ACTIVATIONS))
    return value


class Int4Outputs:
    """The INT4 choice for each MAC layer's output, made as the quantizer reaches the layer (its readers'
    weight formats follow from the options, as weight_formats.LayerFormats decides them)."""

    def __init__(self, graph: Graph, options) -> None:
        self.graph, self.options = graph, options
        self.readers = graph.consumers()
        self.default_weights = options.weights or ("pow2" if options.scheme == "pow2" else "int8")
        self.named_weights = dict(options.layer_weights)
        self.chosen: list[str] = []
        self.kept: dict[str, list[str]] = {}           # why -> the tensors that stay 8-bit for it

    def of(self, node: Node, y: str, stats: dict[str, TensorStats], full_range: set[str]) -> QTensor | None:
        """The INT4 quantization of ``y``, written by MAC layer ``node``; None where it stays 8-bit."""
        if self.options.activations != "int4" or y not in stats:
            return None
        why = self._refusal(node, y)
        if why is not None:
            self.kept.setdefault(why, []).append(y)
            return None
        self.chosen.append(y)
        return int4_tensor(y, self.graph.shapes[y], stats[y], y in full_range, self.options.symmetric_activations)

    def _refusal(self, node: Node, y: str) -> str | None:
        if node.op not in _MAC_NODES:
            return f"written by a {node.op} (INT4 outputs come from Conv, Gemm and MatMul layers)"
        if y in self.graph.outputs:
            return "a model output (outputs stay 8-bit)"
        if y in self.options.int16:
            return "named by --int16"
        if self.graph.shapes[y][1] % 2:
            return "an odd channel count (INT4 packs two channels a byte)"
        for reader in self.readers.get(y, []):
            why = self._reader_refusal(reader, y)
            if why is not None:
                return why
        return None

    def _reader_refusal(self, reader: Node, y: str) -> str | None:
        """Why ``reader`` cannot read ``y`` as INT4, or None."""
        if reader.op not in _MAC_NODES or reader.inputs[0] != y:
            return f"read by a {reader.op} (only conv and fc layers with INT4 weights read INT4)"
        weight_format = self.named_weights.get(reader.name, self.default_weights)
        if weight_format not in ("int4", "int4-dual"):
            return f"read by a layer with {weight_format} weights (CONV's INT4 inputs need INT4 weights)"
        groups = int(reader.attrs.get("group", 1)) if reader.op == "Conv" else 1
        why = refusal("int4", (0, self.graph.shapes[y][1] // groups), groups, False)
        return None if why is None else f"read by a layer that keeps int8 weights ({why})"

    def notes(self) -> list[str]:
        """One note per reason a MAC layer's output stayed 8-bit, naming the first few; one if none is INT4."""
        if self.options.activations != "int4":
            return []
        notes = []
        for why, names in self.kept.items():
            shown = ", ".join(map(repr, names[:_NAMED])) + (f" and {len(names) - _NAMED} more"
                                                            if len(names) > _NAMED else "")
            notes.append(f"--activations int4: {len(names)} tensor{'s' * (len(names) > 1)} stay{'s' * (len(names) == 1)}"
                         f" 8-bit ({shown}): {why}")
        if not self.chosen:
            notes.append("--activations int4: no tensor is INT4 (one needs conv or fc readers with INT4 weights, "
                         "e.g. --weights int4, and a Conv or Gemm writer)")
        return notes


def int4_tensor(name: str, shape: tuple[int, ...], stats: TensorStats, full: bool, symmetric: bool) -> QTensor:
    """A tensor's INT4 quantization from its statistics: eq. 46's step over the sample and the calibrated
    range (appended, so the grid reaches the extrema the sample may miss), or with ``full`` the step that
    keeps the whole range (a tensor whose clipping changes the outputs); offset = the minimum, or symmetric."""
    low, high = min(stats.minimum, 0.0), max(stats.maximum, 0.0)
    sample = np.empty(0) if stats.sample is None else stats.sample
    values = np.append(sample.astype(np.float64), [low, high])
    if symmetric:
        step = max(-low, high) / INT4_MAX if full else cal_sf(values)
    else:
        step = (high - low) / (INT4_MAX - INT4_MIN) if full else cal_sf(values, offset=low)
    step = float(step) if step > 0 else 1.0
    zero_point = 0 if symmetric else int(np.clip(INT4_MIN - golden.round_half_away(low / step), INT4_MIN, INT4_MAX))
    return QTensor(name, tuple(shape), np.dtype(np.int8), step, zero_point, int4=True)
