"""`aipu multimodel compile|tai`: several same-topology models compressed together (T/AI 115.1-2021 §7.1,
docs/multimodel.md).

``compile``: one DRAM image holding the weight bytes the models share once and each model's own, and a program
per model on it; every merged program is checked bit for bit against the model's own program on a calibration
sample (the interpreter). ``tai``: one .tai file holding the shared weights once (intra-layer sharing,
``--slice``) or a base model and each model's k-means coded difference (residual quantization, ``--base``);
`aipu tai import FILE --model K` rebuilds model K.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from aipu.sim.machine.errors import InputError


def parse_slices(items: list[str] | None) -> dict[str, int]:
    """``LAYER=S`` items as {layer: slice_indicator}; InputError naming a malformed one."""
    slices = {}
    for item in items or []:
        name, _, value = item.partition("=")
        if not name or not value.isdigit() or name in slices:
            raise InputError("--slice", item, "LAYER=S, S the number of leading filters the models share, each "
                                              "layer once")
        slices[name] = int(value)
    return slices


def _read_models(paths: list[str]):
    import onnx

    from aipu.compiler.graph import read_model
    from aipu.compress.multi_model_onnx import check_same_topology

    if len(paths) < 2:
        raise InputError("models", len(paths), "two or more ONNX models of one topology")
    models = [read_model(path) for path in paths]
    for model, path in zip(models, paths):
        try:
            onnx.checker.check_model(model)
        except (onnx.checker.ValidationError, ValueError, TypeError) as exc:
            raise InputError("model", "invalid", f"onnx.checker: {' '.join(str(exc).split())[:300]}").within(path)
    check_same_topology(models, [str(path) for path in paths])
    return models


def _names(paths: list[str]) -> list[str]:
    stems = [Path(path).stem for path in paths]
    return stems if len(set(stems)) == len(stems) else [f"model{index}" for index in range(len(paths))]


def _cmd_compile(args: argparse.Namespace) -> int:
    from aipu.compiler.multi_model import compile_models, merge, write_merged
    from aipu.sim.machine.arch import DEFAULT, HardwareConfig

    slices = parse_slices(args.slice)
    _read_models(args.models)
    config = HardwareConfig.load(args.config) if args.config else DEFAULT
    members = compile_models(args.models, args.calib, config=config, k_boundaries=slices,
                             names=_names(args.models))
    merged = merge([member.network for member in members])
    figures = write_merged(members, merged, args.output, args.models)
    checked = check_bit_exact(members, merged, args.calib)
    print(f"{args.output}: {len(members)} models on one DRAM image of {figures['merged_dram_bytes']:,} bytes "
          f"(separate images: {figures['separate_dram_bytes']:,}); shared weight bytes stored once: "
          f"{figures['shared_bytes']:,}")
    for model in figures["models"]:
        print(f"  {model['name']:<16} constants {model['constant_bytes']:>8,} B, shared {model['shared_bytes']:>8,} B,"
              f" reloaded on a switch to it {model['switch_bytes']:>8,} B")
    print(f"every merged program bit-exact against its own on {checked} sample(s) (interpreter)")
    return 0


def check_bit_exact(members, merged, calibration_path, samples: int = 1) -> int:
    """Run each model's own program and its merged one on the first ``samples`` calibration inputs; raise
    AssertionError at the first output byte that differs. Returns the samples compared."""
    import numpy as np

    from aipu.compiler.calibrate import read_samples
    from aipu.compiler.lowering.memory import load_tensor, store_tensor
    from aipu.sim.interpreter import run
    from aipu.sim.machine.memory import Memory

    first = members[0]
    data = read_samples(calibration_path, {name: first.graph.shapes[name] for name in first.graph.inputs})
    count = min(samples, len(next(iter(data.values()))))
    for index, member in enumerate(members):
        network, qmodel = member.network, member.qmodel
        for sample in range(count):
            inputs = qmodel.quantize_inputs({name: array[sample:sample + 1] for name, array in data.items()})
            alone = run(network.program, network.memory(inputs)).memory.dram
            dram = merged.dram.copy()
            for name, value in inputs.items():
                store_tensor(dram, merged.address(index, network.plan.regions[name][0]), value)
            together = run(merged.programs[index], Memory.create(network.program.config, dram)).memory.dram
            for name in qmodel.outputs:
                tensor, address = qmodel.tensors[name], network.plan.regions[name][0]
                expected = load_tensor(alone, address, tensor.shape, tensor.dtype, tensor.int4)
                actual = load_tensor(together, merged.address(index, address), tensor.shape, tensor.dtype, tensor.int4)
                if not np.array_equal(expected, actual):
                    raise AssertionError(f"{member.name}: output {name!r} differs on the merged image")
    return count


def multimodel_document(first, shared=None, residual=None):
    """The .tai of a model set: ``first``'s graph, each weight layer a DecompressMultimodel record, from
    ``shared`` ({layer: DecompressMultimodel}, M_Method 2) or ``residual`` ((models, [DFQuantization]),
    M_Method 3, ``first`` the base model)."""
    from onnx import numpy_helper

    from aipu.compress.multi_model_onnx import weight_layers
    from aipu.tai.from_onnx import from_onnx
    from aipu.tai.records import M_RESIDUAL, M_SHARING, multimodel_record, pack_indices

    arrays = {t.name: numpy_helper.to_array(t) for t in first.graph.initializer}
    builders = []
    for index, layer in enumerate(weight_layers(first)):
        shapes = (arrays[layer.weight].shape, arrays[layer.bias].shape if layer.bias else ())
        if shared is not None:
            record = shared[layer.name]
            inputs = {"W_share": [record.w_share], "W_specific": list(record.w_specific)}
            if layer.bias:
                inputs.update(B_share=[record.b_share], B_specific=list(record.b_specific))
            attributes = {"M_Method": M_SHARING, "axe": record.axe}
        else:
            models, records = residual
            biases = [{t.name: numpy_helper.to_array(t) for t in m.graph.initializer}[layer.bias] for m in models] \
                if layer.bias else None
            inputs = {"W_share": [r.w_share[index] for r in records],
                      "W_specific": [pack_indices(r.w_specific[index], r.n) for r in records],
                      "Base_model": [arrays[layer.weight]], **({"B_specific": biases} if biases else {})}
            attributes = {"M_Method": M_RESIDUAL, "n": records[0].n}
        inputs = {key: [np.asarray(a, np.uint8 if a.dtype == np.uint8 else np.float32) for a in values]
                  for key, values in inputs.items()}
        names = (layer.weight, *([layer.bias] if layer.bias else []))
        builders.append((names, lambda document, l=layer, i=inputs, a=attributes, s=shapes:
                         multimodel_record(document, l.name, l.weight, l.bias, i, a, s)))
    return from_onnx(first, records=builders)


def _cmd_tai(args: argparse.Namespace) -> int:
    from aipu.compress.multi_model_onnx import check_same_topology, residual, share
    from aipu.tai.file import dumps

    models = _read_models(args.models)
    if args.base is not None:
        if args.slice:
            raise InputError("--slice", args.slice, "absent with --base (residual quantization shares no filters)")
        from aipu.compiler.graph import read_model
        base = read_model(args.base)
        check_same_topology([base, *models], [args.base, *args.models])
        try:
            records = residual(base, models, args.bits)
        except InputError as error:
            raise error.within(args.base) from None
        document = multimodel_document(base, residual=(models, records))
        what = f"a base model and {len(models)} differences at {args.bits} bits"
    else:
        records = share(models, parse_slices(args.slice))
        document = multimodel_document(models[0], shared=records)
        what = f"{len(models)} models, {sum(r.slice_indicator for r in records.values())} filters shared"
    data = dumps(document)
    Path(args.output).write_bytes(data)
    separate = sum(len(m.SerializeToString()) for m in models)
    print(f"{args.output}: {what}, {len(data):,} bytes (the ONNX files: {separate:,}); "
          f"`aipu tai import {args.output} --model K` rebuilds model K")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("multimodel", help="several same-topology models sharing weights (one DRAM "
                                                      "image, one .tai)", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="multimodel_command", metavar="COMMAND", required=True)
    compile_parser = commands.add_parser("compile", help="ONNX models -> one DRAM image, a program per model")
    compile_parser.add_argument("models", nargs="+", help="two or more float ONNX models of one topology")
    compile_parser.add_argument("--calib", required=True, help=".npz of calibration inputs (one set for all models: "
                                                               "their activation ranges are joined)")
    compile_parser.add_argument("--slice", action="append", metavar="LAYER=S",
                                help="a layer whose first S filters the models share: its tiles break there "
                                     "(repeatable)")
    compile_parser.add_argument("--config", help="hardware configuration (.toml/.json; default: the reference)")
    compile_parser.add_argument("-o", "--output", required=True, help="output directory")
    compile_parser.set_defaults(func=_cmd_compile)
    tai = commands.add_parser("tai", help="ONNX models -> one .tai with the shared weights once")
    tai.add_argument("models", nargs="+", help="two or more ONNX models of one topology")
    tai.add_argument("--slice", action="append", metavar="LAYER=S",
                     help="intra-layer sharing: the layer's first S filters are stored once (repeatable; others 0)")
    tai.add_argument("--base", help="residual quantization: the base model the differences are taken to")
    tai.add_argument("--bits", type=int, default=4, help="--base: n, 2^n k-means centres per layer (default 4)")
    tai.add_argument("-o", "--output", required=True, help="output .tai")
    tai.set_defaults(func=_cmd_tai)
