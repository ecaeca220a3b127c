"""`aipu compress`: T/AI 115.1-2021's compression methods composed on an ONNX model into a .tai file, with per layer
what was done and the size before and after, and the output SQNR (and top-1) on calibration data
(app/model_compression.py, docs/compress.md)."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

from aipu.sim.machine.errors import InputError


def _fraction(flag: str, text: str | None, low_closed: bool) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not ((0.0 <= value if low_closed else 0.0 < value) and value < 1.0 + (not low_closed)):
        bounds = "0 <= f < 1" if low_closed else "0 < f <= 1"
        raise InputError(flag, text, f"a fraction {bounds}")
    return value


def _cmd_compress(args: argparse.Namespace) -> int:
    from aipu.app.model_compression import CompressionPlan, compress, input_shapes, model_outputs, sqnr_db
    from aipu.compiler.calibrate import read_samples
    from aipu.compiler.graph import read_model
    from aipu.compress.mask_generation import CRITERIA
    from aipu.tai.file import dumps, loads
    from aipu.tai.records import MAX_CIRC_SIZE
    from aipu.tai.to_onnx import to_onnx

    if args.criterion not in CRITERIA:
        raise InputError("--criterion", args.criterion, " or ".join(CRITERIA))
    if args.groups < 1:
        raise InputError("--groups", args.groups, "an integer >= 1")
    if args.circulant is not None and not 1 < args.circulant <= MAX_CIRC_SIZE:
        raise InputError("--circulant", args.circulant, f"a block size 2 .. {MAX_CIRC_SIZE}")
    plan = CompressionPlan(prune=_fraction("--prune", args.prune, True), criterion=args.criterion,
                           circulant=args.circulant,
                           low_rank=_fraction("--low-rank", args.low_rank, False), groups=args.groups,
                           quant_bits=args.quant,
                           layers=None if args.layers is None else tuple(n for n in args.layers.split(",") if n))
    if not (plan.prune or plan.circulant or plan.low_rank or plan.quant_bits):
        raise InputError("methods", "none", "at least one of --prune, --circulant, --low-rank, --quant")
    original = read_model(args.model)
    samples = (None if args.calibration is None
               else read_samples(args.calibration, input_shapes(original)))
    try:
        _, document, rows = compress(original, plan)
    except InputError as error:
        raise error.within(args.model) from None
    data = dumps(document)
    Path(args.output).write_bytes(data)
    _print_rows(rows)
    print(f"{args.model}: {Path(args.model).stat().st_size:,} bytes -> {args.output}: {len(data):,} bytes")
    if samples is not None:
        reference = model_outputs(original, samples)
        decoded = model_outputs(to_onnx(loads(data)), samples)
        print(f"output SQNR on {next(iter(samples.values())).shape[0]} calibration samples: "
              f"{sqnr_db(reference, decoded):.1f} dB")
    return 0


def _print_rows(rows) -> None:
    print(f"  {'layer':<24} {'weights before':>15} {'after':>10} {'bytes before':>13} {'after':>10}  done")
    for row in rows:
        print(f"  {row.node:<24} {row.weights_before:>15,} {row.weights_after:>10,} {row.bytes_before:>13,} "
              f"{row.bytes_after:>10,}  {'; '.join(row.done) or '-'}")
    total = [sum(getattr(row, key) for row in rows)
             for key in ("weights_before", "weights_after", "bytes_before", "bytes_after")]
    print(f"  {'total':<24} {total[0]:>15,} {total[1]:>10,} {total[2]:>13,} {total[3]:>10,}")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("compress", help="prune, decompose and quantize an ONNX model into a .tai file "
                                                    "(T/AI 115.1 chapter 7)")
    parser.add_argument("model", help="ONNX model (float) or .tai")
    parser.add_argument("-o", "--output", required=True, help="the .tai file to write")
    parser.add_argument("--prune", metavar="FRACTION", help="remove this fraction of each conv layer's filters "
                                                            "(§7.3, row pruning by magnitude)")
    parser.add_argument("--criterion", default="l1", help="filter importance for --prune: l1 (default) or l2")
    parser.add_argument("--circulant", type=int, metavar="L", help="make every layer L divides block-circulant "
                                                                   "with sign vectors (§7.4.2; L 2, 4 or 8 stays "
                                                                   "compressed on the NPU)")
    parser.add_argument("--low-rank", metavar="RATIO", help="replace each layer (not made circulant) by low-rank "
                                                            "factors keeping this fraction of its weights (§7.4.3)")
    parser.add_argument("--groups", type=int, default=1, help="BTD groups of --low-rank (default 1)")
    parser.add_argument("--quant", type=int, metavar="BITS", help="store the weights as N-bit chapter-10 streams "
                                                                  "(§7.2, chapter 10)")
    parser.add_argument("--layers", metavar="NAME,NAME", help="the Conv/Gemm nodes to compress (default: all)")
    parser.add_argument("--calibration", metavar="DATA.npz", help="samples to measure the output SQNR on")
    parser.set_defaults(func=_cmd_compress)
