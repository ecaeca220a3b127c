"""The ONNX operators the compiler lowers, each with its T/AI 115.1-2021 §6.3.1 operator and field names.

One :class:`OpSpec` a row of docs/tai.md's mapping table. An ONNX input at position i is the OperatorNode
input under ``inputs[i]`` (a key ending in ``*`` takes every remaining input, as concat's list X does); an
ONNX attribute is the OperatorNode attribute of its ``renamed`` name, else of its own name (the latitude of
§6.2.1 b) and §6.3.1 b) to add fields the tables lack, e.g. asymmetric ``pads``). ``fixed`` attributes are
the standard's fields that ONNX implies (data_format "NCHW", pool2d's pool_type): written on export, they
select the row on import and are not ONNX attributes. ``when`` picks a row by an ONNX attribute (Resize's
mode) and is restored on import. ``defaults`` are written explicitly where the standard's default differs
from ONNX's (hard_sigmoid's alpha is 2.0 in Table 136, 0.2 in ONNX).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import onnx

# ONNX element types and their Table 14 ValueType
ONNX_TYPES = {onnx.TensorProto.FLOAT: "FLOAT32", onnx.TensorProto.UINT8: "UINT8", onnx.TensorProto.INT8: "INT8",
              onnx.TensorProto.UINT16: "UINT16", onnx.TensorProto.INT16: "INT16", onnx.TensorProto.INT32: "INT32",
              onnx.TensorProto.INT64: "INT64", onnx.TensorProto.STRING: "STRING", onnx.TensorProto.BOOL: "BOOL",
              onnx.TensorProto.FLOAT16: "FLOAT16", onnx.TensorProto.DOUBLE: "FLOAT64",
              onnx.TensorProto.UINT32: "UINT32", onnx.TensorProto.UINT64: "UINT64",
              onnx.TensorProto.COMPLEX64: "COMPLEX64", onnx.TensorProto.COMPLEX128: "COMPLEX128",
              onnx.TensorProto.INT4: "INT4", onnx.TensorProto.UINT4: "UINT4"}


@dataclass(frozen=True)
class OpSpec:
    onnx: str
    tai: str
    clause: str                            # the §6.3.1 table, or "extension" for an operator 6.3.1 lacks
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    renamed: dict[str, str] = field(default_factory=dict)      # ONNX attribute -> T/AI attribute
    fixed: dict[str, object] = field(default_factory=dict)
    when: dict[str, object] = field(default_factory=dict)
    defaults: dict[str, object] = field(default_factory=dict)
    booleans: tuple[str, ...] = ()         # ONNX int attributes the standard types as bool
    filters: str | None = None             # how num_fliters follows from the weight: "out" W[0], "transposed"

    def tai_name(self, attribute: str) -> str:
        return self.renamed.get(attribute, attribute)

    def onnx_name(self, attribute: str) -> str:
        return next((onnx for onnx, tai in self.renamed.items() if tai == attribute), attribute)


_CONV = {"kernel_shape": "filter_size", "strides": "stride", "pads": "padding", "dilations": "dilation",
         "group": "groups"}
_NCHW = {"data_format": "NCHW"}
_ELEMENTWISE = ("X", "Y")

SPECS: tuple[OpSpec, ...] = (
    OpSpec("Conv", "conv2d", "Table 37", ("X", "W", "B"), ("Y",), _CONV, _NCHW, filters="out"),
    OpSpec("ConvTranspose", "conv2d_transpose", "Table 39", ("X", "W", "B"), ("Y",),
           {**_CONV, "output_shape": "output_size"}, _NCHW, filters="transposed"),
    OpSpec("Gemm", "gemm", "Table 135", ("X", "Y", "Z"), ("output",), {"transA": "transX", "transB": "transY"}),
    OpSpec("MatMul", "mat_mul", "Table 78", _ELEMENTWISE, ("Z",)),
    OpSpec("BatchNormalization", "batch_normalization", "Table 132", ("X", "W", "B", "means", "var"),
           ("Y", "mean", "var"), {"training_mode": "is_training"}, {"data_format": "channel_first"},
           booleans=("training_mode",)),
    OpSpec("Relu", "relu", "Table 102", ("X",), ("Y",)),
    OpSpec("LeakyRelu", "leaky_relu", "Table 140", ("X",), ("Y",), defaults={"alpha": 0.01}),
    OpSpec("PRelu", "prelu", "Table 142", ("X", "slope"), ("Y",)),
    OpSpec("Clip", "clip", "Table 133", ("X", "MIN", "MAX"), ("Y",), {"min": "MIN", "max": "MAX"}),
    OpSpec("Sigmoid", "sigmoid", "Table 143", ("X",), ("Y",)),
    OpSpec("Tanh", "tanh", "Table 148", ("X",), ("Y",)),
    OpSpec("HardSigmoid", "hard_sigmoid", "Table 136", ("X",), ("Y",), defaults={"alpha": 0.2, "beta": 0.5}),
    OpSpec("HardSwish", "hard_swish", "extension", ("X",), ("Y",)),
    OpSpec("Swish", "swish", "extension", ("X",), ("Y",)),
    OpSpec("Gelu", "gelu", "extension", ("X",), ("Y",)),
    OpSpec("Exp", "exp", "Table 58", ("X",), ("Y",)),
    OpSpec("Softmax", "softmax", "Table 145", ("X",), ("Y",)),
    OpSpec("MaxPool", "max_pool", "Table 79", ("X",), ("Y", "Indices"),
           fixed={"date_format": "channel_first"}),
    OpSpec("AveragePool", "average_pool", "Table 30", ("X",), ("Y",), fixed={"data_format": "NCHW"}),
    OpSpec("GlobalAveragePool", "pool2d", "Table 88", ("X",), ("Y",),
           fixed={"pool_type": "avg", "global_pooling": True}),
    OpSpec("GlobalMaxPool", "pool2d", "Table 88", ("X",), ("Y",), fixed={"pool_type": "max", "global_pooling": True}),
    OpSpec("Add", "add", "Table 20", _ELEMENTWISE, ("Z",)),
    OpSpec("Sub", "sub", "Table 118", _ELEMENTWISE, ("Z",)),
    OpSpec("Mul", "mul", "Table 81", _ELEMENTWISE, ("Z",)),
    OpSpec("Div", "div", "Table 50", _ELEMENTWISE, ("Z",)),
    OpSpec("Concat", "concat", "Table 34", ("X*",), ("Y",)),
    OpSpec("Resize", "resize_nearest", "Table 152", ("X", "roi", "scales", "Shape"), ("Y",),
           when={"mode": b"nearest"}),
    OpSpec("Resize", "resize_bilinear", "Table 151", ("X", "roi", "scales", "Shape"), ("Y",),
           when={"mode": b"linear"}),
    OpSpec("Pad", "pad", "Table 86", ("X", "pads", "value", "axes"), ("Y",)),
    OpSpec("Slice", "slice", "Table 111", ("X", "starts", "ends", "axes", "steps"), ("Y",)),
    OpSpec("Split", "split", "Table 113", ("X", "split"), ("Y*",)),
    OpSpec("Reshape", "reshape", "Table 104", ("X", "shape"), ("Y",)),
    OpSpec("Flatten", "flatten", "Table 60", ("X",), ("Y",)),
    OpSpec("Transpose", "transpose", "Table 122", ("X",), ("Y",)),
    OpSpec("Squeeze", "squeeze", "Table 121", ("X", "axes"), ("Y",)),
    OpSpec("Unsqueeze", "unsqueeze", "Table 123", ("X", "axes"), ("Y",)),
    OpSpec("Identity", "assign", "Table 28", ("X",), ("Y",)),
    OpSpec("Dropout", "dropout", "Table 51", ("X", "ratio", "training_mode"), ("Y", "mask")),
    OpSpec("Cast", "cast", "Table 32", ("X",), ("Y",)),
    OpSpec("Shape", "shape", "Table 108", ("X",), ("Y",)),
    OpSpec("Constant", "constant", "Table 35", (), ("Output",)),
)

BY_ONNX: dict[str, list[OpSpec]] = {}
BY_TAI: dict[str, list[OpSpec]] = {}
for _spec in SPECS:
    BY_ONNX.setdefault(_spec.onnx, []).append(_spec)
    BY_TAI.setdefault(_spec.tai, []).append(_spec)


def expand_keys(keys: tuple[str, ...], count: int) -> list[str]:
    """The key of each of ``count`` positions: a trailing ``K*`` key names every remaining position K."""
    if keys and keys[-1].endswith("*"):
        return [*keys[:-1], *[keys[-1][:-1]] * max(count - len(keys) + 1, 0)][:max(count, len(keys) - 1)]
    return list(keys[:count])
