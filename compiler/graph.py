"""The ONNX front end: a float ONNX model -> a checked float graph in which every tensor's shape is known.

A user's model is hostile until checked. :func:`load_graph` reads the file (a bad protobuf, external data,
an opset below 11, a graph onnx's checker refuses: one :class:`InputError` each), fixes the input shapes
(the model's own dimensions; a symbolic batch dimension is 1; ``--input-shape name=1x3xHxW`` for other
symbolic dimensions or to override), then repeats
onnx's shape inference and constant folding until nothing changes: Constant nodes, Shape and Size of
tensors whose shape is known, and whatever arithmetic on constants follows them (the Shape -> Gather ->
Concat -> Reshape chains exporters write) become constants, evaluated by onnx's reference evaluator.
:mod:`aipu.compiler.normalize` then simplifies the graph for the quantizer and lists what it cannot run.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx.reference
from onnx import numpy_helper, shape_inference

from aipu.sim.machine.errors import InputError
from aipu.sim.machine.files import read_at_most
from aipu.tai.file import is_tai, loads
from aipu.tai.to_onnx import convert

MIN_OPSET = 11
MAX_MODEL_BYTES = 1 << 31            # protobuf's own limit for one message
MAX_TENSOR_ELEMENTS = 1 << 31        # no tensor of a CNN for the NPU comes near; bounds memory on hostile shapes
FOLDED_ELEMENTS = 1 << 24            # constants folded at compile time stay this small
_FOLD_ROUNDS = 64                    # each round folds at least one node; a graph needing more is unusual
# never folded: random values, and the quantization boundaries whose integers a pre-quantized model carries
_KEPT_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                       "Bernoulli", "QuantizeLinear", "DequantizeLinear"})
_SHAPE_SPEC = re.compile(r"^([^=]{1,256})=(\d{1,12}(?:x\d{1,12}){0,7})$")


@dataclass(frozen=True)
class Node:
    """One ONNX node with its attributes decoded (tensors as numpy arrays)."""

    name: str
    op: str
    inputs: tuple[str, ...]        # "" marks an omitted optional input
    outputs: tuple[str, ...]
    attrs: dict = field(default_factory=dict)
    domain: str = ""


@dataclass
class Graph:
    """A float graph: ``nodes`` in topological order, ``constants`` for initializers and folded values,
    ``shapes``/``dtypes`` for every tensor inference could shape (normalize.check requires all), graph
    ``inputs`` (float32) and ``outputs``."""

    source: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: list[Node]
    constants: dict[str, np.ndarray]
    shapes: dict[str, tuple[int, ...]]
    dtypes: dict[str, np.dtype]
    opset: int
    problem: InputError | None = None   # why strict shape inference failed, if it did (see normalize.check)
    circulant: dict[str, tuple[int, tuple[int, ...]]] = field(default_factory=dict)   # node: (L, signs), from a .tai

    def producer(self) -> dict[str, Node]:
        return {name: node for node in self.nodes for name in node.outputs if name}

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    users.setdefault(name, []).append(node)
        return users

    def to_onnx(self, *, every_tensor_an_output: bool = False) -> onnx.ModelProto:
        """The graph as an ONNX model (for onnxruntime: float runs, calibration). ``every_tensor_an_output``
        also lists each computed tensor as an output, so that one run yields every activation."""
        def value_info(name: str) -> onnx.ValueInfoProto:
            return onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(self.dtypes[name]),
                                                      list(self.shapes[name]))
        outputs = list(self.outputs)
        if every_tensor_an_output:
            outputs += [name for node in self.nodes for name in node.outputs if name and name not in self.outputs]
        nodes = [onnx.helper.make_node(node.op, list(node.inputs), list(node.outputs), name=node.name,
                                       domain=node.domain or None,
                                       **{key: numpy_helper.from_array(value) if isinstance(value, np.ndarray)
                                          else value for key, value in node.attrs.items()})
                 for node in self.nodes]
        graph = onnx.helper.make_graph(nodes, "aipu", [value_info(name) for name in self.inputs],
                                       [value_info(name) for name in outputs],
                                       [numpy_helper.from_array(value, name) for name, value in self.constants.items()])
        return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", self.opset)],
                                      ir_version=onnx.IR_VERSION)


def parse_input_shapes(specs: list[str] | None) -> dict[str, tuple[int, ...]]:
    """``--input-shape name=1x3x224x224`` (repeatable) -> {name: shape}; every dimension at least 1."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs or ():
        match = _SHAPE_SPEC.match(spec)
        if not match:
            raise InputError("--input-shape", spec, "expected NAME=D0xD1x... with positive integer dimensions")
        dims = tuple(int(d) for d in match.group(2).split("x"))
        if min(dims) < 1 or math.prod(dims) > MAX_TENSOR_ELEMENTS:
            raise InputError("--input-shape", spec, f"dimensions >= 1 and at most {MAX_TENSOR_ELEMENTS} elements")
        if match.group(1) in shapes:
            raise InputError("--input-shape", spec, "each input named once")
        shapes[match.group(1)] = dims
    return shapes


def load_graph(path: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None) -> Graph:
    """Read, check and shape an ONNX float model; :class:`InputError` naming the file on anything unusable."""
    path = Path(path)
    model, circulant = _read(path)
    try:
        graph = _build(model, input_shapes or {}, str(path))
    except InputError as error:
        raise error.within(path)
    for node in graph.nodes:
        if node.op in ("Conv", "Gemm") and len(node.inputs) > 1 and node.inputs[1] in circulant:
            size, signs = circulant[node.inputs[1]]
            graph.circulant[node.name] = (size, tuple(int(sign) for sign in signs))
    return graph


def read_model(path: str | Path) -> onnx.ModelProto:
    """The ONNX model in the regular file ``path`` of at most MAX_MODEL_BYTES, parsed, with a graph; InputError
    naming the file otherwise. A .tai file (T/AI 115.1-2021 chapter 6, docs/tai.md) is read as the ONNX model
    it represents."""
    return _read(path)[0]


def _read(path: str | Path) -> tuple[onnx.ModelProto, dict[str, tuple[int, np.ndarray]]]:
    """:func:`read_model`'s model and, for a .tai, its block-circulant weights (aipu.tai.to_onnx.convert)."""
    data = read_at_most(path, MAX_MODEL_BYTES)
    if is_tai(data):            # a T/AI 115.1 representation, known by its magic whatever its name
        try:
            return convert(loads(data))
        except InputError as error:
            raise error.within(path)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:   # protobuf raises its own DecodeError and others on arbitrary bytes
        raise InputError("file", Path(path).name, f"not an ONNX model ({type(exc).__name__}: {exc})").within(
            path) from None
    if not model.HasField("graph"):
        raise InputError("graph", None, "an ONNX model with a graph").within(path)
    return model, {}


def _opset(model: onnx.ModelProto) -> int:
    versions = [entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")]
    if not versions:
        raise InputError("opset_import", [entry.domain for entry in model.opset_import],
                         "the default ONNX domain ('') must be imported")
    version, newest = versions[0], onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= version <= newest:
        raise InputError("opset", version, f"{MIN_OPSET} .. {newest} (older models: convert with "
                                           "onnx.version_converter)")
    return version


def _check(model: onnx.ModelProto) -> None:
    for initializer in model.graph.initializer:
        if initializer.data_location == onnx.TensorProto.EXTERNAL:
            raise InputError(f"initializer {initializer.name!r}", "external data", "weights stored in the model file")
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError, TypeError) as exc:
        raise InputError("model", "invalid", f"onnx.checker: {' '.join(str(exc).split())[:300]}") from exc


def _build(model: onnx.ModelProto, input_shapes: dict[str, tuple[int, ...]], source: str) -> Graph:
    opset = _opset(model)
    _check(model)
    constants = {init.name: initializer_array(init) for init in model.graph.initializer}
    inputs = [value for value in model.graph.input if value.name not in constants]
    _fix_input_shapes(model, inputs, input_shapes)
    _free_unknown_dimensions(model)
    for index, node in enumerate(model.graph.node):
        node.name = node.name or f"{node.op_type}_{index}"     # every message names its node
    problem = None
    for _ in range(_FOLD_ROUNDS):
        model, problem = _infer(model)
        if not (_fold_one_round(model, constants, opset) | _contrib_shapes(model, constants)):
            break
    return _to_graph(model, constants, source, opset, problem)


# onnxruntime's quantized contrib operators whose output shape is a standard operator's: that operator, the
# positions of its inputs, and the position of the output zero point (the output's type)
CONTRIB_STANDARD_FORMS = {
    "QLinearAdd": ("Add", (0, 3), 7), "QLinearMul": ("Mul", (0, 3), 7), "QLinearSigmoid": ("Sigmoid", (0,), 4),
    "QLinearLeakyRelu": ("LeakyRelu", (0,), 4), "QLinearAveragePool": ("AveragePool", (0,), 4),
    "QLinearSoftmax": ("Softmax", (0,), 4), "QLinearGlobalAveragePool": ("GlobalAveragePool", (0,), 4),
}


def contrib_standard_form(op: str, inputs: tuple[str, ...]) -> tuple[str, tuple[str, ...], str] | None:
    """(standard operator, its inputs, the output zero point's name) of a quantized contrib operator; the
    inputs of QLinearConcat are its (X, X_scale, X_zero_point) triples after Y_scale and Y_zero_point."""
    if op == "QLinearConcat":
        return "Concat", tuple(inputs[2::3]), inputs[1] if len(inputs) > 1 else ""
    if op not in CONTRIB_STANDARD_FORMS:
        return None
    standard, positions, zero_point = CONTRIB_STANDARD_FORMS[op]
    if max(positions) >= len(inputs):
        return None
    return standard, tuple(inputs[p] for p in positions), inputs[zero_point] if zero_point < len(inputs) else ""


def _contrib_shapes(model: onnx.ModelProto, constants: dict[str, np.ndarray]) -> bool:
    """Output shapes of the onnxruntime contrib operators of pre-quantized models (onnx's inference skips
    their domain): QGemm's [M, N], and for the others the shape onnx infers for their standard operator on
    the same input shapes and attributes. Returns whether any was added; typed as their output zero point
    (QGemm without one: float)."""
    shapes = _known_shapes(model, constants)
    types = {value.name: value.type.tensor_type.elem_type for value in (*model.graph.input, *model.graph.value_info)}
    types.update({name: onnx.helper.np_dtype_to_tensor_dtype(value.dtype) for name, value in constants.items()})
    added = False
    for node in model.graph.node:
        if node.domain != "com.microsoft" or not node.output or node.output[0] in shapes:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        shape, zero_point = None, ""
        if node.op_type == "QGemm" and len(node.input) > 3:
            ins = [shapes.get(node.input[0]), shapes.get(node.input[3])]
            zero_point = node.input[8] if len(node.input) > 8 else ""
            if ins[0] and ins[1] and len(ins[0]) == len(ins[1]) == 2:
                rows = ins[0][1] if attrs.get("transA", 0) else ins[0][0]
                shape = (rows, ins[1][0] if attrs.get("transB", 0) else ins[1][1])
        elif (form := contrib_standard_form(node.op_type, tuple(node.input))) is not None:
            standard, inputs, zero_point = form
            if all(name in shapes for name in inputs) and not attrs.get("channels_last"):
                shape = _standard_shape(standard, [shapes[name] for name in inputs],
                                        {k: v for k, v in attrs.items() if k not in ("opset", "channels_last")})
        if shape is None:
            continue
        elem = types.get(zero_point, onnx.TensorProto.FLOAT) if zero_point else onnx.TensorProto.FLOAT
        model.graph.value_info.append(onnx.helper.make_tensor_value_info(node.output[0], elem, list(shape)))
        added = True
    return added


def _standard_shape(op: str, input_shapes: list[tuple[int, ...]], attrs: dict) -> tuple[int, ...] | None:
    """The output shape onnx infers for one ``op`` node on float inputs of ``input_shapes`` (None: none)."""
    names = [f"x{index}" for index in range(len(input_shapes))]
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node(op, names, ["y"], **attrs)], "shape",
        [onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, list(shape))
         for name, shape in zip(names, input_shapes)], [onnx.helper.make_empty_tensor_value_info("y")])
    try:
        inferred = shape_inference.infer_shapes(onnx.helper.make_model(graph), strict_mode=True)
    except Exception:       # onnx raises several types on shapes or attributes its operator refuses
        return None
    for value in inferred.graph.output:
        dims = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            return tuple(d.dim_value for d in dims)
    return None


def initializer_array(tensor: onnx.TensorProto, max_elements: int = MAX_TENSOR_ELEMENTS) -> np.ndarray:
    """An initializer as an array, its element count checked before its data is converted."""
    if any(size < 0 for size in tensor.dims) or math.prod(tensor.dims) > max_elements:
        raise InputError(f"initializer {tensor.name!r} shape", list(tensor.dims),
                         f"at most {max_elements} elements")
    try:
        return numpy_helper.to_array(tensor)
    except Exception as exc:   # truncated raw_data, unknown types
        raise InputError(f"initializer {tensor.name!r}", "its data", f"readable as its dtype and dims ({exc})") from exc


def _fix_input_shapes(model: onnx.ModelProto, inputs: list, input_shapes: dict[str, tuple[int, ...]]) -> None:
    """Set every graph input's dimensions: the model's where it states them, ``input_shapes`` where given."""
    names = [value.name for value in inputs]
    for name in input_shapes:
        if name not in names:
            raise InputError("--input-shape", name, f"an input of the model ({', '.join(names)})")
    for value in inputs:
        tensor_type = value.type.tensor_type
        if value.type.WhichOneof("value") != "tensor_type" or tensor_type.elem_type != onnx.TensorProto.FLOAT:
            raise InputError(f"input {value.name!r} type", onnx.helper.printable_type(value.type),
                             "float32 tensors (pre-quantized inputs come as QuantizeLinear in the graph)")
        dims = tensor_type.shape.dim
        given = input_shapes.get(value.name)
        if given is not None:
            if tensor_type.HasField("shape") and len(dims) != len(given):
                raise InputError(f"--input-shape {value.name}", "x".join(map(str, given)),
                                 f"rank {len(dims)}, as the model declares")
            for dim, size in zip(dims, given):
                if _fixed(dim) and dim.dim_value != size:
                    raise InputError(f"--input-shape {value.name}", "x".join(map(str, given)),
                                     f"the model fixes this dimension to {dim.dim_value}")
            tensor_type.shape.Clear()
            for size in given:
                tensor_type.shape.dim.add().dim_value = size
            continue
        if not tensor_type.HasField("shape"):
            raise InputError(f"input {value.name!r} shape", "unknown", f"give it with --input-shape {value.name}=...")
        for index, dim in enumerate(dims):
            if index == 0 and not _fixed(dim):
                dim.dim_value = 1           # a symbolic or -1 batch: one image, as the NPU runs
            if not _fixed(dim):
                raise InputError(f"input {value.name!r} dimension {index}",
                                 dim.dim_param or (dim.dim_value if dim.HasField("dim_value") else "unknown"),
                                 f"a fixed size: give the shape with --input-shape {value.name}=1x...")
        if math.prod(dim.dim_value for dim in dims) > MAX_TENSOR_ELEMENTS:
            raise InputError(f"input {value.name!r} shape", [dim.dim_value for dim in dims],
                             f"at most {MAX_TENSOR_ELEMENTS} elements")


def _free_unknown_dimensions(model: onnx.ModelProto) -> None:
    """Dimensions an exporter wrote as -1 or 0 in the graph's value_info and outputs (Paddle2ONNX writes a free
    batch so) become unknown, for shape inference to fill in: taken as sizes, they contradict the inferred
    ones (an Identity's "(1) vs (-1)")."""
    for value in (*model.graph.value_info, *model.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value < 1:
                dim.Clear()


def _fixed(dim) -> bool:
    """Whether the model states this input dimension's size: a positive dim_value (exporters write -1 or 0
    for a free batch, as others write a dim_param)."""
    return dim.HasField("dim_value") and dim.dim_value >= 1


def _infer(model: onnx.ModelProto) -> tuple[onnx.ModelProto, InputError | None]:
    """onnx's shape inference in strict mode; where that fails (an operator it does not know, shapes that do
    not agree), what the lenient mode infers and the strict error, for after the unsupported nodes are listed."""
    try:
        return shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True), None
    except (shape_inference.InferenceError, onnx.checker.ValidationError, ValueError, TypeError) as exc:
        problem = InputError("shape inference", "failed", " ".join(str(exc).split())[:300])
    try:
        return shape_inference.infer_shapes(model, data_prop=True), problem
    except (shape_inference.InferenceError, onnx.checker.ValidationError, ValueError, TypeError):
        return model, problem


def _known_shapes(model: onnx.ModelProto, constants: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    shapes = {name: value.shape for name, value in constants.items()}
    for value in (*model.graph.input, *model.graph.value_info, *model.graph.output):
        tensor_type = value.type.tensor_type
        if value.type.WhichOneof("value") == "tensor_type" and tensor_type.HasField("shape"):
            dims = tensor_type.shape.dim
            if all(dim.HasField("dim_value") and dim.dim_value >= 0 for dim in dims):   # lenient inference
                # can leave negative sizes behind a node whose shapes do not agree: unknown
                shapes.setdefault(value.name, tuple(dim.dim_value for dim in dims))
    return shapes


def _fold_one_round(model: onnx.ModelProto, constants: dict[str, np.ndarray], opset: int) -> bool:
    """Replace every node whose outputs follow from constants and known shapes by initializers."""
    shapes = _known_shapes(model, constants)
    kept, folded = [], False
    for node in model.graph.node:
        values = _fold(node, constants, shapes, opset)
        if values is None:
            kept.append(node)
            continue
        folded = True
        for name, value in zip(node.output, values):
            if name:
                constants[name] = value
                model.graph.initializer.append(numpy_helper.from_array(value, name))
    if folded:
        del model.graph.node[:]
        model.graph.node.extend(kept)
    return folded


def _fold(node: onnx.NodeProto, constants: dict[str, np.ndarray], shapes: dict, opset: int) -> list[np.ndarray] | None:
    """The node's outputs if they are constant and small, else None."""
    if node.domain not in ("", "ai.onnx") or node.op_type in _KEPT_OPS or not node.output:
        return None
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type in ("Shape", "Size") and node.input[0] in shapes and node.input[0] not in constants:
        shape = np.array(shapes[node.input[0]], np.int64)
        if node.op_type == "Size":
            return [np.array(shape.prod(), np.int64)]
        return [shape[attrs.get("start", 0):attrs.get("end", len(shape))]]
    if any(name and name not in constants for name in node.input):
        return None
    if any(name not in shapes or math.prod(shapes[name]) > FOLDED_ELEMENTS for name in node.output if name):
        return None   # only folded where shape inference bounds the result
    feeds = {name: constants[name] for name in node.input if name}
    graph = onnx.helper.make_graph([node], "fold", [], [onnx.helper.make_empty_tensor_value_info(name)
                                                         for name in node.output if name],
                                   [numpy_helper.from_array(value, name) for name, value in feeds.items()])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    try:
        results = onnx.reference.ReferenceEvaluator(model).run(None, {})
    except Exception as exc:   # the reference evaluator raises many types on bad attributes or data
        raise InputError(f"node {node.name!r} ({node.op_type})", "its constant inputs",
                         f"computable ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})") from exc
    outputs = iter(np.asarray(value) for value in results)
    return [next(outputs) if name else np.empty(0) for name in node.output]


def _to_graph(model: onnx.ModelProto, constants: dict[str, np.ndarray], source: str, opset: int,
              problem: InputError | None) -> Graph:
    shapes = _known_shapes(model, constants)
    dtypes = {name: value.dtype for name, value in constants.items()}
    for value in (*model.graph.input, *model.graph.value_info, *model.graph.output):
        if value.type.WhichOneof("value") == "tensor_type" and value.type.tensor_type.elem_type:
            dtypes.setdefault(value.name, onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
    nodes = []
    for proto in model.graph.node:
        name = proto.name
        for tensor in proto.output:
            if tensor in shapes and math.prod(shapes[tensor]) > MAX_TENSOR_ELEMENTS:
                raise InputError(f"node {name!r} ({proto.op_type}) output {tensor!r} shape", list(shapes[tensor]),
                                 f"at most {MAX_TENSOR_ELEMENTS} elements")
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
        attrs = {key: numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value
                 for key, value in attrs.items()}
        nodes.append(Node(name, proto.op_type, tuple(proto.input), tuple(proto.output), attrs, proto.domain))
    inputs = tuple(value.name for value in model.graph.input if value.name not in constants)
    outputs = tuple(value.name for value in model.graph.output)
    for name in outputs:
        if name in constants:
            raise InputError("graph output", name, "computed from the inputs (this one is a constant)")
    used = {name for node in nodes for name in node.inputs} | set(outputs)
    return Graph(source, inputs, outputs, nodes, {k: v for k, v in constants.items() if k in used},
                 {k: tuple(int(d) for d in v) for k, v in shapes.items()}, dtypes, opset, problem)
