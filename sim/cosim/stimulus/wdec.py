"""Random WDEC commands: int8 weight tensors of Laplacian levels (random scale and share of zeros), random
shapes (sometimes a channel count above a CTU), encoded in the NPU profile with a random CTU size and placed
back to back at odd DRAM offsets."""
from __future__ import annotations

import numpy as np

from aipu.codec.api import encode, read_index
from aipu.codec.npu_profile import encode_parts_stream, encode_profile_stream
from aipu.codec.reference.geometry import CTU_SIZES
from aipu.rtl.wdec import Wdec
from aipu.sim.cosim.stimulus.base import Stimulus, unit_program
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command

MAX_WEIGHTS = 256     # per command: on Amaranth's simulator a layer of this size costs about a second


def layer_stream(weights: np.ndarray, max_ctu_size: int = 64, options=None) -> bytes:
    """One layer's bare stream, as the compiler places it in DRAM for WDEC (``options``: another syntax)."""
    if options is None:
        return encode_profile_stream(weights, max_ctu_size)
    container = encode({"w": weights}, options)
    (info,), payload = read_index(container)
    return container[payload + info.offset:payload + info.offset + info.length]


def random_weights(rng: np.random.Generator, shape) -> np.ndarray:
    """Laplacian levels of a random scale with a random share of zeros, clipped to int8."""
    levels = np.round(rng.laplace(0, rng.choice([0.3, 2, 8, 40]), size=shape))
    levels[rng.random(shape) < rng.random()] = 0
    return np.clip(levels, -128, 127).astype(np.int8)


def random_shape(rng: np.random.Generator, weight_bytes: int, max_weights: int = MAX_WEIGHTS) -> tuple[int, ...]:
    """[O, I, KH, KW] of at most a quarter of the buffer; sometimes a channel count above a CTU."""
    while True:
        k_h, k_w = (int(n) for n in rng.choice([1, 1, 2, 3, 5], size=2))
        out_c, in_c = (int(n) for n in rng.integers(1, 12, size=2))
        if rng.random() < 0.2:
            out_c, in_c = (int(rng.integers(9, 80)), 1) if rng.random() < 0.5 else (1, int(rng.integers(9, 80)))
        if out_c * in_c * k_h * k_w <= min(weight_bytes // 4, max_weights):
            return out_c, in_c, k_h, k_w


def streams_stimulus(config: HardwareConfig, streams: list[tuple], rng: np.random.Generator) -> Stimulus:
    """One WDEC command per (stream, [O, I, KH, KW]) or (stream, [O, I, KH, KW], parts), the streams back to
    back after 0-3 bytes of gap each, each decoding to a random WEIGHT address."""
    dram = bytearray()
    weight_bytes = config.buffer(Buffer.WEIGHT).bytes
    commands = []
    for stream, (out_c, in_c, k_h, k_w), *parts in streams:
        dram += bytes(int(rng.integers(0, 4)))
        size = out_c * in_c * k_h * k_w
        commands.append(Command.make(Opcode.WDEC, dram_addr=len(dram), length=len(stream),
                                     wgt_addr=int(rng.integers(0, weight_bytes - size + 1)),
                                     out_c=out_c, in_c=in_c, k_h=k_h, k_w=k_w, parts=parts[0] if parts else 1))
        dram += stream
    memory = Memory.create(config, len(dram) + 64)
    memory.dram[:len(dram)] = np.frombuffer(bytes(dram), np.uint8)
    return Stimulus(unit_program(config, commands, Unit.WDEC), memory, (Wdec,))


def random_stimulus(config: HardwareConfig, rng: np.random.Generator, commands: int,
                    max_weights: int = MAX_WEIGHTS) -> Stimulus:
    """``commands`` random layers, each split into a random number of parts up to the part decoders."""
    streams = []
    for _ in range(commands):
        shape = random_shape(rng, config.buffer(Buffer.WEIGHT).bytes, max_weights)
        parts = int(rng.integers(1, min(config.wdec.engines, shape[0]) + 1))
        streams.append((encode_parts_stream(random_weights(rng, shape), parts, int(rng.choice(CTU_SIZES))), shape,
                        parts))
    return streams_stimulus(config, streams, rng)
