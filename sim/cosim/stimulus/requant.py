"""Random REQUANTs in every mode, rounding and output type, writing disjoint unaligned OUT regions, over
accumulators and parameter records drawn to reach the extremes (biases, multipliers, shifts, float32 scales
from subnormal to huge). A program's ``kind`` says which commands it draws: "plain" (whole-byte outputs, one
accumulator a channel: the draws of the programs before INT4 outputs and dual planes existed), "int4" (INT4
outputs), "dual" (two accumulator planes a channel, any output type) or "mixed" (each command one of the three)."""
from __future__ import annotations

import numpy as np

from aipu.rtl.requant import RequantUnit
from aipu.sim.cosim.stimulus.base import Stimulus
from aipu.sim.machine.arch import (ACC_BITS, ACC_DTYPE, BIAS_BITS, MULTIPLIER_MAX, PARAM_DTYPE, SHIFT_MAX,
                                   BYTE_TYPES, Buffer, DType, HardwareConfig, bit_range, dtype_bounds,
                                   elements_bytes)
from aipu.sim.machine.isa import Opcode, RequantMode, Rounding, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program

MAX_ELEMENTS = 40     # per command, by default


def random_records(rng: np.random.Generator, count: int) -> np.ndarray:
    """Legal parameter records for every mode: extreme and typical biases, multipliers, shifts and scales
    (normal, subnormal and huge float32 scales)."""
    records = np.zeros(count, dtype=PARAM_DTYPE)
    bias_low, bias_high = bit_range(BIAS_BITS, signed=True)
    records["bias"] = np.where(rng.random(count) < 0.2, rng.choice([bias_low, bias_high, 0, -1], count),
                               rng.integers(-(1 << 20), 1 << 20, count))
    for name in ("multiplier", "negative_multiplier"):
        records[name] = np.where(rng.random(count) < 0.2, rng.choice([0, 1, MULTIPLIER_MAX], count),
                                 rng.integers(0, MULTIPLIER_MAX, count, endpoint=True))
    for name in ("shift", "negative_shift"):
        records[name] = rng.integers(0, SHIFT_MAX, count, endpoint=True)
    exponents = rng.choice([-149, -130, -126, -60, -40, -20, -12, -8, -4, 0, 8, 60, 127], count)
    scales = np.ldexp(1 + rng.random(count), exponents).astype(np.float32)
    records["scale"] = np.where(scales > 0, scales, np.float32(2.0 ** -149))
    return records


def random_accumulators(rng: np.random.Generator, count: int) -> np.ndarray:
    low, high = bit_range(ACC_BITS, signed=True)
    magnitude = rng.choice([1 << 8, 1 << 16, 1 << 24, 1 << 31], count)
    values = rng.integers(-magnitude, magnitude)
    return np.where(rng.random(count) < 0.05, rng.choice([low, high, 0, -1], count), values).astype(ACC_DTYPE)


KINDS = ("plain", "int4", "dual", "mixed")


def _random_command(rng: np.random.Generator, config: HardwareConfig, out_addr: int, max_elements: int,
                    kind: str) -> Command:
    """A legal REQUANT of ``kind`` ("plain", "int4" or "dual"); a plain one draws exactly as before the others
    existed, the others draw their options after the shared ones."""
    channels = int(rng.integers(1, min(24, config.buffer_units(Buffer.PARAM)), endpoint=True))
    int4 = kind == "int4" or (kind == "dual" and rng.random() < 0.5)
    if int4:
        channels = min(channels + channels % 2, config.buffer_units(Buffer.PARAM) // 2 * 2)
    planes = 2 if kind == "dual" else 1
    pixels = int(rng.integers(1, max(1, max_elements // (channels * planes)), endpoint=True))
    out_type = DType.INT4 if int4 else DType(rng.choice(list(BYTE_TYPES)))
    low, high = dtype_bounds(out_type)
    qmin, qmax = sorted(rng.integers(low, high, 2, endpoint=True)) if rng.random() < 0.5 else (low, high)
    mode = RequantMode.NATIVE if kind == "dual" else RequantMode(rng.choice(list(RequantMode)))
    leaky = int(kind != "dual" and mode == RequantMode.NATIVE and rng.random() < 0.4)
    entries = pixels * channels * planes
    return Command.make(Opcode.REQUANT, acc_addr=int(rng.integers(0, config.buffer_units(Buffer.ACC) - entries,
                                                                  endpoint=True)),
                        out_addr=out_addr, pixels=pixels, channels=channels,
                        param_index=int(rng.integers(0, config.buffer_units(Buffer.PARAM) - channels, endpoint=True)),
                        out_type=out_type, out_zero_point=int(rng.integers(low, high, endpoint=True)),
                        qmin=int(qmin), qmax=int(qmax), mode=mode, rounding=Rounding(rng.choice(list(Rounding))),
                        leaky=leaky, dual=int(kind == "dual"))


def random_stimulus(config: HardwareConfig, rng: np.random.Generator, commands: int,
                    max_elements: int = MAX_ELEMENTS, kind: str = "plain") -> Stimulus:
    """Up to ``commands`` random legal REQUANTs of ``kind`` (KINDS) writing disjoint, unaligned OUT regions
    (fewer when OUT is full); ACC and PARAM random, every record's negative shift 0 where dual commands may
    read them (dual refuses any other)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    memory = Memory.create(config, 64)
    memory.buffers[Buffer.ACC][:] = random_accumulators(rng, config.buffer_units(Buffer.ACC)).view(np.uint8)
    records = random_records(rng, config.buffer_units(Buffer.PARAM))
    if kind in ("dual", "mixed"):
        records["negative_shift"] = 0
    memory.buffers[Buffer.PARAM][:] = records.view(np.uint8)
    program = Program(config)
    out_addr = 0
    for _ in range(commands):
        out_addr += int(rng.integers(0, 4))
        drawn = KINDS[int(rng.integers(0, 3))] if kind == "mixed" else kind
        command = _random_command(rng, config, out_addr, max_elements, drawn)
        size = elements_bytes(command.pixels * command.channels, DType(command.out_type))
        if out_addr + size > config.buffer_units(Buffer.OUT):
            break
        program.append(command)
        out_addr += size
    program.append(Command.make(Opcode.FINISH, unit=Unit.REQUANT))
    return Stimulus(program, memory, (RequantUnit,))
