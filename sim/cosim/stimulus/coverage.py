"""Functional coverage of the constrained-random stimulus (cocotb-coverage): every field's corners, bin by bin.

A command family's model is a list of cover points, each a function of one command and the configuration that
names the bin the command falls in, with every bin it must reach. The corners of each field are bins of their
own, independently of the other fields (``dilation_h`` reaches 3 whatever ``dilation_w`` is), and a few points
name combinations a bug could hide in (a kernel that is taller than one tap under unequal dilations: a unit that
steps one axis by the other's dilation only shows there). :func:`coverage` samples the commands of some programs
and returns the hits of every bin; a bin with none is a corner the stimulus never drew.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

from cocotb_coverage.coverage import CoverPoint, coverage_db, coverage_section

from aipu.sim.machine.arch import BUFFER_UNIT_BYTES, Buffer, DType, HardwareConfig, dtype_bounds
from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.program import Command, Program

Point = tuple[str, Callable[[dict, HardwareConfig], object], list]   # name, bin of (fields, config), every bin


def _zero_point(name: str) -> Callable[[dict, HardwareConfig], str]:
    def corner(fields: dict, config: HardwareConfig) -> str:
        dtype = fields["in_type"] if name == "in_zero_point" else fields.get("w_type", DType.INT8)
        low, high = dtype_bounds(DType(dtype))
        return {low: "minimum", 0: "zero", high: "maximum"}.get(fields[name], "inside")
    return corner


def _axis(field: str, values: Iterable[int]) -> Point:
    return field, lambda fields, config: fields[field], list(values)


def _aligned(buffer: Buffer) -> Callable[[dict, HardwareConfig], str]:
    def alignment(fields: dict, config: HardwareConfig) -> str:
        offset = fields["in_addr"] * BUFFER_UNIT_BYTES[buffer] % config.buffer(buffer).port_bytes
        return "unaligned" if offset else "aligned"
    return alignment


def _unequal_dilations(fields: dict, config: HardwareConfig) -> bool:
    """A kernel of more than one tap on both axes, dilated differently on the two."""
    return fields["k_h"] > 1 and fields["k_w"] > 1 and fields["dilation_h"] != fields["dilation_w"]


def _unequal_strides(fields: dict, config: HardwareConfig) -> bool:
    return fields["stride_h"] != fields["stride_w"]


def _operands(input_buffer: Buffer) -> list[Point]:
    return [("in_type", lambda f, config: DType(f["in_type"]).name, ["INT8", "UINT8"]),
            ("in_zero_point", _zero_point("in_zero_point"), ["minimum", "zero", "maximum", "inside"]),
            ("w_zero_point", _zero_point("w_zero_point"), ["minimum", "zero", "maximum", "inside"]),
            ("accumulate", lambda f, config: f["accumulate"], [0, 1]),
            ("in_addr", _aligned(input_buffer), ["aligned", "unaligned"])]


def _group_in(fields: dict, config: HardwareConfig) -> str:
    group_in, rows = fields["in_c"] // fields["groups"], config.mac.rows
    return "rows" if group_in == rows else "fewer than rows" if group_in < rows else "more than rows"


def _channels(fields: dict, config: HardwareConfig) -> str:
    return {1: "one", config.mac.rows: "rows"}.get(fields["channels"], "between")


MODELS: dict[Opcode, list[Point]] = {
    Opcode.CONV: [
        *(_axis(field, (1, 2, 3)) for field in ("k_h", "k_w", "stride_h", "stride_w", "dilation_h", "dilation_w")),
        ("groups", lambda f, config: "one" if f["groups"] == 1 else "several", ["one", "several"]),
        ("input channels per group", _group_in, ["fewer than rows", "rows", "more than rows"]),
        ("unequal dilations", _unequal_dilations, [True, False]),
        ("unequal strides", _unequal_strides, [True, False]),
        *_operands(Buffer.ACT)],
    Opcode.DWCONV: [
        *(_axis(field, range(1, 6)) for field in ("k_h", "k_w")),
        *(_axis(field, (1, 2, 3)) for field in ("stride_h", "stride_w")),
        *(_axis(field, (1, 2)) for field in ("dilation_h", "dilation_w")),
        ("channels", _channels, ["one", "between", "rows"]),
        ("unequal dilations", _unequal_dilations, [True, False]),
        ("unequal strides", _unequal_strides, [True, False]),
        *_operands(Buffer.WEIGHT)],
}

_sections = itertools.count()


def coverage(programs: Iterable[Program], opcode: Opcode) -> dict[str, dict[object, int]]:
    """Hits of every bin of ``opcode``'s model over the commands of ``programs`` (their own configurations)."""
    prefix = f"coverage{next(_sections)}.{opcode.name.lower()}"      # the database is global: a fresh name
    section = coverage_section(*(CoverPoint(f"{prefix}.{name}", xf=lambda command, config, bin_of=bin_of:
                                            bin_of(command.args, config), bins=bins)
                                 for name, bin_of, bins in MODELS[opcode]))

    @section
    def sample(command: Command, config: HardwareConfig) -> None:
        """Each call samples every point of the model."""

    for program in programs:
        for command in itertools.chain.from_iterable(program.queues.values()):
            if command.opcode == opcode:
                sample(command, program.config)
    hits = {name[len(prefix) + 1:]: dict(item.detailed_coverage) for name, item in coverage_db.items()
            if name.startswith(prefix + ".")}
    for name in [name for name in coverage_db if name.startswith(prefix.split(".")[0])]:
        del coverage_db[name]
    return hits


def missing(hits: dict[str, dict[object, int]]) -> dict[str, list]:
    """The bins of each point that no command reached."""
    return {name: empty for name, bins in hits.items() if (empty := [b for b, count in bins.items() if not count])}


def report(hits: dict[str, dict[object, int]]) -> str:
    """One line per cover point: its bins with their hits."""
    width = max(map(len, hits))
    return "\n".join(f"{name:<{width}}  " + ", ".join(f"{b}: {count}" for b, count in bins.items())
                     for name, bins in hits.items())
