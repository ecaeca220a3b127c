"""What `aipu codec encode` reads: the weights of an ONNX model or the arrays of an .npz, with the scale and zero
point of pre-quantized integer weights (docs/codec.md §8).

ONNX: the initializers of Conv, Gemm and MatMul, directly or through one DequantizeLinear (QDQ), and those of
QLinearConv, QGemm, QLinearMatMul, ConvInteger and MatMulInteger (``LAYOUTS``). A quantized weight's scale and
zero point must be initializers; a weight that is not one (an activation) is no stored weight and is skipped.
.npz: every array is a tensor, except members ``NAME:scale``, ``NAME:zero_point`` and ``NAME:axis``, which give
tensor NAME's quantization (what `aipu codec decode` writes). Every refusal is an InputError naming the file.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from aipu.codec.quantization import QuantizationError, QuantParams, check_params
from aipu.sim.machine.errors import InputError

WEIGHT_KINDS = "iuf"                 # integer, unsigned and float tensors
QUANTIZATION_MEMBERS = ("scale", "zero_point", "axis")     # .npz members NAME:scale, NAME:zero_point, NAME:axis


class Weights(NamedTuple):
    """Tensors to code, their (weight, bias) layers (None: codec.api's default grouping), their quantization."""

    tensors: dict[str, np.ndarray]
    groups: list[tuple[str, str | None]] | None
    quantization: dict[str, QuantParams]


@dataclass(frozen=True)
class Slot:
    """Where an op holds a tensor to code: its input, and the inputs of the tensor's scale and zero point.

    ``scale`` lists inputs whose product is the scale (a QLinearConv bias: x_scale·w_scale); ``exact_scale``
    False makes a scale that is no initializer mean "no scale" instead of an error. ``axis(node, ndim)`` is
    the axis of per-axis parameters.
    """

    tensor: int
    scale: tuple[int, ...] = ()
    zero_point: int | None = None
    axis: Callable[[object, int], int] = field(default=lambda node, ndim: 0)
    exact_scale: bool = True

    @property
    def quantized(self) -> bool:
        return bool(self.scale) or self.zero_point is not None


def _dequantize_axis(node, ndim: int) -> int:
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    return axis + ndim if axis < 0 else axis


def _last_axis(node, ndim: int) -> int:         # MatMul's B: one value per column
    return ndim - 1


def _row_axis(node, ndim: int) -> int:          # MatMul's A: one value per row
    return max(ndim - 2, 0)


def _gemm_b_axis(node, ndim: int) -> int:       # QGemm's B: one value per output column, [N, K] when transB
    return 0 if next((a.i for a in node.attribute if a.name == "transB"), 0) else 1


DEQUANTIZE = Slot(0, scale=(1,), zero_point=2, axis=_dequantize_axis)
# op type -> its (weight, bias) layers: a weight alone has bias None
LAYOUTS: dict[str, list[tuple[Slot, Slot | None]]] = {
    "Conv": [(Slot(1), Slot(2))],
    "Gemm": [(Slot(1), Slot(2))],
    "MatMul": [(Slot(0), None), (Slot(1), None)],
    "QLinearConv": [(Slot(3, (4,), 5), Slot(8, (1, 4), exact_scale=False))],
    "QGemm": [(Slot(3, (4,), 5, _gemm_b_axis), Slot(6, (1, 4), exact_scale=False))],     # com.microsoft
    "QLinearMatMul": [(Slot(0, (1,), 2, _row_axis), None), (Slot(3, (4,), 5, _last_axis), None)],
    "ConvInteger": [(Slot(1, zero_point=3), None)],
    "MatMulInteger": [(Slot(0, zero_point=2, axis=_row_axis), None), (Slot(1, zero_point=3, axis=_last_axis), None)],
}


def load_tensors(path: Path) -> Weights:
    """The weights of an .onnx or .npz file."""
    if path.suffix == ".onnx":
        return load_onnx(path)
    if path.suffix == ".npz":
        return load_npz(path)
    raise InputError("input", str(path), "an .onnx or .npz file")


# --------------------------------------------------------------------------------------------- ONNX
def load_onnx(path: Path) -> Weights:
    """The initializers that ``LAYOUTS`` finds, grouped (weight, bias), with the quantized ones' parameters."""
    from aipu.compiler.graph import read_model

    model = read_model(path)
    reader = _OnnxReader(path, model)
    groups: list[tuple[str, str | None]] = []
    for node in model.graph.node:
        for weight_slot, bias_slot in LAYOUTS.get(node.op_type, ()):
            weight = reader.take(node, weight_slot)
            bias = reader.take(node, bias_slot) if bias_slot else None
            if weight:
                groups.append((weight, bias))
            elif bias:
                groups.append((bias, None))
    if not reader.tensors:
        raise InputError("initializers", "none", f"weights of {', '.join(LAYOUTS)} stored in the model").within(path)
    return Weights(reader.tensors, groups, reader.quantization)


def _input(node, index: int) -> str:
    """The name of input ``index`` of ``node``; "" when the node has no such input."""
    return node.input[index] if index < len(node.input) else ""


def _node_label(node) -> str:
    """A node as errors name it: its op type and name, or its first output where it has no name."""
    return f"{node.op_type} {node.name!r}" if node.name else f"{node.op_type} -> {(node.output or [''])[0]!r}"


class _OnnxReader:
    """One model's initializers and the nodes producing each value; collects the tensors taken so far."""

    def __init__(self, path: Path, model) -> None:
        self.path = path
        self.initializers = {init.name: init for init in model.graph.initializer}
        self.producers = {output: node for node in model.graph.node for output in node.output}
        self.tensors: dict[str, np.ndarray] = {}
        self.quantization: dict[str, QuantParams] = {}
        self._arrays: dict[str, np.ndarray] = {}

    def array(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            self._arrays[name] = _initializer(self.path, self.initializers[name])
        return self._arrays[name]

    def take(self, node, slot: Slot) -> str | None:
        """The stored tensor at ``slot`` of ``node`` (through a DequantizeLinear for a float op), read with its
        quantization; None for no initializer or one taken before with the same quantization."""
        name = _input(node, slot.tensor)
        producer = self.producers.get(name)
        if not slot.quantized and name not in self.initializers and producer and \
                producer.op_type == "DequantizeLinear":
            node, slot, name = producer, DEQUANTIZE, _input(producer, 0)
        if name not in self.initializers:
            return None
        array = self.array(name)
        params = self._params(node, slot, name, array) if slot.quantized else None
        if name in self.tensors:
            before = self.quantization.get(name)
            if (before and before.entry()) != (params and params.entry()):
                raise InputError(f"initializer {name!r}", "quantized twice", "one scale and zero point for a "
                                 "stored weight, whichever nodes read it").within(self.path)
            return None
        self.tensors[name] = array
        if params:
            self.quantization[name] = params
        return name

    def _params(self, node, slot: Slot, name: str, array: np.ndarray) -> QuantParams:
        """The checked scale, zero point and axis of the weight ``name`` at ``slot`` of ``node``."""
        where = _node_label(node)
        block_size = next((a.i for a in node.attribute if a.name == "block_size"), 0)
        if block_size:
            raise InputError(f"{where} block_size", block_size, "0: blocked quantization is not carried, only "
                             "per-tensor or per-axis").within(self.path)
        zero_point = None if slot.zero_point is None else self._parameter(node, slot.zero_point, name, "zero point")
        if zero_point is not None and zero_point.dtype != array.dtype:
            raise InputError(f"{where} input {slot.zero_point} {_input(node, slot.zero_point)!r}",
                             str(zero_point.dtype), f"{array.dtype}, the dtype of the weight {name!r}"
                             ).within(self.path)
        scale = self._scale(node, slot, name)
        sizes = [values.size for values in (scale, zero_point) if values is not None]
        axis = None if all(size == 1 for size in sizes) else slot.axis(node, array.ndim)
        params = QuantParams(zero_point=np.zeros(1, np.int64) if zero_point is None else zero_point, scale=scale,
                             axis=axis)
        try:
            return check_params(name, array, params)
        except QuantizationError as error:
            raise InputError(f"{where} {error.field} of {name!r}", error.value, error.expected).within(self.path) \
                from None

    def _scale(self, node, slot: Slot, name: str) -> np.ndarray | None:
        """The scale: one input, or the product of several (None where one is computed and ``exact_scale`` is
        off, or the slot has none)."""
        if not slot.scale or not slot.exact_scale and not all(_input(node, i) in self.initializers
                                                             for i in slot.scale):
            return None
        factors = [self._parameter(node, index, name, "scale") for index in slot.scale]
        for index, factor in zip(slot.scale, factors):
            if factor is None or factor.dtype.kind != "f":
                raise InputError(f"{_node_label(node)} input {index} {_input(node, index)!r}",
                                 "absent" if factor is None else str(factor.dtype),
                                 f"a float scale of the stored weight {name!r}").within(self.path)
        if len(factors) == 1:
            return factors[0]
        if len({factor.size for factor in factors} - {1}) > 1:
            raise InputError(f"{_node_label(node)} scales", [factor.size for factor in factors],
                             "sizes that broadcast: 1 or one common length").within(self.path)
        return math.prod(factor.astype(np.float32) for factor in factors)

    def _parameter(self, node, index: int, name: str, role: str) -> np.ndarray | None:
        """A scalar or 1-D initializer at input ``index``, flattened; None when the input is absent."""
        where = f"{_node_label(node)} input {index}"
        input_name = _input(node, index)
        if not input_name:
            return None
        if input_name not in self.initializers:
            raise InputError(f"{where} {input_name!r}", "computed in the graph", f"an initializer: the {role} of "
                             f"the stored weight {name!r}").within(self.path)
        value = self.array(input_name)
        if value.ndim > 1:
            raise InputError(f"{where} {input_name!r} shape", list(value.shape), f"a scalar or 1-D {role}").within(
                self.path)
        return value.ravel()


def _initializer(path: Path, tensor) -> np.ndarray:
    """One initializer as an array: stored in the file, of a numeric type, of at most a layer's weights."""
    import onnx

    from aipu.codec.reference.headers import DEFAULT_LIMITS
    from aipu.compiler.graph import initializer_array

    where = f"initializer {tensor.name!r}"
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise InputError(where, "external data", "tensors stored inside the model file").within(path)
    try:
        array = initializer_array(tensor, DEFAULT_LIMITS.max_weights_per_sublayer)
    except InputError as error:
        raise error.within(path) from None
    if array.dtype.kind not in WEIGHT_KINDS:
        raise InputError(where, str(array.dtype), "an integer or float tensor").within(path)
    return array


# --------------------------------------------------------------------------------------------- .npz
def load_npz(path: Path) -> Weights:
    """Every array of the archive, except NAME:scale, NAME:zero_point and NAME:axis: tensor NAME's quantization."""
    from aipu.compiler.npz_file import read_npz

    try:
        members = read_npz(path, _check_member)
        tensors = {name: array for name, array in members.items() if not _quantization_part(name)}
        if not tensors:
            raise InputError("arrays", "none", "at least one tensor")
        return Weights(tensors, None, _npz_quantization(members, tensors))
    except InputError as error:
        raise error.within(path) from None


def _check_member(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    from aipu.codec.reference.headers import DEFAULT_LIMITS

    if dtype.kind not in WEIGHT_KINDS:
        raise InputError(name, str(dtype), "an integer or float tensor")
    if any(size < 0 for size in shape) or math.prod(shape) > DEFAULT_LIMITS.max_weights_per_sublayer:
        raise InputError(name, list(shape), f"a shape of at most {DEFAULT_LIMITS.max_weights_per_sublayer} "
                                            "weights, what a decoder accepts in one layer")


def _quantization_part(member: str) -> tuple[str, str] | None:
    """(NAME, part) for a member NAME:scale, NAME:zero_point or NAME:axis; None for a tensor."""
    name, _, part = member.rpartition(":")
    return (name, part) if name and part in QUANTIZATION_MEMBERS else None


def _npz_quantization(members: dict[str, np.ndarray], tensors: dict[str, np.ndarray]) -> dict[str, QuantParams]:
    """The quantization of each tensor that NAME:scale, NAME:zero_point or NAME:axis members give, checked."""
    parts: dict[str, dict[str, np.ndarray]] = {}
    for member, array in members.items():
        if split := _quantization_part(member):
            parts.setdefault(split[0], {})[split[1]] = array
    quantization = {}
    for name, given in parts.items():
        if name not in tensors:
            raise InputError(f"{name}:{next(iter(given))}", "a member without its tensor",
                             f"NAME:{', NAME:'.join(QUANTIZATION_MEMBERS)} beside an array NAME")
        axis = given.get("axis")
        if axis is not None and (axis.size != 1 or axis.dtype.kind not in "iu"):
            raise InputError(f"{name}:axis", axis, "one integer: the axis of per-axis scales and zero points")
        zero_point = given.get("zero_point", np.zeros(1, np.int64))
        params = QuantParams(zero_point=zero_point.ravel(), scale=given["scale"].ravel() if "scale" in given else None,
                             axis=None if axis is None else int(axis.ravel()[0]))
        try:
            quantization[name] = check_params(name, tensors[name], params)
        except QuantizationError as error:
            raise InputError(name if error.field == "dtype" else f"{name}:{error.field}", error.value,
                             error.expected) from None
    return quantization


def quantization_members(name: str, params: QuantParams, dtype: np.dtype) -> dict[str, np.ndarray]:
    """The .npz members that carry tensor ``name``'s quantization: what ``load_npz`` reads back."""
    members = {f"{name}:zero_point": params.zero_point.astype(dtype)}
    if params.scale is not None:
        members[f"{name}:scale"] = params.scale
    if params.axis is not None:
        members[f"{name}:axis"] = np.int64(params.axis)
    return members
