"""LUT's and SOFTMAX's cycles (docs/rtl-lut.md, "Cycles"): the LUT unit (``aipu.rtl.lut``) copies its table
into a local table memory a LUT word a cycle, then runs a group of elements a cycle (SOFTMAX: three passes
of one element a cycle, then its divider pipeline, ``aipu.rtl.lut_parts.softmax``), and writes one more output word
when the last group spills into it.
"""
from __future__ import annotations

from aipu.sim.machine.arch import (DTYPE_BYTES, LUT8_ENTRIES, LUT_ENTRY_BITS, MULTIPLIER_BITS, SOFTMAX_ENTRY_BYTES,
                                   Buffer, DType, HardwareConfig)
from aipu.sim.machine.isa import LutMode, Opcode
from aipu.sim.machine.program import Command

ENTRY_BYTES = LUT_ENTRY_BITS // 8
SOFTMAX_TABLE_BYTES = LUT8_ENTRIES * SOFTMAX_ENTRY_BYTES
SOFTMAX_QUOTIENT_BITS = MULTIPLIER_BITS + 1   # q <= M / 2^N + 1/2 <= 2^16: e <= S, so e·M / D <= M / 2^N
# From an element's DIVIDE read to its result: the table read, the product, the divider's stages.
SOFTMAX_LATENCY = 2 + SOFTMAX_QUOTIENT_BITS


def entries_per_row(config: HardwareConfig) -> int:
    """Table entries one LUT word carries: the local table's row width, so loading takes a row per cycle."""
    return config.buffer(Buffer.LUT).port_bytes // ENTRY_BYTES


def group_elements(config: HardwareConfig, src_buf: Buffer, in_type: DType, out_type: DType) -> int:
    """Elements per RUN cycle: as many as both the source word and the destination word hold."""
    return min(config.buffer(src_buf).port_bytes // DTYPE_BYTES[in_type], config.buffer(Buffer.OUT).port_bytes
               // DTYPE_BYTES[out_type])


def table_entries(command: Command) -> int:
    """16-bit entries the LOAD phase copies (a softmax exp entry is two)."""
    if command.opcode == Opcode.SOFTMAX:
        return SOFTMAX_TABLE_BYTES // ENTRY_BYTES
    return LUT8_ENTRIES if command.mode == LutMode.DIRECT8 else (1 << command.table_log2) + 1


def command_cycles(config: HardwareConfig, command: Command) -> int:
    """Cycles from start to retire of a LUT or SOFTMAX command that executes (docs/rtl-lut.md, "Cycles")."""
    load_rows = -(-table_entries(command) // entries_per_row(config))
    out_bytes = DTYPE_BYTES[DType(command.out_type)]
    if command.opcode == Opcode.SOFTMAX:     # three passes of one element per cycle, then the divider's latency
        elements = command.rows * command.length
        spill = _spill(config, command.dst_addr, elements, 1, out_bytes)
        return 3 + load_rows + 3 * elements + SOFTMAX_LATENCY + spill
    lanes = group_elements(config, Buffer(command.src_buf), DType(command.in_type), DType(command.out_type))
    return 3 + load_rows + -(-command.count // lanes) + _spill(config, command.dst_addr, command.count, lanes,
                                                                out_bytes)


def _spill(config: HardwareConfig, dst_addr: int, count: int, lanes: int, out_bytes: int) -> int:
    """1 if the last group's bytes run into one more output word than the packer writes with it."""
    groups = -(-count // lanes)
    out_word = config.buffer(Buffer.OUT).port_bytes
    last_offset = (dst_addr + (groups - 1) * lanes * out_bytes) % out_word
    return int(last_offset + (count - (groups - 1) * lanes) * out_bytes > out_word)
