"""`aipu tai export|import|show`: ONNX to and from the T/AI 115.1-2021 chapter-6 model representation (.tai).

``export --compress`` stores the Conv/ConvTranspose/Gemm/MatMul weights as chapter-10 streams under
Dequantization_tensor records (docs/tai.md, "Compression records"); ``import`` decodes them again.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from aipu.sim.machine.errors import InputError

WEIGHT_INPUTS = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}     # the weight's input position


def compressible_weights(model) -> list[str]:
    """The float32 initializers of rank 2 or more that a Conv, ConvTranspose, Gemm or MatMul reads as its
    weight and no other node reads."""
    from onnx import TensorProto
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    initializers = {t.name: t for t in model.graph.initializer}
    chosen = []
    for node in model.graph.node:
        position = WEIGHT_INPUTS.get(node.op_type)
        if position is None or len(node.input) <= position:
            continue
        tensor = initializers.get(node.input[position])
        if (tensor is not None and tensor.data_type == TensorProto.FLOAT and len(tensor.dims) >= 2
                and readers[tensor.name] == 1 and tensor.name not in chosen):
            chosen.append(tensor.name)
    return chosen


def _cmd_export(args: argparse.Namespace) -> int:
    from aipu.compiler.graph import read_model
    from aipu.tai.file import dumps
    from aipu.tai.from_onnx import from_onnx
    model = read_model(args.model)
    compress = {}
    if args.compress:
        from aipu.app.warm_up import compile_kernels_once
        from aipu.codec.api import CodecOptions
        from aipu.codec.encoder import FAST_OPTIONS
        from aipu.codec.quantize import MAX_BITDEPTH
        if not 2 <= args.bits <= MAX_BITDEPTH + 1:
            raise InputError("--bits", args.bits, f"an integer 2 .. {MAX_BITDEPTH + 1} (N-bit signed levels)")
        options = CodecOptions(bitdepth=args.bits - 1, encoder=FAST_OPTIONS)
        compile_kernels_once("codec")
        compress = {name: options for name in compressible_weights(model)}
    try:
        data = dumps(from_onnx(model, compress))
    except InputError as error:
        raise error.within(args.model)
    Path(args.output).write_bytes(data)
    print(f"{args.output}: {len(model.graph.node)} nodes, {len(compress)} weights as chapter-10 streams, "
          f"{len(data)} bytes")
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from aipu.app.warm_up import compile_kernels_once
    from aipu.tai.file import load
    from aipu.tai.to_onnx import to_onnx
    document = load(args.model)
    if any(node.operator_type == "Dequantization_tensor" for g in document.model.graph for node in g.operator_node):
        compile_kernels_once("codec")
    if args.model_index < 0:
        raise InputError("--model", args.model_index, "a model index 0 .. (a multi-model file's models - 1)")
    try:
        model = to_onnx(document, args.model_index)
    except InputError as error:
        raise error.within(args.model)
    Path(args.output).write_bytes(model.SerializeToString())
    print(f"{args.output}: {len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from aipu.tai.file import load
    for line in summary(load(args.model)):
        print(line)
    return 0


def summary(document) -> list[str]:
    """A readable summary: the model's fields, each graph with its nodes (operator, inputs, outputs,
    attributes) and the stored parameters (data type, shape, bytes)."""
    from aipu.tai.records import attribute_value
    model = document.model
    lines = [f"model {model.model_name!r}: {model.Version}, from {model.framework_name or '?'} "
             f"{model.framework_version}".rstrip()]
    for graph in model.graph:
        lines.append(f"graph {graph.name!r}: {len(graph.operator_node)} nodes, inputs "
                     f"{[v.name for v in graph.input_nodes]}, outputs {[v.name for v in graph.output_nodes]}")
        for node in graph.operator_node:
            ins = ", ".join(f"{e.key}={'+'.join(v.name for v in e.value)}" for e in node.input)
            outs = ", ".join(f"{e.key}={'+'.join(v.name for v in e.value)}" for e in node.output)
            attributes = ", ".join(f"{a.name}={_shown(attribute_value(a))}" for a in node.attribute)
            lines.append(f"  {node.name}: {node.operator_type}({ins}) -> {outs}" + (f" [{attributes}]"
                                                                                    if attributes else ""))
    lines.append(f"parameters: {len(document.parameters)}, "
                 f"{sum(p.array.nbytes for p in document.parameters.values())} bytes")
    for (layer, key), parameter in document.parameters.items():
        lines.append(f"  {layer}/{key}: {parameter.value_type} {list(parameter.array.shape)} "
                     f"{parameter.array.nbytes} bytes")
    return lines


def _shown(value) -> str:
    if hasattr(value, "parameter_key"):
        return f"<tensor {value.parameter_layer}/{value.parameter_key}>"
    if hasattr(value, "ListFields"):
        return f"<{type(value).__name__}>"
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "replace"))
    if isinstance(value, list) and len(value) > 8:
        return f"[{', '.join(map(str, value[:8]))}, ... ({len(value)})]"
    if isinstance(value, float):
        return str(np.float32(value))
    return str(value)


def register(subparsers: argparse._SubParsersAction) -> None:
    tai = subparsers.add_parser("tai", help="ONNX <-> the T/AI 115.1-2021 model representation (.tai)",
                                description=__doc__.splitlines()[0])
    commands = tai.add_subparsers(dest="tai_command", metavar="COMMAND", required=True)
    export = commands.add_parser("export", help="ONNX model -> .tai")
    export.add_argument("model", help="model.onnx (the CNN operator subset, docs/tai.md)")
    export.add_argument("-o", "--output", required=True, help="output .tai")
    export.add_argument("--compress", action="store_true",
                        help="store Conv/ConvTranspose/Gemm/MatMul weights as chapter-10 streams")
    export.add_argument("--bits", type=int, default=8, help="N-bit signed levels of --compress (default 8)")
    export.set_defaults(func=_cmd_export)
    imported = commands.add_parser("import", help=".tai -> ONNX model")
    imported.add_argument("model", help="model.tai")
    imported.add_argument("-o", "--output", required=True, help="output .onnx")
    imported.add_argument("--model", dest="model_index", type=int, default=0, metavar="K",
                          help="a multi-model file (`aipu multimodel tai`): rebuild its model K (default 0)")
    imported.set_defaults(func=_cmd_import)
    show = commands.add_parser("show", help="summary of a .tai: graph, nodes, parameters")
    show.add_argument("model", help="model.tai")
    show.set_defaults(func=_cmd_show)
