"""Performance reports of a compiled program (docs/cycle-model.md, "Reports"): what the cycle model finds per
layer and per unit (``analysis``), as schema-versioned JSON and CSV, and as one self-contained HTML page with
its plots (``html``)."""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path


def summed_stats(runs: Iterable):
    """The saturation and LUT-range counts of several interpreter runs (their ``Stats``), added up."""
    from aipu.sim.interpreter import Stats

    saturations, out_of_range = Counter(), Counter()
    for stats in runs:
        saturations.update(stats.saturations)
        out_of_range.update(stats.lut_out_of_range)
    return Stats(saturations=dict(saturations), lut_out_of_range=dict(out_of_range))


def write_report(directory, out: Path, *, dram: str = "npu", stats=None, seed: int | None = None,
                 timeline_layer: str | None = None, prepared=None) -> tuple[dict, list[Path]]:
    """The report of the program ``directory`` (a checked ProgramDir) as ``out`` (HTML) and, beside it, the
    same figures as .json, .layers.csv and .units.csv; returns the document and the files written."""
    from aipu.app.report.analysis import analyse, layers_csv, units_csv
    from aipu.app.report.html import render

    document, timing = analyse(directory, dram=dram, stats=stats, seed=seed, prepared=prepared)
    page = render(document, timing, timeline_layer)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = {out: page, out.with_suffix(".json"): json.dumps(document, indent=1, allow_nan=False) + "\n",
               out.with_suffix(".layers.csv"): layers_csv(document), out.with_suffix(".units.csv"): units_csv(document)}
    for path, text in written.items():
        path.write_text(text, encoding="utf-8")
    return document, list(written)
