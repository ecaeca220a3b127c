"""Several same-topology models on one NPU: one DRAM image holding the weight bytes they share once and each
model's own bytes, and a program per model (T/AI 115.1-2021 §7.1.1, §8.1.2; docs/multimodel.md).

Each model is compiled as usual with two constraints that make shared filters give shared bytes: one set of
activation ranges for all (each tensor's calibrated range the union of the models', so every scale, and with
per-channel weight scales every requantization record of a shared filter, is the same), and conv tiles that
break where the shared filters end (``k_boundaries``), so that a LOAD reads shared or specific bytes, never
both. :func:`merge` then lays the programs' DRAM out again by content: it cuts each image into the blocks its
commands read (the union of overlapping LOAD/WDEC ranges inside a constant) and the work areas (everything
else: inputs, activations, outputs), stores every distinct block once, and gives all models one work area
(only one runs at a time). Each program's DRAM addresses are rewritten block by block, keeping every
address's offset modulo DRAM_ALIGN, so each command reads the same bytes in the same bursts.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import numpy as np

from aipu.compiler.calibrate import HISTOGRAM_METHODS, TensorStats, collect, read_samples
from aipu.compiler.consistency import check_consistency
from aipu.compiler.graph import Graph, load_graph
from aipu.compiler.lowering.memory import DRAM_ALIGN, align
from aipu.compiler.lowering.network import NetworkProgram, lower_model
from aipu.compiler.normalize import normalize
from aipu.compiler.prequantized import is_prequantized
from aipu.compiler.qir import QConv, QModel
from aipu.compiler.quantize import QuantOptions, quantize_graph
from aipu.sim.machine.arch import DEFAULT, HardwareConfig
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode, dram_run_bytes
from aipu.sim.machine.program import Command, Program


@dataclass
class Member:
    """One model of the set: its graph, quantized model and program as compiled alone (the reference)."""

    name: str
    graph: Graph
    qmodel: QModel
    network: NetworkProgram


def quantize_models(paths, calibration_path, *, options: QuantOptions = QuantOptions(),
                    batch_size: int = 16) -> list[tuple[Graph, QModel]]:
    """Each float model quantized with the same activation ranges: every tensor's statistics over the
    calibration set joined across the models (extrema, mean and variance: the methods without histograms or
    samples). InputError names the model that is not of the first one's topology."""
    if options.method in HISTOGRAM_METHODS or options.activations == "int4" or options.method == "brelu":
        raise InputError("--method / --activations", f"{options.method} / {options.activations}",
                         "a range method without histograms or samples (shared activation ranges join the models' "
                         "extrema), int8 activations")
    graphs = []
    for path in paths:
        graph = normalize(load_graph(path))
        try:
            check_consistency(graph)
        except InputError as error:
            raise error.within(path) from None
        if is_prequantized(graph):
            raise InputError("model", "pre-quantized", "a float model (its scales are chosen jointly)").within(path)
        graphs.append(graph)
    for path, graph in zip(paths[1:], graphs[1:]):
        check_same_topology(graphs[0], graph, path)
    samples = read_samples(calibration_path, {name: graphs[0].shapes[name] for name in graphs[0].inputs})
    stats = [collect(graph, samples, batch_size=batch_size) for graph in graphs]
    joined = {name: _joined([s[name] for s in stats]) for name in stats[0]}
    return [(graph, quantize_graph(graph, joined, options)) for graph in graphs]


def _joined(parts: list[TensorStats]) -> TensorStats:
    out = TensorStats()
    for part in parts:
        out.minimum, out.maximum = min(out.minimum, part.minimum), max(out.maximum, part.maximum)
        out.batch_minima += part.batch_minima
        out.batch_maxima += part.batch_maxima
        out.total, out.total_squares, out.count = (out.total + part.total, out.total_squares + part.total_squares,
                                                   out.count + part.count)
    return out


def check_same_topology(first: Graph, other: Graph, source) -> None:
    """InputError naming the first node, shape or attribute where ``other`` is not ``first``'s topology."""
    if [n.op for n in first.nodes] != [n.op for n in other.nodes]:
        raise InputError("operators", [n.op for n in other.nodes],
                         f"the operators of the first model, {[n.op for n in first.nodes]}").within(source)
    for mine, theirs in zip(first.nodes, other.nodes):
        if (mine.name, mine.inputs, mine.outputs, mine.attrs) != (theirs.name, theirs.inputs, theirs.outputs,
                                                                  theirs.attrs):
            raise InputError(f"node {theirs.name!r}", f"{theirs.op} {list(theirs.inputs)}",
                             f"the first model's {mine.name!r} with its inputs and attributes").within(source)
    for name, shape in first.shapes.items():
        if other.shapes.get(name) != shape:
            raise InputError(f"tensor {name!r} shape", other.shapes.get(name), f"{list(shape)}, the first model's"
                             ).within(source)


def compile_models(paths, calibration_path, *, config: HardwareConfig = DEFAULT,
                   options: QuantOptions = QuantOptions(), k_boundaries: dict[str, int] | None = None,
                   names: list[str] | None = None) -> list[Member]:
    """The models quantized together (:func:`quantize_models`) and each lowered alone, its conv tiles breaking
    at ``k_boundaries`` (layer -> the number of filters the models share)."""
    boundaries = dict(k_boundaries or {})
    members = []
    for index, (path, (graph, qmodel)) in enumerate(zip(paths, quantize_models(paths, calibration_path,
                                                                               options=options))):
        unknown = sorted(set(boundaries) - {op.name for op in qmodel.ops if isinstance(op, QConv)})
        if unknown:
            raise InputError("shared filters of layer", unknown[0], "a Conv or Gemm layer of the model").within(path)
        try:
            network = lower_model(qmodel, config, k_boundaries=boundaries)
        except InputError as error:
            raise error.within(path) from None
        members.append(Member(names[index] if names else f"model{index}", graph, qmodel, network))
    return members


# ------------------------------------------------------------------------------------------------- merge
@dataclass(frozen=True)
class Block:
    """A range of one model's DRAM image, moved as a whole: [start, end) and where it goes."""

    start: int
    end: int
    constant: bool
    target: int = -1


@dataclass
class MergedImage:
    """The shared DRAM image, each model's program on it, and what the layout took."""

    dram: np.ndarray
    programs: list[Program]
    relocations: list[list[Block]]
    figures: dict = field(default_factory=dict)

    def address(self, model: int, address: int) -> int:
        """Where byte ``address`` of model ``model``'s own image lies in the merged one."""
        return _relocate(self.relocations[model], address, address + 1)


def dram_range(command: Command) -> tuple[int, int] | None:
    """The DRAM bytes [low, high) a LOAD, STORE or WDEC touches; None for other commands."""
    if command.opcode == Opcode.WDEC:
        return command.dram_addr, command.dram_addr + command.length
    if command.opcode not in (Opcode.LOAD, Opcode.STORE):
        return None
    high = (command.dram_addr + (command.y_size - 1) * command.dram_y_stride
            + (command.x_size - 1) * command.dram_x_stride + dram_run_bytes(command))
    return command.dram_addr, high


def _blocks(network: NetworkProgram) -> list[Block]:
    """The model's image cut into constant blocks (the unions of overlapping ranges its commands read inside a
    constant; bytes no command reads are dropped) and work areas (what lies between the constants)."""
    constants = sorted((address, address + len(network.plan.blobs[name]))
                       for name, (address, _) in network.plan.regions.items() if name in network.plan.blobs)
    ranges = sorted(r for queue in network.program.queues.values() for c in queue if (r := dram_range(c)))
    blocks, cursor = [], 0
    for low, high in constants:
        if low > cursor:
            blocks.append(Block(cursor, low, False))
        cursor = max(cursor, align(high))
        inside = [(a, b) for a, b in ranges if low <= a < high]
        for a, b in inside:
            if blocks and blocks[-1].constant and a < blocks[-1].end and blocks[-1].start >= low:
                blocks[-1] = Block(blocks[-1].start, max(blocks[-1].end, b), True)
            else:
                blocks.append(Block(a, b, True))
    if network.dram.size > cursor:
        blocks.append(Block(cursor, network.dram.size, False))
    return blocks


def _relocate(blocks: list[Block], low: int, high: int) -> int:
    for block in blocks:
        if block.start <= low and high <= block.end:
            return block.target + low - block.start
    raise ValueError(f"DRAM range [{low}, {high}) lies in no block of the layout (it crosses a constant's edge)")


def merge(networks: list[NetworkProgram]) -> MergedImage:
    """One image for every model: the work area first (as large as the largest model's), then each distinct
    constant block once (those several models read first), then the rest by model; each program rewritten."""
    cut = [_blocks(network) for network in networks]
    digests = [[_digest(network.dram, block) if block.constant else None for block in blocks]
               for network, blocks in zip(networks, cut)]
    users: dict[str, set[int]] = {}
    for model, keys in enumerate(digests):
        for key in keys:
            if key is not None:
                users.setdefault(key, set()).add(model)
    work = max(sum(align(b.end - b.start) for b in blocks if not b.constant) for blocks in cut)
    cursor, placed, parts = work, {}, []
    order = sorted(((model, index) for model, blocks in enumerate(cut) for index, b in enumerate(blocks) if b.constant),
                   key=lambda item: (len(users[digests[item[0]][item[1]]]) < 2, item))
    for model, index in order:
        key, block = digests[model][index], cut[model][index]
        if key not in placed:
            target = align(cursor) + block.start % DRAM_ALIGN
            placed[key] = target
            parts.append((target, networks[model].dram[block.start:block.end]))
            cursor = target + block.end - block.start
    dram = np.zeros(max(align(cursor), DRAM_ALIGN), np.uint8)
    for target, data in parts:
        dram[target:target + data.size] = data
    relocations = []
    for model, blocks in enumerate(cut):
        offset, moved = 0, []
        for block, key in zip(blocks, digests[model]):
            if block.constant:
                moved.append(replace(block, target=placed[key]))
            else:
                moved.append(replace(block, target=offset))
                offset += align(block.end - block.start)
        relocations.append(moved)
    programs = [_rewritten(network.program, moved) for network, moved in zip(networks, relocations)]
    return MergedImage(dram, programs, relocations, _figures(networks, relocations, digests, users, work, dram.size))


def _digest(dram: np.ndarray, block: Block) -> str:
    data = dram[block.start:block.end].tobytes()
    return f"{block.start % DRAM_ALIGN}:{hashlib.sha256(data).hexdigest()}"


def _rewritten(program: Program, blocks: list[Block]) -> Program:
    out = Program(program.config)
    for unit, queue in program.queues.items():
        for command in queue:
            span = dram_range(command)
            if span is not None:
                command = Command(command.opcode, {**command.args, "dram_addr": _relocate(blocks, *span)},
                                  command.pop, command.push)
            out.queues[unit].append(command)
    return out


def _figures(networks, relocations, digests, users, work: int, merged: int) -> dict:
    """DRAM bytes of the separate images and of the merged one, the constant bytes stored once for several
    models; per model its constant bytes, those it shares and those a switch to it reloads (its own)."""
    shared = {key for key, models in users.items() if len(models) > 1}
    sizes = [{key: b.end - b.start for b, key in zip(blocks, keys) if key is not None}
             for blocks, keys in zip(relocations, digests)]
    once = {key: size for model in sizes for key, size in model.items() if key in shared}
    return {"separate_dram_bytes": int(sum(network.dram.size for network in networks)), "merged_dram_bytes": merged,
            "work_bytes": work, "shared_bytes": sum(once.values()),
            "models": [{"constant_bytes": sum(model.values()),
                        "shared_bytes": sum(size for key, size in model.items() if key in shared),
                        "switch_bytes": sum(size for key, size in model.items() if key not in shared)}
                       for model in sizes]}


def write_merged(members: list[Member], merged: MergedImage, out, sources: list) -> dict:
    """``out/dram.bin`` (the merged image) and a sealed program directory per model, ``out/<name>/``, whose
    dram.bin is that same file (a hard link) and whose manifest addresses the merged image: `aipu run
    out/<name>` runs that model. Returns the layout's figures with the models' names, also in
    ``out/multimodel.json``."""
    import json
    import os
    from pathlib import Path

    from aipu.compiler.program_dir import DRAM_FILE, write_program_dir

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / DRAM_FILE).write_bytes(merged.dram.tobytes())
    figures = {**merged.figures, "models": [{"name": member.name, "source": str(source), **model}
                                            for member, source, model in zip(members, sources,
                                                                             merged.figures["models"])]}
    for index, member in enumerate(members):
        manifest = member.network.manifest()
        for entry in (*manifest["inputs"], *manifest["outputs"]):
            entry["dram_address"] = merged.address(index, entry["dram_address"])
        manifest.update(dram_bytes=int(merged.dram.size), source={"model": str(sources[index])},
                        config_hash=merged.programs[index].config.config_hash(),
                        multimodel={"model": index, "models": [m.name for m in members]})
        folder = out / member.name
        write_program_dir(folder, merged.programs[index], merged.dram, manifest,
                          member.graph.to_onnx().SerializeToString())
        os.remove(folder / DRAM_FILE)
        os.link(out / DRAM_FILE, folder / DRAM_FILE)
    (out / "multimodel.json").write_text(json.dumps(figures, indent=1) + "\n")
    return figures
