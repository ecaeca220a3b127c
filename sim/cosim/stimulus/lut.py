"""Random LUT commands: DIRECT8 and INTERP16 with every input and output type, tables at odd and even
addresses, sources in ACT and OUT (in place, behind the source, elsewhere), over memories of random bytes with
one DIRECT8 table region per workload whose entries fit a chosen byte type (so DIRECT8 to INT8/UINT8 is legal).

Random SOFTMAX commands (the LUT unit's other command) have a workload of their own: one legal exp table per
memory (built for a random input scale, or random entries up to 2^20), rows of every length up to a bound,
every input and output type, multipliers and shifts over their whole fields."""
from __future__ import annotations

import numpy as np

from aipu.rtl.lut import LutUnit
from aipu.sim.cosim.stimulus.base import Stimulus, dtype_limits, unit_program
from aipu.sim.golden.softmax import EXP_MAX, build_softmax_table
from aipu.sim.machine.arch import (DTYPE_BYTES, LUT8_ENTRIES, LUT16_INDEX_BITS_MAX, LUT16_INDEX_BITS_MIN,
                                   LUT16_INPUT_BITS, LUT_ENTRY_DTYPE, MULTIPLIER_MAX, SOFTMAX_SHIFT_MAX,
                                   SOFTMAX_TABLE_DTYPE, BYTE_TYPES, Buffer, DType, HardwareConfig)
from aipu.sim.machine.isa import VECTOR_SOURCE_BUFFERS, LutMode, Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command

MAX_COUNT = 80     # elements per command, by default
MAX_SOFTMAX_LENGTH = 24   # elements per softmax row (and in all rows of a command), by default
ONE_BYTE_TYPES = [dtype for dtype in BYTE_TYPES if DTYPE_BYTES[dtype] == 1]
INTERP16_INPUT = DType.INT16


def refused_overlap(src_buf, src_addr, dst_addr, count, in_type, out_type) -> bool:
    """docs/rtl-lut.md: an overlapping destination must start at or before the source, elements no wider."""
    in_bytes, out_bytes = DTYPE_BYTES[in_type], DTYPE_BYTES[out_type]
    overlaps = (src_buf == Buffer.OUT and src_addr < dst_addr + count * out_bytes
                and dst_addr < src_addr + count * in_bytes)
    return overlaps and (dst_addr > src_addr or out_bytes > in_bytes)


def random_memory(config: HardwareConfig, rng: np.random.Generator) -> Memory:
    """Random bytes in the LUT unit's source buffers and its table memory."""
    memory = Memory.create(config, 64)
    for buffer in (*VECTOR_SOURCE_BUFFERS, Buffer.LUT):
        memory.buffers[buffer][:] = rng.integers(0, 256, config.buffer(buffer).bytes)
    return memory


class Workload:
    """A random memory image and random legal LUT commands for it."""

    def __init__(self, config, rng: np.random.Generator, max_count: int):
        self.config, self.rng, self.max_count = config, rng, max_count
        self.memory = random_memory(config, rng)
        lut_bytes = config.buffer(Buffer.LUT).bytes
        self.direct8_type = ONE_BYTE_TYPES[rng.integers(len(ONE_BYTE_TYPES))]   # the type the DIRECT8 region fits
        self.direct8_addr = int(rng.integers(0, lut_bytes - LUT8_ENTRIES * 2 + 1))
        region = rng.integers(*dtype_limits(self.direct8_type), LUT8_ENTRIES, endpoint=True).astype(LUT_ENTRY_DTYPE)
        self.memory.buffers[Buffer.LUT][self.direct8_addr:self.direct8_addr + region.nbytes] = region.view(np.uint8)

    def command(self, **overrides) -> Command:
        rng, config = self.rng, self.config
        lut_bytes = config.buffer(Buffer.LUT).bytes
        mode = LutMode(rng.integers(len(LutMode)))
        if mode == LutMode.DIRECT8:
            in_type = ONE_BYTE_TYPES[rng.integers(len(ONE_BYTE_TYPES))]
            out_type = DType.INT16 if rng.random() < 0.3 else self.direct8_type
            table_addr = (self.direct8_addr if out_type != DType.INT16 or rng.random() < 0.5
                          else int(rng.integers(0, lut_bytes - LUT8_ENTRIES * 2 + 1)))
            table = dict(table_addr=table_addr)
        else:
            in_type, out_type = INTERP16_INPUT, BYTE_TYPES[rng.integers(len(BYTE_TYPES))]
            largest = min(LUT16_INDEX_BITS_MAX, ((lut_bytes // 2) - 1).bit_length() - 1)
            table_log2 = int(rng.integers(LUT16_INDEX_BITS_MIN, largest + 1))
            index_shift = int(rng.integers(0, LUT16_INPUT_BITS + 1))
            low, high = dtype_limits(out_type)
            qmin, qmax = sorted(int(q) for q in rng.integers(low, high, 2, endpoint=True))
            if rng.random() < 0.3:
                qmin, qmax = low, high
            table = dict(table_addr=int(rng.integers(0, lut_bytes - ((1 << table_log2) + 1) * 2 + 1)),
                         table_log2=table_log2, index_shift=index_shift, qmin=qmin, qmax=qmax,
                         input_min=int(rng.integers(*dtype_limits(INTERP16_INPUT), endpoint=True)))
        in_bytes, out_bytes = DTYPE_BYTES[in_type], DTYPE_BYTES[out_type]
        src_buf = VECTOR_SOURCE_BUFFERS[rng.integers(len(VECTOR_SOURCE_BUFFERS))]
        src_size, out_size = config.buffer(src_buf).bytes, config.buffer(Buffer.OUT).bytes
        count = int(rng.integers(1, min(self.max_count, src_size // in_bytes, out_size // out_bytes) + 1))
        src_addr = int(rng.integers(0, src_size - count * in_bytes + 1))
        if src_buf == Buffer.OUT and out_bytes <= in_bytes and rng.random() < 0.5:   # in place, or behind
            behind = int(rng.integers(0, min(src_addr, 2 * count * out_bytes) + 1)) if rng.random() < 0.5 else 0
            dst_addr = src_addr - behind
        else:
            dst_addr = int(rng.integers(0, out_size - count * out_bytes + 1))
            while refused_overlap(src_buf, src_addr, dst_addr, count, in_type, out_type):
                dst_addr = int(rng.integers(0, out_size - count * out_bytes + 1))
        fields = dict(src_buf=src_buf, src_addr=src_addr, dst_addr=dst_addr, count=count, mode=mode,
                      in_type=in_type, out_type=out_type, **table)
        return Command.make(Opcode.LUT, **{**fields, **overrides})


def random_stimulus(config: HardwareConfig, rng: np.random.Generator, commands: int,
                    max_count: int = MAX_COUNT) -> Stimulus:
    return _stimulus(config, Workload(config, rng, max_count), commands)


def _stimulus(config: HardwareConfig, workload, commands: int) -> Stimulus:
    return Stimulus(unit_program(config, [workload.command() for _ in range(commands)], Unit.LUT),
                    workload.memory, (LutUnit,))


class SoftmaxWorkload:
    """A random memory image with one legal exp table, and random legal SOFTMAX commands for it."""

    def __init__(self, config, rng: np.random.Generator, max_length: int):
        self.config, self.rng, self.max_length = config, rng, max_length
        self.memory = random_memory(config, rng)
        if rng.random() < 0.5:
            table = build_softmax_table(float(rng.uniform(0.005, 0.5)))
        else:
            table = rng.integers(0, EXP_MAX, LUT8_ENTRIES, endpoint=True)
            table[0] = rng.integers(1, EXP_MAX, endpoint=True)
        table = table.astype(SOFTMAX_TABLE_DTYPE)
        self.table_addr = int(rng.integers(0, config.buffer(Buffer.LUT).bytes - table.nbytes + 1))
        self.memory.buffers[Buffer.LUT][self.table_addr:self.table_addr + table.nbytes] = table.view(np.uint8)

    def command(self, **overrides) -> Command:
        rng, config = self.rng, self.config
        in_type = ONE_BYTE_TYPES[rng.integers(len(ONE_BYTE_TYPES))]
        out_type = BYTE_TYPES[rng.integers(len(BYTE_TYPES))]
        src_buf = VECTOR_SOURCE_BUFFERS[rng.integers(len(VECTOR_SOURCE_BUFFERS))]
        src_size, out_size = config.buffer(src_buf).bytes, config.buffer(Buffer.OUT).bytes
        out_bytes = DTYPE_BYTES[out_type]
        length = int(rng.integers(1, self.max_length + 1))
        rows = int(rng.integers(1, max(2, self.max_length // length) + 1))
        elements = rows * length
        src_addr = int(rng.integers(0, src_size - elements + 1))
        dst_addr = int(rng.integers(0, out_size - elements * out_bytes + 1))
        while src_buf == Buffer.OUT and src_addr < dst_addr + elements * out_bytes and dst_addr < src_addr + elements:
            dst_addr = int(rng.integers(0, out_size - elements * out_bytes + 1))
        low, high = dtype_limits(out_type)
        qmin, qmax = sorted(int(q) for q in rng.integers(low, high, 2, endpoint=True))
        if rng.random() < 0.5:
            qmin, qmax = low, high
        fields = dict(src_buf=src_buf, src_addr=src_addr, dst_addr=dst_addr, rows=rows, length=length,
                      in_type=in_type, out_type=out_type, table_addr=self.table_addr,
                      multiplier=int(rng.integers(0, MULTIPLIER_MAX, endpoint=True)),
                      shift=int(rng.integers(0, SOFTMAX_SHIFT_MAX, endpoint=True)),
                      out_zero_point=int(rng.integers(low, high, endpoint=True)), qmin=qmin, qmax=qmax)
        return Command.make(Opcode.SOFTMAX, **{**fields, **overrides})


def random_softmax_stimulus(config: HardwareConfig, rng: np.random.Generator, commands: int,
                            max_length: int = MAX_SOFTMAX_LENGTH) -> Stimulus:
    return _stimulus(config, SoftmaxWorkload(config, rng, max_length), commands)
