"""What LUT's parts share: the command's decoded operands, the lanes and the local table's geometry."""
from __future__ import annotations

from amaranth.hdl import Const, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data

from aipu.rtl.commands import command_layout
from aipu.rtl.ports import word_bytes
from aipu.sim.machine.arch import LUT8_ENTRIES, LUT16_INDEX_BITS_MAX, LUT_ENTRY_BITS, Buffer, HardwareConfig
from aipu.sim.machine.isa import COMMAND_BITS, VECTOR_SOURCE_BUFFERS, LutMode, Opcode
from aipu.sim.timing.lut import ENTRY_BYTES, SOFTMAX_TABLE_BYTES, entries_per_row


def log2(value: int) -> int:
    return value.bit_length() - 1


def source_bytes(config: HardwareConfig) -> dict:
    """Port bytes of each buffer a LUT command may read its elements from."""
    return {buffer: word_bytes(config, buffer) for buffer in VECTOR_SOURCE_BUFFERS}


def window_bytes(config: HardwareConfig) -> int:
    """The source window's width: the widest source word."""
    return max(source_bytes(config).values())


def lanes(config: HardwareConfig) -> int:
    """Elements a RUN cycle can take: the most one source word and one OUT word both hold (bytes)."""
    return max(min(size, word_bytes(config, Buffer.OUT)) for size in source_bytes(config).values())


def table_rows(config: HardwareConfig) -> int:
    """Rows of the local table: the largest INTERP16 table, whose entry 2**k + 1 is read (times 0)."""
    rows = -(-((1 << LUT16_INDEX_BITS_MAX) + 2) // entries_per_row(config))
    assert rows * entries_per_row(config) * ENTRY_BYTES >= SOFTMAX_TABLE_BYTES, "the softmax exp table fits"
    return rows


def table_row(config: HardwareConfig):
    """The shape of a local table row: one LUT word's entries."""
    return unsigned(LUT_ENTRY_BITS * entries_per_row(config))


def views(config: HardwareConfig, word) -> tuple[data.View, data.View]:
    """``word`` as a LUT command and as a SOFTMAX command."""
    return data.View(command_layout(config, Opcode.LUT), word), data.View(command_layout(config, Opcode.SOFTMAX), word)


def table_entries(cmd, is_softmax) -> Value:
    """16-bit entries the command's table holds: the exp table's, 256 (DIRECT8) or 2**table_log2 + 1."""
    return Mux(is_softmax, SOFTMAX_TABLE_BYTES // ENTRY_BYTES,
               Mux(cmd.mode == LutMode.DIRECT8, LUT8_ENTRIES, (Const(1) << cmd.table_log2) + 1))


def operands(config: HardwareConfig) -> data.StructLayout:
    """The command's quantities more than one part reads (the checks part decodes them; both commands'
    ``table_addr`` and ``dst_addr``): whether it is SOFTMAX, INTERP16; log2 of the input and output element
    bytes; the output type's range; the source buffer (``from_out``) and log2 of its word bytes; log2 of the
    elements of a RUN group; the table's entries."""
    lut, softmax = views(config, Signal(COMMAND_BITS))
    widest = lambda name: max(len(getattr(lut, name)), len(getattr(softmax, name)))   # noqa: E731
    return data.StructLayout({
        "is_softmax": 1, "interp": 1, "in_log2": range(3), "out_log2": range(3),
        "out_min": signed(LUT_ENTRY_BITS + 1), "out_max": signed(LUT_ENTRY_BITS + 1),
        "table_addr": widest("table_addr"), "dst_addr": widest("dst_addr"), "from_out": 1,
        "source_log2": range(log2(max(source_bytes(config).values())) + 1),
        "group_log2": range(log2(window_bytes(config)) + 1),
        "entries": Value.cast(table_entries(lut, Signal())).shape()})
