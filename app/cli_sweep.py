"""`aipu sweep`: cycles, MAC utilisation and DRAM traffic of one network over a grid of hardware configurations,
on Dask (app/sweep.py is the engine; docs/cycle-model.md, "Design-space sweep").

Dask, matplotlib and the compiler are imported inside the handler: building the `aipu` parser stays cheap.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from aipu.compiler.compression import policy_argument

PLOT_SERIES_MAX = 16        # lines per panel that the legend still names one by one


def _cmd_sweep(args: argparse.Namespace) -> int:
    from aipu.app.sweep import default_cache_folder, demo_inputs, parse_axis, run_sweep
    from aipu.sim.machine.arch import DEFAULT, load_hardware_config
    from aipu.sim.machine.errors import InputError

    if args.scheduler and args.workers is not None:
        raise InputError("--workers", args.workers, "only for the local cluster, not with --scheduler")
    if args.workers is not None and not 1 <= args.workers <= 1024:
        raise InputError("--workers", args.workers, "an integer 1 .. 1024")
    if args.model is None and args.calib is not None:
        raise InputError("--calib", args.calib, "only with a model (the demo model has its own)")
    base = load_hardware_config(args.config) if args.config else DEFAULT
    axes = [parse_axis(text, base) for text in args.vary or ()]
    cache = None if args.no_cache else Path(args.cache) if args.cache else default_cache_folder()
    options = dict(base=base, axes=axes, compress=args.compress, scheduler=args.scheduler, workers=args.workers,
                   cache_folder=cache, progress=not args.no_progress and sys.stderr.isatty(), threads=args.threads)
    if args.model is None:
        with demo_inputs() as (model, calibration):
            sweep = run_sweep(model, calibration, model_label=f"demo {model.name}",
                              calibration_label="demo calibration images", **options)
    else:
        sweep = run_sweep(Path(args.model), Path(args.calib) if args.calib else None, **options)
    print(f"{sweep.model}: {len(sweep.rows)} configuration{'s' if len(sweep.rows) != 1 else ''} "
          f"({len(sweep.rows) - len(sweep.computed)} cached, {len(sweep.computed)} computed) in {sweep.seconds:.2f} s")
    print_table(sweep.rows)
    if args.json:
        Path(args.json).write_text(json.dumps(sweep.document(), indent=1) + "\n")
    if args.csv:
        write_csv(sweep, Path(args.csv))
    if args.plot:
        plot(sweep, Path(args.plot))
    for name in ("json", "csv", "plot"):
        if getattr(args, name):
            print(f"written: {getattr(args, name)}")
    return 0


def _by_cycles(rows: list[dict]) -> list[dict]:
    """Fastest first; configurations without a program last, in grid order."""
    return sorted(rows, key=lambda row: (row["error"] is not None, row["total_cycles"] or 0))


def print_table(rows: list[dict]) -> None:
    width = max(len("configuration"), *(len(row["label"]) for row in rows))
    print(f"{'configuration':<{width}} {'cycles':>11} {'µs':>9} {'MAC util':>8} {'DRAM read':>11} "
          f"{'DRAM written':>12} {'DRAM stall':>10} {'commands':>8}")
    for row in _by_cycles(rows):
        if row["error"] is not None:
            print(f"{row['label']:<{width}} error: {row['error']}")
            continue
        print(f"{row['label']:<{width}} {row['total_cycles']:>11,} {row['time_us']:>9,.2f} "
              f"{row['mac_utilisation']:>8.1%} {row['dram_read_bytes']:>11,} {row['dram_written_bytes']:>12,} "
              f"{row['dram_stall_cycles']:>10,} {row['commands']:>8,}")


def write_csv(sweep, path: Path) -> None:
    """One line per configuration in grid order; busy cycles as one column per unit (``busy_cycles.CONV``)."""
    from aipu.sim.machine.isa import Unit

    def flat(row: dict) -> dict:
        busy = row["busy_cycles"] or {}
        return {**{key: value for key, value in row.items() if key != "busy_cycles"},
                **{f"busy_cycles.{unit.name}": busy.get(unit.name) for unit in Unit}}

    lines = [flat(row) for row in sweep.rows]
    with path.open("w", newline="") as stream:
        writer = csv.DictWriter(stream, fieldnames=list(lines[0]))
        writer.writeheader()
        writer.writerows(lines)


def plot(sweep, path: Path) -> None:
    """Three panels (cycles, MAC utilisation, DRAM traffic) against the first axis, one line per combination of
    the other axes; a configuration without a program is a gap."""
    import itertools

    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, PercentFormatter

    axes = sweep.axes
    first, others = (axes[0], axes[1:]) if axes else (None, [])
    ticks = [first.show(value) for value in first.values] if first else ["base"]
    by_settings = {tuple(row[key] for axis in axes for key in axis.keys): row for row in sweep.rows}
    figure = Figure(figsize=(9, 9), layout="constrained")
    panels = figure.subplots(3, 1, sharex=True)
    combinations = list(itertools.product(*(axis.values for axis in others)))
    for number, combination in enumerate(combinations):
        color = f"C{number % 10}"
        name = " ".join(f"{axis.name}={axis.show(value)}" for axis, value in zip(others, combination)) or None
        rows = [by_settings[(*value, *itertools.chain(*combination))] for value in first.values] if first \
            else sweep.rows

        def series(field: str, rows=rows) -> list[float]:
            return [float("nan") if row["error"] is not None else row[field] for row in rows]

        marker = dict(marker="o", color=color)
        panels[0].plot(ticks, series("total_cycles"), label=name, **marker)
        panels[1].plot(ticks, series("mac_utilisation"), **marker)
        panels[2].plot(ticks, series("dram_read_bytes"), **marker)
        panels[2].plot(ticks, series("dram_written_bytes"), linestyle="--", **marker)
    thousands = FuncFormatter(lambda value, _: f"{value:,.0f}")
    panels[0].set_ylabel("cycles")
    panels[0].yaxis.set_major_formatter(thousands)
    panels[1].set_ylabel("MAC utilisation")
    panels[1].yaxis.set_major_formatter(PercentFormatter(1.0))
    panels[2].set_ylabel("DRAM bytes (solid read,\ndashed written)")
    panels[2].yaxis.set_major_formatter(thousands)
    panels[2].set_xlabel(first.name if first else "configuration")
    for panel in panels:
        panel.set_ylim(bottom=0)
        panel.grid(alpha=0.3)
    if others and len(combinations) <= PLOT_SERIES_MAX:
        panels[0].legend(fontsize="small")
    failed = sum(row["error"] is not None for row in sweep.rows)
    figure.suptitle(f"aipu sweep: {sweep.model}, {len(sweep.rows)} configurations"
                    + (f" ({failed} without a program: gaps)" if failed else ""))
    figure.savefig(path, dpi=100)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("sweep", help="cycles, MAC utilisation and DRAM traffic of a network over a grid "
                                                 "of hardware configurations (on Dask)")
    parser.add_argument("model", nargs="?", help="ONNX model, as `aipu compile` takes it (default: the embedded demo "
                                                 "model and its calibration images)")
    parser.add_argument("--calib", help=".npz (or .npy) of calibration inputs for a float model")
    parser.add_argument("--config", help="base hardware configuration (.toml/.json); default: the reference")
    parser.add_argument("--vary", action="append", metavar="KEY=V1,V2,...",
                        help="an axis of the grid (repeatable): a configuration key such as mac.rows, "
                             "buffers.act.bytes, dram.bytes_per_cycle, or mac=8x8,16x16 for rows and cols together; "
                             "at most 256 configurations in all")
    parser.add_argument("--compress", nargs="?", const="hidden", type=policy_argument, metavar="POLICY",
                        help="conv weights as WDEC streams, as `aipu compile --compress [POLICY]` (hidden or all)")
    parser.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler (tcp://host:port); "
                                                               "default: a local cluster")
    parser.add_argument("--workers", type=int, help="processes of the local cluster (default: all cores)")
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument("--cache", metavar="DIR", help="result cache (default: $XDG_CACHE_HOME/aipu/sweep, else "
                                                      "~/.cache/aipu/sweep)")
    cache.add_argument("--no-cache", action="store_true", help="compute every configuration, store nothing")
    parser.add_argument("--json", metavar="FILE", help="write the rows as a schema-versioned JSON document")
    parser.add_argument("--csv", metavar="FILE", help="write the rows as CSV")
    parser.add_argument("--plot", metavar="FILE.png", help="plot cycles, MAC utilisation and DRAM traffic")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(func=_cmd_sweep)
