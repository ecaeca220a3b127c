"""Pre-quantized integer tensors: their scale and zero point, and the container index entry that carries them.

A quantized ONNX weight holds integers q whose real value is ``scale * (q - zero_point)``, per tensor or per
slice along one axis. The codec codes the levels ``q - zero_point`` losslessly (``integer_input = 1``): a
uint8 weight with zero point 128 becomes a centred signed tensor, far cheaper to code than 0..255. Decoding
adds the zero point back and returns q in its own dtype, bit-exactly. The tensor's index entry carries the
parameters (docs/codec.md §3)::

    "quantization": {"scale": base64 of float32 LE values or null, "zero_point": [int, ...], "axis": int or null}

The scales are stored as their float32 bytes (base64): a per-channel list of them as JSON floats took about
10 bytes a scale after deflate, the bytes take about 5.4.

``read_entry`` is the one place that reads and checks this entry: the index reader runs it on every entry,
and the encoder on the entry it is about to write, so that whatever is written can be read back.
"""
from __future__ import annotations

import base64
import binascii
import reprlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import CodecError
from .quantize import MAX_CMAXW

QUANTIZED_DTYPES = ("int8", "uint8", "int16", "uint16", "int32")   # what ONNX quantizes to, within 32 bits
ENTRY_KEYS = ("scale", "zero_point", "axis")
FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class QuantParams:
    """Scale and zero point of an integer tensor: one value each (``axis`` None) or one per slice along ``axis``.

    ``scale`` is None where the format gives none (ConvInteger, MatMulInteger: a later Mul scales the output).
    """

    zero_point: np.ndarray                # int64, 1-D
    scale: np.ndarray | None = None      # float32, 1-D
    axis: int | None = None

    def entry(self) -> dict:
        """The index entry: the scales as float32 bytes, the rest as they are (``read_entry`` decides whether
        they are valid; ``check_params`` first checks that float32 holds the scales exactly)."""
        scale = None if self.scale is None else base64.b64encode(np.asarray(self.scale, "<f4").tobytes()).decode()
        return {"scale": scale, "zero_point": np.asarray(self.zero_point).ravel().tolist(), "axis": self.axis}

    def _along_axis(self, values: np.ndarray, ndim: int) -> np.ndarray:
        """``values`` shaped to broadcast over a tensor of ``ndim`` axes along ``axis``."""
        if self.axis is None:
            return values.reshape(())
        return values.reshape([-1 if i == self.axis else 1 for i in range(ndim)])

    def centred(self, q: np.ndarray) -> np.ndarray:
        """The levels coded for the integers q: ``q - zero_point`` (int64)."""
        return q.astype(np.int64) - self._along_axis(self.zero_point, q.ndim)

    def restored(self, levels: np.ndarray, dtype: np.dtype, name: str) -> np.ndarray:
        """The integers q of decoded levels, in ``dtype``; a q the dtype cannot hold is a CodecError."""
        q = levels + self._along_axis(self.zero_point, levels.ndim)
        info = np.iinfo(dtype)
        if q.size and not info.min <= int(q.min()) <= int(q.max()) <= info.max:
            raise CodecError(f"tensor {name!r}: a decoded level plus its zero point is outside the range of {dtype}")
        return q.astype(dtype)


class QuantizationError(CodecError):
    """A quantization entry that cannot be used: names the field, the value and what is allowed."""

    def __init__(self, where: str, field: str, value: object, expected: str) -> None:
        name = f"quantization.{field}" if field else "quantization"      # "": the entry as a whole
        super().__init__(f"{where}: {name} = {reprlib.repr(value)}, expected {expected}")
        self.field, self.value, self.expected = field, value, expected


def read_entry(entry: object, where: str, dtype: str, shape: Sequence[int]) -> QuantParams:
    """The entry of a tensor of ``dtype`` and ``shape``, every field checked; QuantizationError otherwise.

    Zero points are integers within the dtype, scales finite positive float32 values, each list holds one
    value or one per slice along ``axis`` (an axis of the tensor, or null for one value), and every level
    ``q - zero_point`` of the dtype fits the codec's ±(2^32 − 1).
    """
    if not isinstance(entry, dict) or set(entry) != set(ENTRY_KEYS):
        raise QuantizationError(where, "", entry, "an object with exactly the keys " + ", ".join(ENTRY_KEYS))
    if dtype not in QUANTIZED_DTYPES:
        raise QuantizationError(where, "dtype", dtype, "a tensor of " + ", ".join(QUANTIZED_DTYPES))
    axis = entry["axis"]
    if axis is not None and (type(axis) is not int or not 0 <= axis < len(shape)):
        allowed = (f"an axis of the tensor, 0..{len(shape) - 1}, or null (per tensor)" if shape
                   else "null: a scalar has no axis")
        raise QuantizationError(where, "axis", axis, allowed)
    counts = (1,) if axis is None or shape[axis] == 1 else (1, shape[axis])
    low, high = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
    zero_point = entry["zero_point"]
    _check_list(where, "zero_point", zero_point, counts, axis, lambda z: type(z) is int and low <= z <= high,
                f"an integer in {low}..{high}")
    if any(max(high - z, z - low) > MAX_CMAXW for z in zero_point):
        raise QuantizationError(where, "zero_point", zero_point, f"levels q - zero_point within ±{MAX_CMAXW}")
    scale = None if entry["scale"] is None else float32_field(where, "scale", entry["scale"], counts, axis,
                                                               ", or null")
    return QuantParams(zero_point=np.array(zero_point, dtype=np.int64), scale=scale, axis=axis)


def float32_field(where: str, field: str, text: object, counts: tuple[int, ...], axis: int | None = None,
                  alternative: str = "") -> np.ndarray:
    """The float32 values that ``text`` (base64 of little-endian float32 values) holds, each finite and positive,
    as many as ``counts`` allows; QuantizationError naming ``field`` (or its bad element) otherwise."""
    expected = "base64 of little-endian float32 values" + alternative
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else None
    except (binascii.Error, ValueError):
        raw = None
    if raw is None or len(raw) % 4:
        raise QuantizationError(where, field, text, expected)
    values = np.frombuffer(raw, "<f4").astype(np.float32)
    if len(values) not in counts:
        many = f"1 or {counts[-1]} values, one per slice along axis {axis}" if len(counts) > 1 else "1 value"
        raise QuantizationError(where, field, values.tolist(), f"a list of {many}")
    bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
    if bad.size:
        raise QuantizationError(where, f"{field}[{bad[0]}]", float(values[bad[0]]), "a finite positive float32")
    return values


def _check_list(where: str, field: str, values: object, counts: tuple[int, ...], axis: int | None,
                valid: Callable[[object], bool], element: str, alternative: str = "") -> None:
    """``values`` is a list of one of ``counts`` elements, each ``valid``; QuantizationError naming the list or
    its first bad element otherwise."""
    if not isinstance(values, list) or len(values) not in counts:
        many = f"1 or {counts[-1]} values, one per slice along axis {axis}" if len(counts) > 1 else "1 value"
        raise QuantizationError(where, field, values, f"a list of {many}{alternative}")
    bad = next((i for i, value in enumerate(values) if not valid(value)), None)
    if bad is not None:
        raise QuantizationError(where, f"{field}[{bad}]", values[bad], element)


def _is_float32(value: object) -> bool:
    """A positive number that float32 holds exactly, so that the index round-trips it (a bool is no number)."""
    if type(value) not in (int, float) or not 0 < value <= FLOAT32_MAX:
        return False
    return float(np.float32(value)) == value


def check_params(name: str, array: np.ndarray, params: QuantParams) -> QuantParams:
    """``params`` of the tensor ``name`` checked as the decoder will check its index entry, in their normal form
    (int64 zero points, float32 scales); scales float32 would round are refused here, before they are stored."""
    if params.scale is not None:
        scales = np.asarray(params.scale).ravel().tolist()
        bad = next((i for i, value in enumerate(scales) if not _is_float32(value)), None)
        if bad is not None:
            raise QuantizationError(f"tensor {name!r}", f"scale[{bad}]", scales[bad],
                                    "a finite positive number that float32 holds exactly")
    return read_entry(params.entry(), f"tensor {name!r}", array.dtype.name, array.shape)


def quantization_of(tensors: Sequence[dict]) -> dict[str, QuantParams]:
    """The quantization parameters of the tensors (index entries, e.g. a decoded LayerInfo's) that carry them."""
    return {tensor["name"]: read_entry(tensor["quantization"], f"tensor {tensor['name']!r}", tensor["dtype"],
                                       tensor["shape"])
            for tensor in tensors if "quantization" in tensor}
