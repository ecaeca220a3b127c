"""The program image: a program's command queues as the NPU's command fetcher reads them from DRAM, as one table.

The host places the image in DRAM and writes its byte address to PROGRAM_BASE (docs/registers.md, "Program
image", is generated from ``HEADER_FIELDS``). The image is a header at the base, then each unit's queue of
``COMMAND_BYTES`` words, every queue at a byte offset from the base that is a multiple of :func:`alignment`
(a command and a DRAM word, so that every command starts on a DRAM word or a command slot within one). All
numbers are little-endian. The fetcher (rtl/fetch.py) refuses a header whose constants differ from its build's
or whose queues leave the DRAM the program may use; :func:`parse_image` checks more (overlaps, the header),
as for any file a user hands us.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import COMMAND_BYTES, ISA_LAYOUT_HASH, Unit
from aipu.sim.machine.program import MAX_PROGRAM_BYTES, Program

IMAGE_MAGIC = int.from_bytes(b"AIPQ", "little")     # "AIPQ" in the first four bytes: AIPU queues
IMAGE_VERSION = 1       # raised whenever a header field moves or changes meaning
MAX_IMAGE_BYTES = MAX_PROGRAM_BYTES    # what parse_image accepts: as many commands as a program file holds


@dataclass(frozen=True)
class HeaderField:
    """``size`` bytes at byte ``offset`` of the header; ``unit``: the queue a per-unit field describes."""

    name: str
    offset: int
    size: int
    meaning: str
    unit: Unit | None = None


def _queue_fields(unit: Unit, offset: int) -> tuple[HeaderField, ...]:
    name = unit.name.lower()
    return (HeaderField(f"{name}_offset", offset, 4, f"byte offset of the {unit.name} queue from the base, a "
                        "multiple of the alignment", unit),
            HeaderField(f"{name}_count", offset + 4, 4, f"commands in the {unit.name} queue", unit))


CONSTANT_FIELDS = (
    HeaderField("magic", 0, 4, "\"AIPQ\" in ASCII: a program image"),
    HeaderField("version", 4, 4, "the image format version (`IMAGE_VERSION`)"),
    HeaderField("isa_hash", 8, 8, "the ISA layout hash the commands were encoded with (ISA_HASH)"),
    HeaderField("config_hash", 16, 8, "the hardware configuration hash they were encoded for (CONFIG_HASH)"),
)
_QUEUE_FIELDS_AT = CONSTANT_FIELDS[-1].offset + CONSTANT_FIELDS[-1].size
HEADER_FIELDS: tuple[HeaderField, ...] = CONSTANT_FIELDS + tuple(
    field for unit in Unit for field in _queue_fields(unit, _QUEUE_FIELDS_AT + 8 * unit))
HEADER_BYTES = HEADER_FIELDS[-1].offset + HEADER_FIELDS[-1].size
# What the fetcher's ERROR.FIELD indexes when it refuses a run (ErrorCause.PROGRAM_IMAGE): PROGRAM_BASE itself
# (unaligned, or the header beyond DRAM_BYTES), then the header field it refused.
FETCH_ERRORS: tuple[str, ...] = ("program_base", *(field.name for field in HEADER_FIELDS))
BY_NAME = {field.name: field for field in HEADER_FIELDS}


def constant_values(config: HardwareConfig) -> dict[str, int]:
    """The value each constant header field must hold for ``config``."""
    return {"magic": IMAGE_MAGIC, "version": IMAGE_VERSION, "isa_hash": int(ISA_LAYOUT_HASH, 16),
            "config_hash": int(config.config_hash(), 16)}


def alignment(config: HardwareConfig) -> int:
    """Bytes every queue offset and PROGRAM_BASE are a multiple of: a command and a DRAM word."""
    return max(COMMAND_BYTES, config.dram.bytes_per_cycle)


def _align(value: int, to: int) -> int:
    return -(-value // to) * to


def pack_image(config: HardwareConfig, queues: dict[Unit, list[bytes]]) -> bytes:
    """The image of raw command words per unit (words are not checked: a test may place an illegal one). Queues
    follow the header in ``Unit`` order, each at the next aligned offset; the image ends aligned."""
    align = alignment(config)
    values, offset = constant_values(config), _align(HEADER_BYTES, align)
    for unit in Unit:
        values[f"{unit.name.lower()}_offset"] = offset
        values[f"{unit.name.lower()}_count"] = len(queues.get(unit, ()))
        offset = _align(offset + COMMAND_BYTES * len(queues.get(unit, ())), align)
    image = bytearray(offset)
    for field in HEADER_FIELDS:
        image[field.offset:field.offset + field.size] = values[field.name].to_bytes(field.size, "little")
    for unit in Unit:
        start = values[f"{unit.name.lower()}_offset"]
        for index, word in enumerate(queues.get(unit, ())):
            image[start + COMMAND_BYTES * index:start + COMMAND_BYTES * (index + 1)] = word
    return bytes(image)


def build_image(program: Program) -> bytes:
    """The image of a program's queues, encoded for its configuration."""
    program.validate()
    return pack_image(program.config, {unit: [command.encode(program.config) for command in queue]
                                       for unit, queue in program.queues.items()})


def read_header(data: bytes) -> dict[str, int]:
    """Every header field's value (``data`` holds at least HEADER_BYTES)."""
    return {f.name: int.from_bytes(data[f.offset:f.offset + f.size], "little") for f in HEADER_FIELDS}


def parse_image(config: HardwareConfig, data: bytes, source: str = "program image") -> dict[Unit, list[bytes]]:
    """The command words of each unit in an image built for ``config``, every header field checked first (an
    :class:`InputError` naming ``source``, the field, its value and what is allowed)."""
    try:
        return _parse(config, data)
    except InputError as error:
        raise error.within(source) from None


def _parse(config: HardwareConfig, data: bytes) -> dict[Unit, list[bytes]]:
    if len(data) > MAX_IMAGE_BYTES:
        raise InputError("size", len(data), f"at most {MAX_IMAGE_BYTES} bytes")
    if len(data) < HEADER_BYTES:
        raise InputError("size", len(data), f"truncated: the header needs {HEADER_BYTES} bytes")
    header = read_header(data)
    for name, expected in constant_values(config).items():
        if header[name] != expected:
            raise InputError(name, f"{header[name]:#x}", f"expected {expected:#x} ({BY_NAME[name].meaning})")
    align, spans = alignment(config), []
    first = _align(HEADER_BYTES, align)
    for unit in Unit:
        name = unit.name.lower()
        offset, count = header[f"{name}_offset"], header[f"{name}_count"]
        if offset % align or not first <= offset <= len(data):
            raise InputError(f"{name}_offset", offset, f"a multiple of {align} in {first} .. {len(data)} "
                             "(after the header, inside the image)")
        if offset + COMMAND_BYTES * count > len(data):
            raise InputError(f"{name}_count", count, f"at most {(len(data) - offset) // COMMAND_BYTES}: the queue at "
                             f"byte {offset} ends inside the image's {len(data)} bytes")
        if count:
            spans.append((offset, offset + COMMAND_BYTES * count, unit))
    spans.sort()
    for (_, end, before), (start, _, unit) in zip(spans, spans[1:]):
        if start < end:
            raise InputError(f"{unit.name.lower()}_offset", start, f"at least {end}: the {before.name} queue "
                             "ends there (queues may not overlap)")
    queues = {}
    for unit in Unit:
        offset, count = header[f"{unit.name.lower()}_offset"], header[f"{unit.name.lower()}_count"]
        queues[unit] = [data[offset + COMMAND_BYTES * i:offset + COMMAND_BYTES * (i + 1)] for i in range(count)]
    return queues


def image_base(config: HardwareConfig, dram_bytes: int) -> int:
    """Where a compiled program's image goes: right after its ``dram_bytes``-byte DRAM image (the compiler's
    plan, ``Memory.dram``), aligned. DRAM_BYTES must then cover the image: base + its size."""
    return _align(dram_bytes, alignment(config))


def with_image(config: HardwareConfig, dram: np.ndarray, image: bytes) -> tuple[np.ndarray, int]:
    """A copy of the DRAM image ``dram`` with ``image`` placed at :func:`image_base`, and that base."""
    base = image_base(config, dram.size)
    placed = np.zeros(base + len(image), np.uint8)
    placed[:dram.size] = dram
    placed[base:] = np.frombuffer(image, np.uint8)
    return placed, base
