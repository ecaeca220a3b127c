"""`aipu codec encode|decode|info`: compress a model's weights and inspect a bitstream (`aipu bench codec` times it).

The codec (and numba) is imported inside the handlers: building the `aipu` parser stays cheap.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

from aipu.app.cli_protect import register_protection
from aipu.app.codec_inputs import load_tensors, quantization_members
from aipu.app.warm_up import compile_kernels_once
from aipu.sim.machine.errors import InputError

MAX_CONTAINER_BYTES = 1 << 31        # what `decode` and `info` read of a file
MAX_WORKERS = 256                    # processes `encode --workers` may start


def _cmd_encode(args: argparse.Namespace) -> int:
    from aipu.codec import api
    from aipu.codec.encoder import FAST_OPTIONS, EncoderOptions
    from aipu.codec.quantize import MAX_BITDEPTH
    encoder = FAST_OPTIONS if args.fast else EncoderOptions(search=args.search or "sublayer")
    if args.format == "deepcabac" and (args.fast or args.profile or args.search):
        raise InputError("--format", args.format, "tai with --fast, --search or --profile (chapter-10 modes)")
    if not 2 <= args.bits <= MAX_BITDEPTH + 1:      # N-bit signed levels: the stream's sublayer_bitdepth N - 1
        raise InputError("--bits", args.bits, f"an integer 2 .. {MAX_BITDEPTH + 1} (N-bit signed levels)")
    try:
        options = api.CodecOptions(bitdepth=args.bits - 1, step=args.step, clusters=args.clusters,
                                   bias_bitdepth=args.bias_bitdepth, max_ctu_size=args.ctu, encoder=encoder,
                                   progress=True if args.progress else None, format=args.format)
    except InputError as error:       # named by its command-line option
        raise InputError("--" + error.field.replace("_", "-").replace("max-ctu-size", "ctu"), error.value,
                         error.allowed) from None
    tensors, groups, quantization = load_tensors(Path(args.input))
    compile_kernels_once("codec")
    if args.profile == "npu":        # what the NPU's WDEC decodes: every tensor a layer of its own
        from aipu.codec.npu_profile import with_profile
        options, groups = with_profile(options), [(name, None) for name in tensors]
    started = time.perf_counter()
    try:
        data, infos = api.encode_with_info(tensors, options, groups, quantization, workers=args.workers)
    except ValueError as exc:           # a tensor the codec cannot take: one line naming the file and tensor
        raise ValueError(f"{args.input}: {exc}") from None
    seconds = time.perf_counter() - started
    Path(args.output).write_bytes(data)
    weights = sum(info.weights for info in infos)
    print(f"{args.output}: {len(infos)} layers, {weights} weights, {len(data)} bytes, "
          f"{8 * len(data) / max(weights, 1):.3f} bits/weight, encoded in {seconds:.2f} s")
    return 0


def _decode_file(path: str, strict: bool) -> tuple[bytes, dict[str, np.ndarray], list]:
    """The container's bytes, tensors and layer infos; a CodecError names the file."""
    from aipu.codec import api
    from aipu.codec.errors import error_context
    from aipu.sim.machine.files import read_at_most
    data = read_at_most(path, MAX_CONTAINER_BYTES)
    compile_kernels_once("codec")
    with error_context(file=path):
        tensors, infos = api.decode_with_info(data, strict=strict)
    return data, tensors, infos


def _save_npz(path: str, tensors: dict[str, np.ndarray]) -> None:
    """np.savez without its keyword arguments, so that every tensor name is an archive member (np.savez
    takes a tensor named ``file`` for its own argument and one named ``allow_pickle`` for its flag)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in tensors.items():
            with archive.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def _cmd_decode(args: argparse.Namespace) -> int:
    _, tensors, infos = _decode_file(args.input, args.strict)
    quantization = _quantization_arrays(infos, tensors)
    _save_npz(args.output, {**tensors, **quantization})
    quantized = sum(name.endswith(":zero_point") for name in quantization)
    print(f"{args.output}: {len(tensors)} tensors" + (f", {quantized} of them quantized (with NAME:zero_point, "
                                                      "NAME:scale, NAME:axis)" if quantized else ""))
    return 0


def _quantization_arrays(infos: list, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """NAME:scale, NAME:zero_point and NAME:axis of every quantized tensor; a name that clashes with a tensor's
    is refused rather than overwritten."""
    from aipu.codec.quantization import quantization_of

    arrays: dict[str, np.ndarray] = {}
    for info in infos:
        for name, params in quantization_of(info.tensors).items():
            arrays.update(quantization_members(name, params, tensors[name].dtype))
    clash = next((name for name in arrays if name in tensors), None)
    if clash is not None:
        raise InputError("tensor", clash, "a name that is not also a quantized tensor's NAME:scale, "
                                          "NAME:zero_point or NAME:axis member")
    return arrays


def _cmd_info(args: argparse.Namespace) -> int:
    data, _, infos = _decode_file(args.input, args.strict)
    if args.json:
        json.dump([{**vars(info), "bits_per_weight": info.bits_per_weight} for info in infos], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print(f"{'layer':<28} {'shape':<22} {'quantized':<15} {'weights':>9} {'bytes':>8} {'bits/w':>7} {'bins':>9} "
          f"{'dec s':>7}  modes")
    for info in infos:
        shapes = " + ".join("x".join(map(str, t["shape"])) or "scalar" for t in info.tensors)
        quantized = " + ".join(_quantized_marker(t) for t in info.tensors)
        modes = ", ".join(f"{key}:{count}" for key, count in sorted(info.modes.items()))
        print(f"{info.name[:28]:<28} {shapes[:22]:<22} {quantized[:15]:<15} {info.weights:>9} {info.length:>8} "
              f"{info.bits_per_weight:>7.3f} {info.bins:>9} {info.decode_seconds:>7.3f}  {modes}")
    total_bytes = sum(info.length for info in infos)
    weights = sum(info.weights for info in infos)
    print(f"total: {len(infos)} layers, {weights} weights, {len(data)} bytes "
          f"({total_bytes} in layer streams), {8 * total_bytes / max(weights, 1):.3f} bits/weight")
    return 0


def _quantized_marker(tensor: dict) -> str:
    """How a tensor of the index is quantized: "-" (not), "tensor" (one scale), "axis N" (per axis N)."""
    if "quantization" not in tensor:
        return "-"
    axis = tensor["quantization"]["axis"]
    return "tensor" if axis is None else f"axis {axis}"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("codec", help="T/AI 115.1 chapter-10 weight codec: encode, decode, info; "
                                   "chapter-11 protection: protect, unprotect, keygen")
    commands = parser.add_subparsers(dest="codec_command", metavar="ACTION", required=True)

    enc = commands.add_parser("encode", help="compress the weights of an .onnx or .npz file")
    enc.add_argument("input", help="model.onnx (the initializers of Conv/Gemm/MatMul, also through one "
                     "DequantizeLinear, and of QLinearConv/QGemm/QLinearMatMul/ConvInteger/MatMulInteger: "
                     "quantized ones coded as the integers they are, with scale and zero point) or tensors.npz "
                     "(NAME:scale, NAME:zero_point, NAME:axis members quantize NAME)")
    enc.add_argument("-o", "--output", required=True, help="output container (.nnr)")
    quant = enc.add_mutually_exclusive_group()
    quant.add_argument("--bits", type=int, default=8,
                       help="uniform quantisation of float weights to N-bit signed levels, within +-(2^(N-1) - 1) "
                            "(default 8: int8's range without -128); the stream's sublayer_bitdepth is N - 1")
    quant.add_argument("--step", type=float, help="uniform quantisation step size")
    quant.add_argument("--clusters", type=int,
                       help="k-means codebook quantisation with this many levels a layer: for a consumer that "
                            "needs at most K distinct values, not for size: on trained CNN weights it costs more "
                            "bits than --bits at the same SQNR (measured in docs/codec.md §6)")
    enc.add_argument("--bias-bitdepth", type=int, default=16, help="bit depth of float 1-D tensors")
    enc.add_argument("--ctu", type=int, default=64, choices=(64, 32, 16, 8), help="maximum CTU size")
    enc.add_argument("--format", choices=("tai", "deepcabac"), default="tai",
                     help="tai (default): T/AI 115.1-2021 chapter-10 streams, a weight and its bias a layer; "
                          "deepcabac: DeepCABAC as NNCodec 2.1.3 writes it (ISO/IEC 15938-17), a tensor a layer, "
                          "the same quantisation (docs/deepcabac.md)")
    mode = enc.add_mutually_exclusive_group()
    mode.add_argument("--fast", action="store_true", help="one fixed mode (octree from the root), no search")
    mode.add_argument("--search", choices=("sublayer", "cu"),
                      help="where the encoder tries the modes (trees, start depths, codebooks, plane order, splits): "
                           "sublayer (default) chooses one mode a sublayer on a sample of it; cu tries them on every "
                           "CU, for up to 0.03 %% fewer bytes at 12-20 times the time (docs/codec.md §7)")
    mode.add_argument("--profile", choices=("npu",), help="npu: the subset the NPU's weight decoder (WDEC) "
                      "executes (docs/codec.md §11); every tensor is a layer of its own")
    enc.add_argument("--workers", type=_workers, default=0, metavar="N",
                     help="encode layers in up to N processes at once (default 0: one per core); the bytes do not "
                          "depend on it")
    enc.add_argument("--progress", action="store_true", help="always show a progress bar")
    enc.set_defaults(func=_cmd_encode)

    dec = commands.add_parser("decode", help="decode a container to .npz")
    dec.add_argument("input")
    dec.add_argument("-o", "--output", required=True, help="output .npz")
    _strict_argument(dec)
    dec.set_defaults(func=_cmd_decode)

    info = commands.add_parser("info", help="per-layer shape, bits/weight, modes, bins and decode time")
    info.add_argument("input")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    _strict_argument(info)
    info.set_defaults(func=_cmd_info)
    register_protection(commands)


def _workers(text: str) -> int:
    """--workers: a count of processes, 0 for one per core."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{text!r}: expected 0 (one per core) .. {MAX_WORKERS}")
    return value


def _strict_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strict", action="store_true",
                        help="require each layer's stream to end as this encoder ends it (zero padding to a byte, "
                             "nothing after it); by default whatever follows the terminating stuffing bin is "
                             "ignored, as a conforming decoder does")
