"""How a MAC layer's weights are quantized (``aipu compile --weights`` and the per-layer mapping file): the
formats, which layers can take each, and their quantizers (docs/compiler.md §3.2).

* ``int8``: symmetric [-127, 127], a scale per output channel (whitepaper §2.2.2);
* ``int4``: T/AI 115.1-2021 §7.2.3.3's single INT4 parameters, signed [-8, 7], each output channel's step by
  the §9.4 grid search (Table 285) with the mean-squared-error criterion; CONV computes two products a MAC
  cell (docs/arithmetic.md D23);
* ``int4-dual``: §7.2.3.3's dual INT4 parameters, w ~ s1·q1 + s2·q2, each output channel's pair of steps by
  Table 286's grid search; one CONV computes both planes as interleaved output channels and REQUANT adds
  them with a multiplier each (docs/arithmetic.md §4.7);
* ``codebook:K``: §7.2.2.2's codebook quantization (Q_Method 2) with K centres (2..16) for the layer, int8
  entries at one scale; DRAM holds 1-, 2- or 4-bit indices that LOAD expands (docs/quantization.md);
* ``pow2``: the shift-quantization patent's 7-bit kernels at a power-of-two scale per layer.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aipu.quant.codebook import kmeans_centres
from aipu.quant.int4_search import dual_quantize as int4_dual_search
from aipu.quant.int4_search import quantize as int4_search
from aipu.sim import golden
from aipu.sim.machine.arch import CODEBOOK_INDEX_BITS, INT4_MAX, INT4_MIN
from aipu.sim.machine.errors import InputError

WEIGHT_FORMATS = ("int8", "int4", "int4-dual", "pow2")
CODEBOOK = "codebook:"                # + the number of centres
CODEBOOK_CENTRES = range(2, (1 << max(CODEBOOK_INDEX_BITS)) + 1)
CODE_MAX = {"int8": 127, "int4": INT4_MAX, "int4-dual": INT4_MAX, "pow2": golden.KERNEL_QUAN}   # largest |code|
_MAPPING_BYTES_MAX = 1 << 20          # a mapping file names layers: a megabyte is far beyond any network's


def check_format(option: str, value) -> str:
    """``value`` if it names a weight format, else an InputError naming ``option``."""
    if value not in WEIGHT_FORMATS and codebook_centres(value) is None:
        raise InputError(option, value, f"{', '.join(WEIGHT_FORMATS)} or {CODEBOOK}K (K {CODEBOOK_CENTRES.start}.."
                                        f"{CODEBOOK_CENTRES.stop - 1})")
    return value


def codebook_centres(weight_format) -> int | None:
    """K of a ``codebook:K`` format (None for any other value)."""
    if not isinstance(weight_format, str) or not weight_format.startswith(CODEBOOK):
        return None
    count = weight_format.removeprefix(CODEBOOK)
    return int(count) if count.isdigit() and count.isascii() and int(count) in CODEBOOK_CENTRES else None


def code_max(weight_format: str) -> int:
    """The largest |code| a format gives a weight (a codebook's entries are int8)."""
    return CODE_MAX.get(weight_format, CODE_MAX["int8"])


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


class LayerFormats:
    """Each MAC layer's weight format: the mapping file's (``named``), else ``default``. A layer that cannot take
    the default keeps single INT4 weights (from int4-dual, where it can take them) or int8 and is listed in
    :meth:`notes`; one the mapping file names is refused by name."""

    def __init__(self, default: str, named: dict[str, str]) -> None:
        self.default, self.named = default, named
        self.kept: dict[tuple[str, str], list[str]] = {}      # (why, format kept) -> the layers

    def of(self, layer: str, weight_shape: tuple[int, ...], groups: int, transposed: bool,
           leaky: bool = False) -> str:
        """The format of ``layer`` (``leaky``: a Leaky ReLU / PReLU is fused into its requantizer)."""
        weight_format = self.named.get(layer, self.default)
        why = refusal(weight_format, weight_shape, groups, transposed, leaky)
        if why is None:
            return weight_format
        if layer in self.named:
            raise InputError(f"layer {layer!r} weights", weight_format, f"another format: {why}")
        kept = "int4" if weight_format == "int4-dual" and refusal("int4", weight_shape, groups, transposed) is None \
            else "int8"
        self.kept.setdefault((why, kept), []).append(layer)
        return kept

    def notes(self) -> list[str]:
        """One note per reason a layer kept other weights, naming the first few such layers."""
        notes = []
        for (why, kept), names in self.kept.items():
            shown = ", ".join(map(repr, names[:4])) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            notes.append(f"{len(names)} layer{'s' * (len(names) > 1)} keep{'s' * (len(names) == 1)} {kept} weights "
                         f"({shown}): {why}")
        return notes

    def check_names(self, layers: set[str]) -> None:
        """InputError for a name of the mapping file that is not one of the model's MAC ``layers``."""
        unknown = [name for name in self.named if name not in layers]
        if unknown:
            raise InputError("layer weights", unknown[0], "the name of a Conv, ConvTranspose, Gemm or MatMul node "
                             f"(this model's: {', '.join(sorted(layers)[:6])}{', ...' if len(layers) > 6 else ''})")


def stored_bytes(weight_format: str, count: int) -> int:
    """The DRAM bytes ``count`` weights of ``weight_format`` take: INT4 two a byte (dual: two planes), a codebook's
    indices 8 / index_bits a byte and its 2^index_bits entries, else a byte each."""
    centres = codebook_centres(weight_format)
    if centres is not None:
        bits = index_bits(centres)
        return -(-count * bits // 8) + (1 << bits)
    return {"int4": -(-count // 2), "int4-dual": 2 * -(-count // 2)}.get(weight_format, count)


def index_bits(centres: int) -> int:
    """The width of an index into ``centres`` entries: the fewest of LOAD's index widths that number them."""
    return next(bits for bits in CODEBOOK_INDEX_BITS if centres <= 1 << bits)


def refusal(weight_format: str, weight_shape: tuple[int, ...], groups: int, transposed: bool,
            leaky: bool = False) -> str | None:
    """Why a layer with these weights [K, C/groups, KH, KW] cannot take ``weight_format``, or None. INT4 weights
    and codebook indices fill whole bytes of each tap's input channels (CONV packs INT4 two a byte, LOAD
    expands 8 / index_bits indices a byte); dual planes take the requantizer's second multiplier, which a fused
    Leaky ReLU / PReLU (``leaky``) needs for its negative side."""
    centres = codebook_centres(weight_format)
    if weight_format == "int4-dual" and leaky:
        return ("dual INT4 planes take the requantizer's second multiplier, which the fused Leaky ReLU / PReLU "
                "needs (docs/arithmetic.md §4.7)")
    if weight_format in ("int4", "int4-dual"):
        what, per_byte, where = "INT4 weights pack two input channels a byte", 2, "docs/arithmetic.md D23"
    elif centres is not None:
        if transposed:
            return "a transposed convolution's phases fill kernel taps with zeros, which a codebook may not hold"
        bits = index_bits(centres)
        what, per_byte = f"{bits}-bit codebook indices pack {8 // bits} input channels a byte", 8 // bits
        where = "docs/quantization.md"
    else:
        return None
    per_group = weight_shape[1]
    if per_group % per_byte == 0:
        return None
    kind = "depthwise" if groups > 1 and per_group == 1 else f"{per_group} input channel{'s' * (per_group > 1)} a group"
    return f"{what}: {kind} ({where})"


@dataclass(frozen=True)
class QuantizedWeights:
    """A layer's weights in a format: int8-held codes [K, ...] and their scale per output channel; a codebook's
    sorted entries; dual INT4's second plane and its scales."""

    codes: np.ndarray
    scale: np.ndarray
    codebook: np.ndarray | None = None
    second: np.ndarray | None = None
    second_scale: np.ndarray | None = None


def quantized_weights(weight: np.ndarray, floor: np.ndarray, weight_format: str, per_channel: bool) -> QuantizedWeights:
    """The weights [K, ...] in ``weight_format``, the (first plane's) scale per output channel at least ``floor``
    (one for all when not ``per_channel``): int8 symmetric [-127, 127], int4 (:func:`int4_weights`), int4-dual
    (:func:`int4_dual_weights`), codebook:K (:func:`codebook_weights`), or pow2."""
    if weight_format == "int4":
        return QuantizedWeights(*int4_weights(weight, floor, per_channel))
    if weight_format == "int4-dual":
        return int4_dual_weights(weight, floor, per_channel)
    centres = codebook_centres(weight_format)
    if centres is not None:
        codes, entries, scale = codebook_weights(weight, centres, floor, per_channel)
        return QuantizedWeights(codes, scale, entries)
    amax, floor = _channel_reach(weight, floor, per_channel)
    if weight_format == "pow2":       # 7-bit kernels (QUAN 63, [0069]) at the least power of two
        exponents = _pow2_weight_exponents(amax, floor)
        q = [golden.pow2_quantize(channel, int(e), golden.KERNEL_QUAN) for channel, e in zip(weight, exponents)]
        return QuantizedWeights(np.stack(q).astype(np.int8), np.ldexp(1.0, -exponents))
    scale = np.maximum(amax / CODE_MAX["int8"], floor)
    q = golden.round_half_away(weight / scale.reshape(-1, *([1] * (weight.ndim - 1))))
    return QuantizedWeights(np.clip(q, -CODE_MAX["int8"], CODE_MAX["int8"]).astype(np.int8), scale)


def _channel_reach(weight: np.ndarray, floor: np.ndarray, per_channel: bool) -> tuple[np.ndarray, np.ndarray]:
    """max |w| and the scale floor per output channel, or the largest of each for every channel."""
    flat = np.abs(weight.reshape(weight.shape[0], -1))
    if per_channel:
        return flat.max(axis=1), floor
    return np.full(weight.shape[0], flat.max()), np.full(weight.shape[0], floor.max())


def _pow2_weight_exponents(amax: np.ndarray, floor: np.ndarray) -> np.ndarray:
    """Per output channel, the largest e with every |w|·2^e within KERNEL_QUAN and 2^-e at least ``floor``.
    The patent's formula (1) rounds log2 instead, which clips a channel's largest weights by up to √2
    (docs/compiler.md §3.1 has what that cost on a real classifier)."""
    with np.errstate(divide="ignore"):
        unclipped = np.floor(np.log2(golden.KERNEL_QUAN / amax))
        highest = np.floor(-np.log2(floor))
    return np.minimum(unclipped, highest).astype(np.int64)


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


def int4_dual_weights(weight: np.ndarray, floor: np.ndarray, per_channel: bool) -> QuantizedWeights:
    """Dual INT4 (§7.2.3.3): two planes of codes [-8, 7] and a pair of steps per output channel (one pair for all
    when not ``per_channel``), w ~ s1·q1 + s2·q2, by Table 286's grid search. A unit whose first step is under
    ``floor`` (the bias is added at the first plane's scale) takes the single INT4 codes at the floor and an empty
    second plane."""
    units = weight.reshape(weight.shape[0], -1) if per_channel else weight.reshape(1, -1)
    floors = floor if per_channel else np.array([floor.max()])
    planes, steps = np.zeros((2, *units.shape), np.int8), np.zeros((2, len(units)))
    for index, unit in enumerate(units):
        (q1, q2), (s1, s2) = int4_dual_search(unit)
        if s1 < floors[index]:
            codes, (s1,) = int4_weights(unit[None], floors[index:index + 1], per_channel=True)
            q1, q2, s2 = codes.ravel(), np.zeros_like(q1), s1
        planes[:, index], steps[:, index] = (q1, q2), (s1, s2)
    planes = planes.reshape(2, *weight.shape)
    steps = np.broadcast_to(steps, (2, weight.shape[0])) if not per_channel else steps
    return QuantizedWeights(planes[0], steps[0].copy(), second=planes[1], second_scale=steps[1].copy())


def codebook_weights(weight: np.ndarray, centres: int, floor: np.ndarray,
                     per_channel: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codebook weights (T/AI 115.1-2021 §7.2.2.2, Q_Method 2, one codebook for the layer) on weights in code
    units: each output channel divided by its int8 scale (max|w| / 127, at least ``floor``; one for all when not
    ``per_channel``), so that channels of different ranges share the entries. The k-means centres of §9.4.1.4
    over those values, rounded to int8, are the entries; each weight takes the nearest (the lower on a tie).
    Returns (weights as int8 codes, the sorted distinct entries, the scale per output channel)."""
    amax, floor = _channel_reach(weight, floor, per_channel)
    scale = np.maximum(np.maximum(amax / CODE_MAX["int8"], floor), np.finfo(np.float64).tiny)
    units = weight / scale.reshape(-1, *([1] * (weight.ndim - 1)))
    found = kmeans_centres(units.ravel(), centres)
    entries = np.unique(golden.round_half_away(np.clip(found, -CODE_MAX["int8"], CODE_MAX["int8"])))
    if entries.size == 1:           # one value (an all-zero layer): a codebook has two entries at least
        entries = np.union1d(entries, entries + (1 if entries[0] < CODE_MAX["int8"] else -1))
    nearest = np.searchsorted((entries[1:] + entries[:-1]) / 2, units, side="left")     # the lower one on a tie
    return entries[nearest].astype(np.int8), entries.astype(np.int8), scale
