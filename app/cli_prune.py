"""`aipu prune`: filter (row) pruning of an ONNX model by filter magnitude (T/AI 115.1-2021 §7.3,
docs/pruning.md): the pruned model is an ordinary smaller dense model that `aipu compile` takes as it is."""
from __future__ import annotations

import argparse
from pathlib import Path

from aipu.compress.mask_generation import CRITERIA


def _fraction(text: str):
    from aipu.sim.machine.errors import InputError

    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0.0 <= value < 1.0:
        raise InputError("--filters", text, "a fraction 0 <= f < 1 of each layer's filters to remove")
    return value


def _cmd_prune(args: argparse.Namespace) -> int:
    import onnx

    from aipu.compiler.graph import read_model
    from aipu.compress.onnx_pruning import filter_masks, prune_filters
    from aipu.sim.machine.errors import InputError

    ratio = _fraction(args.filters)
    if args.criterion not in CRITERIA:
        raise InputError("--criterion", args.criterion, " or ".join(CRITERIA))
    layers = None if args.layers is None else [name for name in args.layers.split(",") if name]
    model = read_model(args.model)
    try:
        try:
            onnx.checker.check_model(model)
        except (onnx.checker.ValidationError, ValueError, TypeError) as exc:
            raise InputError("model", "invalid", f"onnx.checker: {' '.join(str(exc).split())[:300]}") from None
        masks = filter_masks(model, ratio, layers, args.criterion)
        if not masks:
            raise InputError("layers", "none", "a Conv whose filters can be removed (see --layers)")
        pruned = prune_filters(model, masks)
    except InputError as error:
        raise error.within(args.model) from None
    onnx.save(pruned.model, args.output)
    print(f"{args.model}: removed {args.filters} of the filters of {len(masks)} conv layers by {args.criterion} norm")
    print(f"  {'node':<24} {'op':<8} {'filters kept':>13} {'weights before':>15} {'weights after':>14}")
    for change in pruned.changes:
        kept = "" if change.filters is None else f"{change.filters[0]}/{change.filters[1]}"
        print(f"  {change.node:<24} {change.op:<8} {kept:>13} {change.weights_before:>15,} {change.weights_after:>14,}")
    print(f"  {'total':<24} {'':<8} {'':>13} {pruned.weights_before:>15,} {pruned.weights_after:>14,}")
    print(f"written: {Path(args.output)}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("prune", help="remove the weakest filters of conv layers (a smaller dense ONNX "
                                                 "model)")
    parser.add_argument("model", help="ONNX model (float)")
    parser.add_argument("--filters", required=True, metavar="FRACTION",
                        help="fraction of each layer's filters to remove, 0 <= f < 1 (rounded to whole filters, "
                             "one filter always kept)")
    parser.add_argument("--layers", metavar="NAME,NAME",
                        help="the Conv nodes to prune (default: every Conv whose filters can be removed alone)")
    parser.add_argument("--criterion", default="l1", help="filter importance: l1 (default) or l2 norm")
    parser.add_argument("-o", "--output", required=True, help="the pruned ONNX model to write")
    parser.set_defaults(func=_cmd_prune)
