"""The report as one self-contained HTML page: a summary, four plots (matplotlib, inlined as PNG) and the
per-layer table. Plots: each layer's cycles stacked by unit, MAC utilisation per layer, a roofline, and a
timeline of the units' commands in one layer."""
from __future__ import annotations

import base64
import html
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend that needs no display)

from aipu.compiler.driver import LOW_SQNR_DB  # noqa: E402
from aipu.sim.cycle import CycleResult  # noqa: E402
from aipu.sim.machine.isa import Unit  # noqa: E402

PLOT_LAYERS_MAX = 100      # bars in a per-layer plot (and labelled roofline points)
UNIT_COLOURS = {Unit.LOAD: "#4e79a7", Unit.CONV: "#e15759", Unit.REQUANT: "#f28e2b", Unit.LUT: "#76b7b2",
                Unit.POOL: "#59a14f", Unit.STORE: "#edc948", Unit.WDEC: "#b07aa1"}
_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
td, th { padding: 2px 8px; border-bottom: 1px solid #eee; text-align: right; }
td:first-child, th:first-child { text-align: left; }
figure { margin: 1em 0; } figcaption { color: #555; font-size: 0.9em; }
img { max-width: 100%; } .muted { color: #777; } .pair { white-space: nowrap; }
"""


def render(document: dict, timing: CycleResult, timeline_layer: str | None = None) -> str:
    """The page for ``document`` (analysis.analyse) and its ``timing``; the timeline shows ``timeline_layer``
    (default: the layer with the longest span)."""
    layers = document["layers"]
    chosen = _chosen_layer(layers, timeline_layer)
    summary, meta = document["summary"], document["metadata"]
    plotted = _plotted(layers)
    which = "" if len(plotted) == len(layers) else f" The {len(plotted)} longest of {len(layers)} layers, in order."
    figures = [
        ("cycles", "Cycles of each layer: its span (black tick) and the busy cycles of each unit, stacked (units "
                   "overlap in time, so the stack can exceed the span)." + which, _stacked_cycles(plotted)),
        ("utilisation", "MAC utilisation of each layer (useful MACs over what the array could do in the layer's "
                        "span) and its mapping efficiency (over what it could do while CONV worked)." + which,
         _utilisation(plotted)),
        ("roofline", "Roofline: operations (2 per MAC) per DRAM byte against operations per cycle achieved, with "
                     "the configuration's ceilings.", _roofline(layers, summary)),
        ("timeline", f"Timeline of layer {chosen['name']!r}: each unit's commands (solid), DRAM stalls (hatched) and "
                     "waits on tokens (grey).", _timeline(chosen, timing)),
    ]
    rows = "".join(_layer_row(layer) for layer in layers)
    units = "".join(f"<tr><td>{row['unit']}</td><td>{row['commands']:,}</td><td>{row['busy_cycles']:,}</td>"
                    f"<td>{row['dram_stall_cycles']:,}</td><td>{sum(row['stall_cycles'].values()):,}</td>"
                    f"<td>{row['dram_bytes']:,}</td></tr>" for row in summary["units"])
    plots = "".join(f'<figure id="{key}"><img alt="{key}" src="data:image/png;base64,{image}">'
                    f"<figcaption>{html.escape(caption)}</figcaption></figure>" for key, caption, image in figures)
    configuration = html.escape(_configuration_text(meta["configuration"]))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>aipu report: {html.escape(meta['program'])}</title>
<style>{_STYLE}</style></head><body>
<h1>aipu performance report</h1>
<p class="muted">{html.escape(meta['program'])} · configuration {meta['config_hash']} · DRAM {meta['dram_model']} ·
aipu {html.escape(meta['aipu_version'])}{' · git ' + meta['git_revision'][:12] if meta['git_revision'] else ''}</p>
<table id="summary">
<tr><td>total</td><td>{summary['total_cycles']:,} cycles</td><td>{summary['time_us']:,.1f} µs at
{summary['clock_mhz']} MHz</td></tr>
<tr><td>MAC utilisation</td><td>{summary['mac_utilisation']:.1%}</td><td>{summary['macs']:,} MACs on
{summary['mac_array_size']} multipliers</td></tr>
<tr><td>DRAM</td><td>{summary['dram_read_bytes']:,} B read</td><td>{summary['dram_written_bytes']:,} B written</td></tr>
<tr><td>long pole</td><td>{summary['long_pole_unit']}</td><td>WDEC, not CONV, in {summary['wdec_pole_layers']:,} of
{len(layers):,} layers</td></tr>
<tr><td>layer overlap</td><td>{summary['layer_overlap_cycles']:,} cycles</td><td>spans add up to
{summary['layer_span_sum_cycles']:,} cycles, cover {summary['layer_covered_cycles']:,} together</td></tr>
</table>
<h2>Units</h2>
<table id="units"><thead><tr><th>unit</th><th>commands</th><th>busy</th><th>DRAM stall</th><th>waiting</th>
<th>DRAM bytes</th></tr></thead>
<tbody>{units}</tbody></table>
<h2>Plots</h2>
{plots}
<h2>Layers</h2>
<p class="muted">SQNR: the layer's int8 output against float on the calibration samples, its lowest tensor,
marked ! under {LOW_SQNR_DB:g} dB; saturated: values the output stages clamped to [qmin, qmax] (a fused
ReLU's included) in the interpreter run on <code>--input</code>
({'this report' if meta['input_run'] else 'none given'}); longest wait: the unit and what it waited on longest;
overlap: the cycles the layer's span shares with the previous and with the next layer's; weights: the MAC layers'
weight formats (docs/compiler.md §3.2); WDEC / CONV: the busy cycles of decoding the layer's compressed weights
and of computing with them, and which of the two works longer (busy and DRAM stall): WDEC there bounds the
layer however well decoding overlaps the MACs.</p>
<table id="layers"><thead><tr><th>layer</th><th>span (cycles)</th><th>overlap prev. / next</th><th>MACs</th>
<th>MAC util.</th><th>mapping eff.</th><th>DRAM read</th><th>DRAM written</th><th>weights</th><th>weights ratio</th>
<th>SQNR (dB)</th>
<th>saturated</th><th>long pole</th><th>WDEC / CONV busy</th><th>WDEC or CONV</th><th>longest wait</th></tr></thead>
<tbody>{rows}</tbody></table>
<h2>Configuration</h2>
<pre>{configuration}</pre>
</body></html>
"""


def _plotted(layers: list[dict]) -> list[dict]:
    """The layers the bar plots show: all of them, or the PLOT_LAYERS_MAX longest in program order (the page
    and its images stay bounded whatever the program)."""
    if len(layers) <= PLOT_LAYERS_MAX:
        return layers
    longest = sorted(range(len(layers)), key=lambda index: layers[index]["span_cycles"], reverse=True)
    return [layers[index] for index in sorted(longest[:PLOT_LAYERS_MAX])]


def _chosen_layer(layers: list[dict], name: str | None) -> dict:
    if name is None:
        return max(layers, key=lambda layer: layer["span_cycles"])
    for layer in layers:
        if name in (layer["name"], *layer["layers"]):
            return layer
    raise ValueError(f"--timeline-layer {name!r}: no such layer (layers: "
                     f"{', '.join(layer['name'] for layer in layers[:20])}{', ...' if len(layers) > 20 else ''})")


def _layer_row(layer: dict) -> str:
    stalls = [(cycles, f"{row['unit']} on {reason}") for row in layer["units"]
              for reason, cycles in row["stall_cycles"].items()]
    longest = max(stalls, default=None)
    mapping = "–" if layer["mapping_efficiency"] is None else f"{layer['mapping_efficiency']:.1%}"
    ratio = "–" if layer["weight_compression_ratio"] is None else f"{layer['weight_compression_ratio']:.2f}×"
    saturated = "–" if layer["saturated_values"] is None else f"{layer['saturated_values']:,}"
    sqnr = layer["calibration_sqnr_db"]
    shown = "–" if sqnr is None else f"{sqnr:.1f}" + (" !" if sqnr < LOW_SQNR_DB else "")
    return (f"<tr><td>{html.escape(layer['name'])}</td><td>{layer['span_cycles']:,}</td>"
            f"<td class=\"pair\">{layer['overlap_previous_cycles']:,} / {layer['overlap_next_cycles']:,}</td>"
            f"<td>{layer['macs']:,}</td>"
            f"<td>{layer['mac_utilisation']:.1%}</td><td>{mapping}</td><td>{layer['dram_read_bytes']:,}</td>"
            f"<td>{layer['dram_written_bytes']:,}</td><td>{html.escape('/'.join(layer['weight_formats'])) or '–'}</td>"
            f"<td>{ratio}</td><td>{shown}</td><td>{saturated}</td>"
            f"<td>{layer['long_pole_unit']}</td>"
            f"<td class=\"pair\">{layer['wdec_busy_cycles']:,} / {layer['conv_busy_cycles']:,}</td>"
            f"<td>{(layer['wdec_conv_pole'] or '–').upper()}</td>"
            f"<td>{html.escape(f'{longest[1]}: {longest[0]:,}') if longest else '–'}</td></tr>")


def _configuration_text(configuration: dict, prefix: str = "") -> str:
    lines = []
    for key, value in configuration.items():
        if isinstance(value, dict):
            lines.append(_configuration_text(value, f"{prefix}{key}."))
        else:
            lines.append(f"{prefix}{key} = {value}")
    return "\n".join(lines)


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


def _layer_labels(layers: list[dict]) -> list[str]:
    return [layer["name"] if len(layer["name"]) <= 32 else layer["name"][:31] + "…" for layer in layers]


def _stacked_cycles(layers: list[dict]) -> str:
    figure, axes = plt.subplots(figsize=(11, max(3.0, 0.22 * len(layers) + 1.2)))
    positions = range(len(layers))
    left = [0] * len(layers)
    for unit in Unit:
        busy = [next((row["busy_cycles"] for row in layer["units"] if row["unit"] == unit.name), 0)
                for layer in layers]
        if any(busy):
            axes.barh(positions, busy, left=left, color=UNIT_COLOURS[unit], label=unit.name, height=0.7)
            left = [a + b for a, b in zip(left, busy)]
    axes.scatter([layer["span_cycles"] for layer in layers], positions, marker="|", s=150, color="black",
                 label="span", zorder=3)
    axes.set_yticks(list(positions), _layer_labels(layers), fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("cycles")
    axes.legend(loc="lower right", fontsize=8)
    return _png(figure)


def _utilisation(layers: list[dict]) -> str:
    figure, axes = plt.subplots(figsize=(11, 3.6))
    positions = list(range(len(layers)))
    width = 0.4
    axes.bar([p - width / 2 for p in positions], [100 * layer["mac_utilisation"] for layer in layers], width,
             label="MAC utilisation", color="#e15759")
    axes.bar([p + width / 2 for p in positions], [100 * (layer["mapping_efficiency"] or 0) for layer in layers],
             width, label="mapping efficiency", color="#4e79a7")
    axes.set_xticks(positions, _layer_labels(layers), rotation=90, fontsize=7)
    axes.set_ylabel("%")
    axes.set_ylim(0, 100)
    axes.legend(fontsize=8, ncol=2, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    return _png(figure)


def _roofline(layers: list[dict], summary: dict) -> str:
    figure, axes = plt.subplots(figsize=(7, 5))
    peak = 2 * summary["mac_array_size"]
    bandwidth = summary["dram_bytes_per_cycle"]
    points = [(layer["operations_per_dram_byte"], layer["operations_per_cycle"], label)
              for layer, label in zip(layers, _layer_labels(layers))
              if layer["operations_per_dram_byte"] and layer["operations_per_cycle"]]
    low = min([peak / bandwidth / 10, *(x for x, _, _ in points)]) / 2
    high = max([peak / bandwidth * 10, *(x for x, _, _ in points)]) * 2
    ridge = peak / bandwidth
    axes.plot([low, ridge, high], [bandwidth * low, peak, peak], color="black",
              label=f"ceilings: {bandwidth} B/cycle DRAM, {peak} ops/cycle")
    if points:
        axes.scatter([x for x, _, _ in points], [y for _, y, _ in points], color="#e15759", zorder=3, label="layers")
    for x, y, label in points if len(points) <= PLOT_LAYERS_MAX else ():
        axes.annotate(label, (x, y), xytext=(3, -3), textcoords="offset points", fontsize=6, color="#555555")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("operations per DRAM byte")
    axes.set_ylabel("operations per cycle")
    axes.legend(fontsize=8)
    axes.grid(True, which="both", alpha=0.3)
    return _png(figure)


def _timeline(layer: dict, timing: CycleResult) -> str:
    figure, axes = plt.subplots(figsize=(11, 0.6 * len(layer["units"]) + 1.5))
    start, end = layer["start_cycle"], layer["end_cycle"]
    names = [row["unit"] for row in layer["units"]]
    for row, name in enumerate(names):
        unit = Unit[name]
        spans = [t for t in timing.timings[unit] if t.retire >= start and t.start <= end]
        waits = [(max(t.ready, start), t.start - max(t.ready, start)) for t in spans if t.start > max(t.ready, start)]
        axes.broken_barh(waits, (row - 0.15, 0.3), color="#dddddd")
        axes.broken_barh([(t.start, max(t.work, 1)) for t in spans], (row - 0.35, 0.7), color=UNIT_COLOURS[unit])
        stalls = [(t.start + t.work, t.dram_stall) for t in spans if t.dram_stall]
        axes.broken_barh(stalls, (row - 0.35, 0.7), facecolor="white", edgecolor=UNIT_COLOURS[unit], hatch="///")
    axes.set_yticks(range(len(names)), names)
    axes.invert_yaxis()
    axes.set_xlim(start, end)
    axes.set_xlabel("cycle")
    return _png(figure)
