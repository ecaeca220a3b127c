"""Random REQUANTs in every mode, rounding and output type, writing disjoint unaligned OUT regions, over
accumulators and parameter records drawn to reach the extremes (biases, multipliers, shifts, float32 scales
from subnormal to huge)."""
from __future__ import annotations

import numpy as np

from aipu.rtl.requant import RequantUnit
from aipu.sim.cosim.stimulus.base import Stimulus
from aipu.sim.golden._checks import dtype_range
from aipu.sim.machine.arch import (ACC_BITS, ACC_DTYPE, BIAS_BITS, DTYPE_BYTES, DTYPE_NUMPY, MULTIPLIER_MAX,
                                   PARAM_DTYPE, SHIFT_MAX, BYTE_TYPES, Buffer, DType, HardwareConfig, bit_range)
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


def _random_command(rng: np.random.Generator, config: HardwareConfig, out_addr: int, max_elements: int) -> Command:
    channels = int(rng.integers(1, min(24, config.buffer_units(Buffer.PARAM)), endpoint=True))
    pixels = int(rng.integers(1, max(1, max_elements // channels), endpoint=True))
    out_type = DType(rng.choice(list(BYTE_TYPES)))
    low, high = dtype_range(DTYPE_NUMPY[out_type])
    qmin, qmax = sorted(rng.integers(low, high, 2, endpoint=True)) if rng.random() < 0.5 else (low, high)
    mode = RequantMode(rng.choice(list(RequantMode)))
    leaky = int(mode == RequantMode.NATIVE and rng.random() < 0.4)
    return Command.make(Opcode.REQUANT, acc_addr=int(rng.integers(0, config.buffer_units(Buffer.ACC) - pixels * channels,
                                                                  endpoint=True)),
                        out_addr=out_addr, pixels=pixels, channels=channels,
                        param_index=int(rng.integers(0, config.buffer_units(Buffer.PARAM) - channels, endpoint=True)),
                        out_type=out_type, out_zero_point=int(rng.integers(low, high, endpoint=True)),
                        qmin=int(qmin), qmax=int(qmax), mode=mode, rounding=Rounding(rng.choice(list(Rounding))),
                        leaky=leaky)


def random_stimulus(config: HardwareConfig, rng: np.random.Generator, commands: int,
                    max_elements: int = MAX_ELEMENTS) -> Stimulus:
    """Up to ``commands`` random legal REQUANTs writing disjoint, unaligned OUT regions (fewer when OUT is
    full); ACC and PARAM random."""
    memory = Memory.create(config, 64)
    memory.buffers[Buffer.ACC][:] = random_accumulators(rng, config.buffer_units(Buffer.ACC)).view(np.uint8)
    memory.buffers[Buffer.PARAM][:] = random_records(rng, config.buffer_units(Buffer.PARAM)).view(np.uint8)
    program = Program(config)
    out_addr = 0
    for _ in range(commands):
        out_addr += int(rng.integers(0, 4))
        command = _random_command(rng, config, out_addr, max_elements)
        size = command.pixels * command.channels * DTYPE_BYTES[DType(command.out_type)]
        if out_addr + size > config.buffer_units(Buffer.OUT):
            break
        program.append(command)
        out_addr += size
    program.append(Command.make(Opcode.FINISH, unit=Unit.REQUANT))
    return Stimulus(program, memory, (RequantUnit,))
