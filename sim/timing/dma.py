"""LOAD's and STORE's cycles (docs/rtl-dma.md, "Cycles"): the pattern walk ``aipu.rtl.dma`` executes.

Both units walk the DRAM pattern one DRAM word of one run at a time (runs that touch end to end in DRAM and
in the tile are walked as one, :func:`run_shape`), and each step is given a fixed number of cycles, its
*slot*, so the buffer port keeps up; that makes each command's cycles a pure function of its fields. They
come split around the DRAM transfer (:class:`DramPhases`), for the cycle model's DRAM shared between the
DMA units (WDEC's formula splits the same way).
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from aipu.sim.machine.arch import DTYPE_BYTES, Buffer, DType, HardwareConfig
from aipu.sim.machine.isa import (CODEBOOK_SLOT_BYTES, IndexBits, Opcode, circ_sign_bytes, circ_size, dram_run_bytes,
                                  load_expansion, load_tile_rows)
from aipu.sim.machine.program import Command

CHECK_CYCLES = 1          # the cycle after start: faults are raised or the probe goes out
STORE_TAIL_CYCLES = 1     # after the last slot: its DRAM word is composed and written


class DramPhases(NamedTuple):
    """A DMA command's cycles split around its DRAM transfer (docs/cycle-model.md, "A DRAM shared by the DMA
    units"): ``before`` and ``after`` it, and the ``transfer`` itself, which moves ``words`` DRAM words. Its
    formula's cycles are the sum of the three; the cycle model stretches only the transfer, when several DMA
    units want more words per cycle than the DRAM gives."""

    before: int
    transfer: int
    words: int
    after: int

    @property
    def cycles(self) -> int:
        return self.before + self.transfer + self.after


def run_shape(cmd, dense_gap: int) -> tuple[int, int, int]:
    """(rows, runs per row, bytes per run) walked: runs adjacent in DRAM merge into one when they are
    adjacent in the tile too (always within a row; across rows only with no padding between rows). A circulant
    LOAD's runs never merge: each run's signs start at its first byte."""
    run = dram_run_bytes(cmd)
    rows, runs = cmd.y_size, cmd.x_size
    if circ_size(cmd) > 1:
        return rows, runs, run
    if runs == 1 or cmd.dram_x_stride == run:
        run, runs = run * runs, 1
        if dense_gap == 0 and (rows == 1 or cmd.dram_y_stride == run):
            run, rows = run * rows, 1
    return rows, runs, run


@lru_cache(maxsize=4096)
def walk_words(dram_bytes: int, runs: int, run: int, stride: int, start: int = 0) -> int:
    """DRAM words the walk steps through for ``runs`` runs of ``run`` bytes, ``stride`` bytes apart, the first
    at DRAM byte ``start``: one step per DRAM word a run touches, runs that touch end to end walked as one
    (``dram_bytes`` a word). A plan's count before its commands exist; the walk below counts the same."""
    if runs == 0 or run == 0:
        return 0
    if stride == run:
        runs, run = 1, runs * run
    period = dram_bytes // math.gcd(stride, dram_bytes)       # the runs' offsets in their words repeat

    def touched(count: int) -> int:
        return sum(((start + i * stride) % dram_bytes + run - 1) // dram_bytes + 1 for i in range(count))

    full, rest = divmod(runs, period)
    return full * touched(period) + touched(rest)


def least_cycles(config: HardwareConfig, opcode: Opcode) -> int:
    """A LOAD's or STORE's cycles besides one slot per DRAM word of its walk, at the least: the check, a LOAD's
    DRAM latency and its padding's slot (one at least), a STORE's overlap scan (one at least) and its tail."""
    if opcode == Opcode.LOAD:
        return CHECK_CYCLES + config.dram.latency_cycles + 1
    if opcode == Opcode.STORE:
        return CHECK_CYCLES + 1 + STORE_TAIL_CYCLES
    raise ValueError(f"{opcode.name} is not a LOAD or STORE")


def _pattern_steps(config: HardwareConfig, cmd, dense_start: int, dense_gap: int):
    """Per step of the walk (one DRAM word of one run): tile byte address, tile bytes (the DRAM bytes times
    ``load_expansion``), last step of a row. A circulant LOAD walks each DRAM row ``circ_size`` times."""
    dram_bytes = config.dram.bytes_per_cycle
    rows, runs, run = run_shape(cmd, dense_gap)
    dram_rows = np.repeat(np.arange(rows, dtype=np.int64), circ_size(cmd))
    rows = dram_rows.size
    starts = (cmd.dram_addr + dram_rows[:, None] * cmd.dram_y_stride
              + np.arange(runs, dtype=np.int64)[None, :] * cmd.dram_x_stride).reshape(-1)
    first_word, last_word = starts // dram_bytes, (starts + run - 1) // dram_bytes
    words = last_word - first_word + 1
    step_run = np.repeat(np.arange(starts.size), words)
    word = first_word[step_run] + np.arange(step_run.size) - np.repeat(np.cumsum(words) - words, words)
    low = np.maximum(word * dram_bytes, starts[step_run])
    count = (np.minimum((word + 1) * dram_bytes, starts[step_run] + run) - low) * load_expansion(cmd)
    row = step_run // runs
    dense = dense_start + row * dense_gap + np.cumsum(count) - count
    row_end = np.zeros(step_run.size, bool)
    row_end[np.cumsum(words)[runs - 1::runs] - 1] = True
    return dense, count, row_end


def load_dense(cmd) -> tuple[int, int, int, int]:
    """(bytes per tile row, tile rows, first data byte, padding bytes between data rows) of a LOAD."""
    run = cmd.run * DTYPE_BYTES[DType(cmd.elem_type)]
    row_bytes = (cmd.x_size + cmd.pad_left + cmd.pad_right) * run
    rows = load_tile_rows(cmd) + cmd.pad_top + cmd.pad_bottom
    return row_bytes, rows, cmd.sram_addr + cmd.pad_top * row_bytes + cmd.pad_left * run, \
        (cmd.pad_left + cmd.pad_right) * run


def _words_touched(start, length, port_bytes: int):
    return np.where(length > 0, (start + length - 1) // port_bytes - start // port_bytes + 1, 0)


def _load_slots(config: HardwareConfig, cmd) -> tuple[int, np.ndarray, int]:
    port = config.buffer(Buffer(cmd.buffer)).port_bytes
    row_bytes, rows, data_start, gap = load_dense(cmd)
    dense, count, row_end = _pattern_steps(config, cmd, data_start, gap)
    ends = dense + count
    written = ends // port - dense // port + (row_end & (ends % port != 0))
    run = cmd.run * DTYPE_BYTES[DType(cmd.elem_type)]
    data_bytes = cmd.x_size * run
    inner = data_start + np.arange(cmd.y_size - 1, dtype=np.int64) * row_bytes + data_bytes
    first_len, last_len = data_start - cmd.sram_addr, cmd.pad_right * run + cmd.pad_bottom * row_bytes
    pad_words = (int(_words_touched(inner, gap, port).sum()) + int(_words_touched(cmd.sram_addr, first_len, port))
                 + int(_words_touched(cmd.sram_addr + rows * row_bytes - last_len, last_len, port)))
    return (CHECK_CYCLES + codebook_cycles(config, cmd) + config.dram.latency_cycles, np.maximum(written, 1),
            max(pad_words, 1))


def codebook_cycles(config: HardwareConfig, cmd) -> int:
    """Cycles a LOAD reads its codebook (index_bits > 0) or its sign bits (circ_size > 1) from LUT memory before
    the probe: one per LUT memory word they touch (they start at a multiple of CODEBOOK_SLOT_BYTES)."""
    if circ_size(cmd) > 1:
        count = circ_sign_bytes(cmd)
    elif cmd.index_bits != IndexBits.PLAIN:
        count = 1 << cmd.index_bits
    else:
        return 0
    port = config.buffer(Buffer.LUT).port_bytes
    first = cmd.codebook_addr * CODEBOOK_SLOT_BYTES
    return (first + count - 1) // port - first // port + 1


def _overlap_scan_cycles(cmd) -> int:
    """Cycles of STORE's check that no two runs share a byte: one per row distance that could overlap."""
    if cmd.y_size == 1:
        return 1
    run = cmd.run * DTYPE_BYTES[DType(cmd.elem_type)]
    extent = (cmd.x_size - 1) * cmd.dram_x_stride + run
    return min(cmd.y_size - 1, -(-extent // cmd.dram_y_stride))


def _store_slots(config: HardwareConfig, cmd) -> tuple[int, np.ndarray, int]:
    port = config.buffer(Buffer.OUT).port_bytes
    dense, count, _ = _pattern_steps(config, cmd, cmd.sram_addr, 0)
    last_read = (dense + count - 1) // port
    reads = np.diff(last_read, prepend=cmd.sram_addr // port - 1)
    return CHECK_CYCLES + _overlap_scan_cycles(cmd), np.maximum(reads, 1), STORE_TAIL_CYCLES


def command_cycles(config: HardwareConfig, command: Command) -> int:
    """Cycles from start to retire of a legal LOAD or STORE (docs/rtl-dma.md, "Cycles")."""
    return dram_phases(config, command).cycles


def dram_phases(config: HardwareConfig, command: Command) -> DramPhases:
    """A LOAD's or STORE's cycles around its DRAM transfer: the walk's slots, one DRAM word each."""
    before, slots, after = dram_slots(config, command)
    return DramPhases(before, int(slots.sum()), slots.size, after)


def dram_slots(config: HardwareConfig, command: Command) -> tuple[int, np.ndarray, int]:
    """A LOAD's or STORE's cycles before its walk, each step's slot (one DRAM word: at least one cycle), and its
    cycles after the walk: its formula is their sum. The NPU's cycle model paces the steps one by one."""
    if command.opcode == Opcode.LOAD:
        return _load_slots(config, command)
    if command.opcode == Opcode.STORE:
        return _store_slots(config, command)
    raise ValueError(f"{command.opcode.name} is not a DMA command")
