"""The report's figures: the cycle model's timeline of a compiled program, cut along its layers.

A *layer* is one step of the compiled program (``manifest.json`` "steps": the ONNX layers it computes, a conv
and the table it feeds being one, and the range of commands it has on each unit). Within a layer's span (its
first command's start to its last command's retire) each unit's cycles split into: ``busy`` (its commands'
formulas), ``dram_stall`` (what sharing the DRAM added), ``stall`` by what it waited on (a token, room in a
token queue, the drain before FINISH), ``sequencer`` (taking and checking each command) and ``idle``.
Layers overlap in time (the next layer's first loads run under this one's last compute): each layer says how
many cycles its span shares with the previous and the next layer's, and the summary how much all spans
overlap. With compressed weights each layer also says whether decoding them (WDEC) or computing with them
(CONV) is its long pole (``wdec_conv_pole``).
"""
from __future__ import annotations

import csv
import io
import json
import subprocess
from collections import Counter, defaultdict
from functools import cache
from importlib.metadata import version
from pathlib import Path

from aipu.codec.npu_profile import decode_parts
from aipu.compiler.program_dir import MANIFEST_FILE, PROGRAM_FILE, ProgramDir
from aipu.sim.cycle import CycleResult, DramModel, simulate
from aipu.sim.interpreter import DRAM, PreparedProgram, Stats, prepare
from aipu.sim.machine.errors import InputError, executing
from aipu.sim.machine.isa import Opcode, Unit, dram_run_bytes
from aipu.sim.machine.memory import Memory
from aipu.sim.timing.conv import MAC_OPCODES, useful_macs
from aipu.sim.timing.wdec_stream import decoded_profile

FORMAT, SCHEMA_VERSION = "aipu-report", 1
SCHEMA_PATH = Path(__file__).with_name("schema.json")
MAX_STEPS = 1 << 16
_CATEGORIES = ("busy_cycles", "dram_stall_cycles", "stall_cycles", "sequencer_cycles", "idle_cycles")


def analyse(directory: ProgramDir, *, dram: DramModel = "npu", stats: Stats | None = None,
            seed: int | None = None, prepared: PreparedProgram | None = None) -> tuple[dict, CycleResult]:
    """The report document of ``directory`` (checked against the schema) and the timeline it comes from.
    ``stats``: the interpreter's counts of a run on real inputs (saturations, LUT inputs out of range), with
    the ``seed`` of its schedule; ``prepared``: the program as the interpreter prepared it for that run, if
    the caller has it (else it is prepared here: the checks, and each command's accesses)."""
    program, config = directory.program, directory.program.config
    prepared = prepared or prepare(program, directory.dram.size)
    with executing(directory.path):                  # a weight stream in the DRAM image that does not decode
        timing = simulate(program, Memory.create(config, directory.dram), dram=dram)
    steps = read_steps(directory)
    manifest_layers = read_layer_rows(directory)
    layers = _with_overlaps([_layer(step, directory, prepared, timing, manifest_layers, stats) for step in steps])
    dram_bytes = timing.dram_bytes
    document = {
        "format": FORMAT, "schema_version": SCHEMA_VERSION,
        "metadata": _metadata(directory, dram, stats, seed),
        "summary": {
            "total_cycles": timing.total_cycles, "time_us": timing.total_cycles / config.clock_mhz,
            "clock_mhz": config.clock_mhz, "macs": timing.macs, "mac_array_size": timing.array_macs,
            "mac_utilisation": timing.mac_utilisation,
            "dram_read_bytes": dram_bytes[Unit.LOAD] + dram_bytes[Unit.WDEC],
            "dram_written_bytes": dram_bytes[Unit.STORE],
            "dram_bytes_per_cycle": config.dram.bytes_per_cycle,
            "long_pole_unit": max(Unit, key=lambda unit: timing.busy[unit]).name,
            "wdec_pole_layers": sum(layer["wdec_conv_pole"] == "wdec" for layer in layers),
            **_span_totals(layers),
            "units": [_unit_totals(unit, timing) for unit in Unit if timing.timings[unit]],
        },
        "layers": layers,
    }
    validate(document)
    return document, timing


def read_steps(directory: ProgramDir) -> list[dict]:
    """The manifest's steps, checked against the program (a hostile file): each names its layers and, per unit,
    a range of that unit's queue; ranges never overlap. A manifest without steps is one step, the program."""
    queues = directory.program.queues
    steps = directory.manifest.get("steps")
    where = directory.path / MANIFEST_FILE
    if steps is None:
        return [{"layers": ["program"], "commands": {unit.name: [0, len(queue)] for unit, queue in queues.items()
                                                     if queue}}]
    if not isinstance(steps, list) or not 1 <= len(steps) <= MAX_STEPS:     # no step would leave no layer
        shown = f"{len(steps)} steps" if isinstance(steps, list) else type(steps).__name__
        raise InputError("steps", shown, f"a list of 1 .. {MAX_STEPS} steps").within(where)
    claimed: dict[str, int] = defaultdict(int)
    for index, step in enumerate(steps):
        field = f"steps[{index}]"
        if not isinstance(step, dict) or not isinstance(step.get("commands"), dict) or not step["commands"]:
            raise InputError(field, step, "an object with layers and commands").within(where)
        names = step.get("layers")
        if (not isinstance(names, list) or not 1 <= len(names) <= 64
                or not all(isinstance(name, str) and 0 < len(name) <= 256 for name in names)):
            raise InputError(f"{field}.layers", names, "a list of 1 .. 64 layer names").within(where)
        for unit_name, span in step["commands"].items():
            if unit_name not in Unit.__members__:
                raise InputError(f"{field}.commands", unit_name, f"a unit: {', '.join(Unit.__members__)}").within(where)
            length = len(queues[Unit[unit_name]])
            if (not isinstance(span, list) or len(span) != 2 or not all(type(end) is int for end in span)
                    or not claimed[unit_name] <= span[0] < span[1] <= length):
                raise InputError(f"{field}.commands.{unit_name}", span,
                                 f"[first, end) with {claimed[unit_name]} <= first < end <= {length}, after the "
                                 "previous step's").within(where)
            claimed[unit_name] = span[1]
    return steps


def read_layer_rows(directory: ProgramDir) -> dict[str, dict]:
    """The manifest's per-layer report rows by name, checked as a hostile file's: each an object with a name,
    and the fields the report reads (kind, weights, sqnr_db, clipped_fraction, table_input_range) of their
    types and ranges."""
    rows, where = directory.manifest.get("layers", []), directory.path / MANIFEST_FILE
    if not isinstance(rows, list) or len(rows) > MAX_STEPS:
        raise InputError("layers", rows if not isinstance(rows, list) else f"{len(rows)} rows",
                         f"a list of at most {MAX_STEPS} layer rows").within(where)
    for index, row in enumerate(rows):
        field = f"layers[{index}]"
        if not isinstance(row, dict) or not isinstance(row.get("name"), str) or not 0 < len(row["name"]) <= 256:
            raise InputError(field, row, "an object whose name is a string of 1 .. 256 characters").within(where)
        clipped, codes = row.get("clipped_fraction"), row.get("table_input_range")
        sqnr = row.get("sqnr_db")
        for name in ("kind", "weights"):
            if row.get(name) is not None and not (isinstance(row[name], str) and len(row[name]) <= 64):
                raise InputError(f"{field}.{name}", row[name], "a string of at most 64 characters").within(where)
        if sqnr is not None and (type(sqnr) not in (int, float) or not -1000 <= sqnr <= 1000):
            raise InputError(f"{field}.sqnr_db", sqnr, "a number of dB -1000 .. 1000, or null").within(where)
        if clipped is not None and (type(clipped) not in (int, float) or not 0 <= clipped <= 1):
            raise InputError(f"{field}.clipped_fraction", clipped, "a fraction 0 .. 1, or null").within(where)
        if codes is not None and not (_is_pair(codes) and codes[0] <= codes[1]):
            raise InputError(f"{field}.table_input_range", codes, "[low, high] integers, low <= high").within(where)
    return {row["name"]: row for row in rows}


def _layer(step: dict, directory: ProgramDir, prepared: PreparedProgram, timing: CycleResult,
           manifest_layers: dict, stats: Stats | None) -> dict:
    array = timing.array_macs
    spans = {Unit[name]: range(*span) for name, span in step["commands"].items()}
    start = min(timing.timings[unit][index].start for unit, indices in spans.items() for index in indices)
    end = max(timing.timings[unit][index].retire for unit, indices in spans.items() for index in indices)
    units = [_unit_in_layer(unit, indices, timing, start, end) for unit, indices in spans.items()]
    queues = directory.program.queues
    macs = sum(useful_macs(queues[Unit.CONV][i]) for i in spans.get(Unit.CONV, ()) if
               queues[Unit.CONV][i].opcode in MAC_OPCODES)
    poles = _wdec_conv_pole(units)
    conv_busy = poles["conv_busy_cycles"]
    traffic: dict[tuple[str, bool], int] = Counter()
    for unit, indices in spans.items():
        for index in indices:
            for space, written, nbytes in prepared.steps[unit, index].traffic:
                traffic[space, written] += nbytes
    weights = {**_weights(directory, spans.get(Unit.WDEC, ())),
               **codebook_weights(directory.program, spans.get(Unit.LOAD, ()))}
    dram_read, dram_written = traffic[DRAM, False], traffic[DRAM, True]
    span = end - start
    rows = [manifest_layers.get(name, {}) for name in step["layers"]]
    clipped = [row["clipped_fraction"] for row in rows if row.get("clipped_fraction") is not None]
    sqnr = [row["sqnr_db"] for row in rows if row.get("sqnr_db") is not None]
    table_ranges = [row["table_input_range"] for row in rows if row.get("table_input_range") is not None]
    counted = _run_counts(stats, spans) if stats is not None else None
    return {
        "name": "+".join(step["layers"]), "layers": step["layers"],
        "kinds": [row.get("kind") for row in rows],
        "weight_formats": [row["weights"] for row in rows if row.get("weights") is not None],
        "start_cycle": start, "end_cycle": end, "span_cycles": span,
        "macs": macs, "ideal_cycles": macs / array,
        "mac_utilisation": macs / (span * array) if span else 0.0,
        "mapping_efficiency": macs / (conv_busy * array) if conv_busy else None,
        "operations_per_dram_byte": 2 * macs / (dram_read + dram_written) if dram_read + dram_written else None,
        "operations_per_cycle": 2 * macs / span if span else 0.0,
        "dram_read_bytes": dram_read, "dram_written_bytes": dram_written,
        "sram_read_bytes": _sram_bytes(traffic, written=False),
        "sram_written_bytes": _sram_bytes(traffic, written=True),
        **weights,
        "long_pole_unit": max(units, key=lambda row: row["busy_cycles"] + row["dram_stall_cycles"])["unit"],
        **poles,
        **_decode_rates(weights["weight_decoded_bytes"], poles),
        "units": units,
        "calibration_sqnr_db": min(sqnr) if sqnr else None,
        "calibration_clipped_fraction": max(clipped) if clipped else None,
        "table_input_range": ([min(low for low, _ in table_ranges), max(high for _, high in table_ranges)]
                              if table_ranges else None),
        "saturated_values": counted[0] if counted else None,
        "lut_inputs_out_of_range": counted[1] if counted else None,
    }


def _with_overlaps(layers: list[dict]) -> list[dict]:
    """Each layer with the cycles its span shares with the previous and the next layer's span."""
    def shared(first: dict, second: dict) -> int:
        return max(0, min(first["end_cycle"], second["end_cycle"]) - max(first["start_cycle"], second["start_cycle"]))

    for index, layer in enumerate(layers):
        layer["overlap_previous_cycles"] = shared(layers[index - 1], layer) if index else 0
        layer["overlap_next_cycles"] = shared(layer, layers[index + 1]) if index + 1 < len(layers) else 0
    return layers


def _span_totals(layers: list[dict]) -> dict:
    """The layers' spans added up, the cycles they cover together, and the difference: how much the spans
    overlap (what running every span after the previous one's would add)."""
    covered, reach = 0, 0
    for start, end in sorted((layer["start_cycle"], layer["end_cycle"]) for layer in layers):
        covered += max(0, end - max(start, reach))
        reach = max(reach, end)
    spans = sum(layer["span_cycles"] for layer in layers)
    return {"layer_span_sum_cycles": spans, "layer_covered_cycles": covered,
            "layer_overlap_cycles": spans - covered}


def _wdec_conv_pole(units: list[dict]) -> dict:
    """WDEC's and CONV's busy cycles in the layer and which of the two is its long pole: "wdec" where WDEC's
    cycles at work (busy and DRAM stall, as ``long_pole_unit`` counts them) exceed CONV's, so that decoding the
    weights would bound the layer even if it overlapped the MACs entirely; "conv" where CONV works at least as
    long (every layer with MACs and no compressed weights); None in a layer with neither."""
    rows = {row["unit"]: row for row in units}
    at_work = {name: rows[name]["busy_cycles"] + rows[name]["dram_stall_cycles"] if name in rows else 0
               for name in ("WDEC", "CONV")}
    pole = None if not any(at_work.values()) else "wdec" if at_work["WDEC"] > at_work["CONV"] else "conv"
    return {"wdec_busy_cycles": rows["WDEC"]["busy_cycles"] if "WDEC" in rows else 0,
            "conv_busy_cycles": rows["CONV"]["busy_cycles"] if "CONV" in rows else 0, "wdec_conv_pole": pole}


def _decode_rates(decoded: int, poles: dict) -> dict:
    """Weights WDEC wrote per cycle of its work, and the rate CONV's work asks for: the layer's decoded weights
    per CONV busy cycle (WDEC keeps pace where the first is the larger); None without decoded weights."""
    wdec, conv = poles["wdec_busy_cycles"], poles["conv_busy_cycles"]
    return {"wdec_weights_per_cycle": decoded / wdec if decoded and wdec else None,
            "weights_per_conv_cycle": decoded / conv if decoded and conv else None}


def _sram_bytes(traffic: dict[tuple[str, bool], int], *, written: bool) -> dict[str, int]:
    """Bytes of each on-chip buffer the layer's commands read (or wrote), by buffer name."""
    return {space: n for (space, is_write), n in sorted(traffic.items()) if space != DRAM and is_write == written}


def _is_pair(value) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value)


def _unit_in_layer(unit: Unit, indices: range, timing: CycleResult, start: int, end: int) -> dict:
    """The unit's cycles inside [start, end), each cycle in one category (they are consecutive per unit)."""
    timings = timing.timings[unit]
    clip = lambda low, high: max(0, min(high, end) - max(low, start))      # noqa: E731
    stalls: dict[str, int] = Counter()
    row = {"unit": unit.name, "commands": len(indices), "busy_cycles": 0, "dram_stall_cycles": 0,
           "sequencer_cycles": 0}
    for index in indices:
        command = timings[index]
        row["sequencer_cycles"] += clip(timings[index - 1].retire if index else 0, command.ready)  # take, check
        if command.waited_on is not None:
            stalls[command.waited_on] += clip(command.ready, command.start)
        row["busy_cycles"] += clip(command.start, command.start + command.work)
        row["dram_stall_cycles"] += clip(command.start + command.work, command.retire)
    row["stall_cycles"] = dict(sorted((reason, cycles) for reason, cycles in stalls.items() if cycles))
    row["idle_cycles"] = (end - start - row["busy_cycles"] - row["dram_stall_cycles"] - row["sequencer_cycles"]
                          - sum(stalls.values()))
    return row


def _unit_totals(unit: Unit, timing: CycleResult) -> dict:
    timings = timing.timings[unit]
    stalls: dict[str, int] = Counter()
    for command in timings:
        if command.waited_on is not None:
            stalls[command.waited_on] += command.waited
    return {"unit": unit.name, "commands": len(timings), "busy_cycles": timing.busy[unit],
            "dram_stall_cycles": timing.dram_stall[unit], "stall_cycles": dict(sorted(stalls.items())),
            "dram_bytes": timing.dram_bytes[unit]}


def _weights(directory: ProgramDir, indices: range) -> dict:
    """Bytes of the layer's WDEC streams, the int8 weights they decode to, and the bins decoded (every part's)."""
    stream = decoded = bins = 0
    for index in indices:
        command = directory.program.queues[Unit.WDEC][index]
        if command.opcode != Opcode.WDEC:
            continue
        data = directory.dram[command.dram_addr:command.dram_addr + command.length].tobytes()
        shape = (command.out_c, command.in_c, command.k_h, command.k_w)
        stream += command.length
        decoded += shape[0] * shape[1] * shape[2] * shape[3]
        bins += sum(counts.bins for _, counts in decode_parts(data, shape, command.parts, decoded_profile))
    return {"weight_stream_bytes": stream, "weight_decoded_bytes": decoded,
            "weight_compression_ratio": decoded / stream if stream else None, "bins_decoded": bins}


def codebook_weights(program, indices: range) -> dict:
    """Bytes of the layer's LOADs of codebook indices in DRAM, and of the int8 weights they expand to in WEIGHT
    (docs/quantization.md, "Codebook weights on chip")."""
    packed = expanded = 0
    for index in indices:
        command = program.queues[Unit.LOAD][index]
        if command.opcode == Opcode.LOAD and command.index_bits:
            packed += command.y_size * command.x_size * dram_run_bytes(command)
            expanded += command.y_size * command.x_size * command.run
    return {"codebook_index_bytes": packed, "codebook_weight_bytes": expanded}


def _run_counts(stats: Stats, spans: dict[Unit, range]) -> tuple[int, int]:
    """Saturated values and LUT inputs out of range of the layer's commands, from an interpreter run."""
    def inside(label: str) -> bool:
        unit, _, index = label.rstrip("]").partition("[")
        return unit in Unit.__members__ and Unit[unit] in spans and int(index) in spans[Unit[unit]]
    return (sum(n for label, n in stats.saturations.items() if inside(label)),
            sum(n for label, n in stats.lut_out_of_range.items() if inside(label)))


def _metadata(directory: ProgramDir, dram: DramModel, stats: Stats | None, seed: int | None) -> dict:
    config = directory.program.config
    source = directory.manifest.get("source")
    model = source.get("model") if isinstance(source, dict) else None
    return {"program": str(directory.path), "program_sha256": directory.manifest["files"][PROGRAM_FILE]["sha256"],
            "source_model": model if isinstance(model, str) else None,
            "configuration": config.to_dict(), "config_hash": config.config_hash(), "dram_model": dram,
            "aipu_version": version("aipu"), "git_revision": _git_revision(), "seed": seed,
            "input_run": stats is not None}


@cache
def _git_revision() -> str | None:
    """The source tree's commit, when aipu runs from a git checkout (None for an installed copy)."""
    try:
        found = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                               text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip() if found.returncode == 0 else None


def validate(document: dict) -> None:
    """The document against the report's JSON schema (a bug, not a user error, if it fails)."""
    import jsonschema

    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text()))


def layers_csv(document: dict) -> str:
    """One row per layer: the scalar figures."""
    fields = [key for key, value in document["layers"][0].items() if not isinstance(value, (list, dict))] \
        if document["layers"] else []
    out = io.StringIO()
    writer = csv.DictWriter(out, fields, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(document["layers"])
    return out.getvalue()


def units_csv(document: dict) -> str:
    """One row per layer and unit: its cycles by category, stalls by what they waited on ("reason=cycles")."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["layer", "unit", "commands", *_CATEGORIES[:2], "stall_cycles", "stalled_on", *_CATEGORIES[3:]])
    for layer in document["layers"]:
        for row in layer["units"]:
            writer.writerow([layer["name"], row["unit"], row["commands"], row["busy_cycles"], row["dram_stall_cycles"],
                             sum(row["stall_cycles"].values()),
                             ";".join(f"{reason}={cycles}" for reason, cycles in row["stall_cycles"].items()),
                             row["sequencer_cycles"], row["idle_cycles"]])
    return out.getvalue()
