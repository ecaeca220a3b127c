"""Random POOLs (max and average, kernels up to 15 x 15, dilation, padding on every side, every rounding and
zero point, up to three groups of channels) and ELTWISEs (every op with its rescales, in place or into OUT),
over sources of random bytes; no destination overlaps a source except ELTWISE's exact in-place case."""
from __future__ import annotations

import numpy as np

from aipu.rtl.pool import PoolUnit
from aipu.sim.cosim.stimulus.base import Stimulus, dtype_limits, unit_program
from aipu.sim.golden.eltwise import MAX_ALIGN
from aipu.sim.machine.arch import DTYPE_BYTES, MULTIPLIER_MAX, SHIFT_MAX, BYTE_TYPES, Buffer, DType, HardwareConfig
from aipu.sim.machine.isa import EltwiseOp, Opcode, PoolMode, Rounding, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command
from aipu.sim.timing.pool import pool_lanes, pool_output_size

SOURCES = (Buffer.ACT, Buffer.OUT)


def _place(rng, config: HardwareConfig, buffer: Buffer, nbytes: int, avoid=()) -> int:
    """A byte address for ``nbytes`` in ``buffer`` not overlapping the (buffer, address, nbytes) in ``avoid``."""
    size = config.buffer(buffer).bytes
    for _ in range(1000):
        address = int(rng.integers(0, size - nbytes + 1))
        if all(other != buffer or address + nbytes <= low or low + length <= address
               for other, low, length in avoid):
            return address
    raise RuntimeError(f"no room for {nbytes} bytes in {buffer.name} beside {len(avoid)} regions")


def random_pool(rng, config: HardwareConfig, largest_kernel: int = 4) -> Command:
    """A legal POOL command whose destination does not overlap its source."""
    mode = PoolMode(int(rng.integers(2)))
    dtype = BYTE_TYPES[int(rng.integers(len(BYTE_TYPES)))]
    k_h, k_w = (int(k) for k in rng.integers(1, largest_kernel + 1, 2))
    large = k_h * k_w > 16        # one channel and long strides keep the tap count (= cycles) modest
    dilation_h, dilation_w = (1, 1) if mode == PoolMode.AVG or large else (int(d) for d in rng.integers(1, 4, 2))
    span_h, span_w = dilation_h * (k_h - 1) + 1, dilation_w * (k_w - 1) + 1
    pads = [int(rng.integers(0, min(span, 16))) if rng.random() < 0.6 else 0
            for span in (span_h, span_w, span_h, span_w)]
    in_h = max(1, span_h - pads[0] - pads[2]) + int(rng.integers(0, 4))
    in_w = max(1, span_w - pads[1] - pads[3]) + int(rng.integers(0, 4))
    channels = 1 if large else int(rng.integers(1, 2 * pool_lanes(config) + 4))   # up to 3 channel groups
    low, high = dtype_limits(dtype)
    strides = rng.integers(4, 8, 2) if large else rng.integers(1, 4, 2)
    fields = dict(dtype=dtype, mode=mode, k_h=k_h, k_w=k_w, in_h=in_h, in_w=in_w, channels=channels,
                  stride_h=int(strides[0]), stride_w=int(strides[1]),
                  dilation_h=dilation_h, dilation_w=dilation_w, pad_top=pads[0], pad_left=pads[1],
                  pad_bottom=pads[2], pad_right=pads[3])
    if mode == PoolMode.AVG:
        fields.update(count_include_pad=int(rng.integers(2)), rounding=Rounding(int(rng.integers(len(Rounding)))),
                      zero_point=int(rng.integers(low, high + 1)) if rng.random() < 0.7 else 0)
    out_h, out_w = pool_output_size(Command.make(Opcode.POOL, **fields))
    in_bytes = in_h * in_w * channels * DTYPE_BYTES[dtype]
    if 2 * (in_bytes + out_h * out_w * channels * DTYPE_BYTES[dtype]) > config.buffer(Buffer.OUT).bytes:
        return random_pool(rng, config, largest_kernel)
    src_buf = SOURCES[int(rng.integers(2))]
    src_addr = _place(rng, config, src_buf, in_bytes)
    dst_addr = _place(rng, config, Buffer.OUT, out_h * out_w * channels * DTYPE_BYTES[dtype],
                      [(src_buf, src_addr, in_bytes)])
    return Command.make(Opcode.POOL, src_buf=src_buf, src_addr=src_addr, dst_addr=dst_addr, **fields)


def random_eltwise(rng, config: HardwareConfig, largest_count: int = 40) -> Command:
    """A legal ELTWISE command whose destination overlaps no operand (or is exactly operand a, in place)."""
    op = EltwiseOp(int(rng.integers(len(EltwiseOp))))
    count = int(rng.integers(1, largest_count + 1))
    types = [DType(int(t)) for t in rng.integers(0, 2, 2)]
    out_type = BYTE_TYPES[int(rng.integers(len(BYTE_TYPES)))]
    out_low, out_high = dtype_limits(out_type)
    qmin, qmax = sorted(int(q) for q in rng.integers(out_low, out_high + 1, 2))
    if rng.random() < 0.5:
        qmin, qmax = out_low, out_high
    shift_a = int(rng.integers(0, SHIFT_MAX + 1)) if rng.random() < 0.2 else int(rng.integers(6, 28))
    fields = dict(op=op, count=count, a_type=types[0], out_type=out_type, qmin=qmin, qmax=qmax,
                  rounding=Rounding(int(rng.integers(len(Rounding)))), a_shift=shift_a,
                  a_multiplier=int(rng.integers(0, MULTIPLIER_MAX + 1)),
                  out_zero_point=int(rng.integers(out_low, out_high + 1)) if rng.random() < 0.5 else 0,
                  a_zero_point=int(rng.integers(*dtype_limits(types[0]))) if rng.random() < 0.7 else 0,
                  a_buf=SOURCES[int(rng.integers(2))])
    regions = []
    if op != EltwiseOp.RESCALE:
        fields.update(b_type=types[1], b_buf=SOURCES[int(rng.integers(2))],
                      b_zero_point=int(rng.integers(*dtype_limits(types[1]))) if rng.random() < 0.7 else 0)
        if op != EltwiseOp.MUL:
            fields.update(b_multiplier=int(rng.integers(0, MULTIPLIER_MAX + 1)),
                          b_shift=int(np.clip(shift_a + rng.integers(-MAX_ALIGN, MAX_ALIGN + 1), 0, SHIFT_MAX)))
        fields["b_addr"] = _place(rng, config, fields["b_buf"], count)
        regions.append((fields["b_buf"], fields["b_addr"], count))
    fields["a_addr"] = _place(rng, config, fields["a_buf"], count)
    regions.append((fields["a_buf"], fields["a_addr"], count))
    out_bytes = count * DTYPE_BYTES[out_type]
    in_place = fields["a_buf"] == Buffer.OUT and out_type != DType.INT16 and rng.random() < 0.3
    fields["dst_addr"] = (fields["a_addr"] if in_place and all(
        r[0] != Buffer.OUT or r[1] + r[2] <= fields["a_addr"] or fields["a_addr"] + out_bytes <= r[1]
        for r in regions[:-1]) else _place(rng, config, Buffer.OUT, out_bytes, regions))
    if len(regions) == 2 and _share_an_out_bank(config, regions + [(Buffer.OUT, fields["dst_addr"], out_bytes)]):
        return random_eltwise(rng, config, largest_count)     # a bank's SRAMs have two ports (docs/isa.md, Banks)
    return Command.make(Opcode.ELTWISE, **fields)


def _share_an_out_bank(config: HardwareConfig, regions) -> bool:
    """Whether every (buffer, address, nbytes) of ``regions`` lies in OUT and they have a bank in common."""
    return all(buffer == Buffer.OUT for buffer, _, _ in regions) and bool(set.intersection(
        *(set(config.banks(Buffer.OUT, address, address + nbytes)) for _, address, nbytes in regions)))


def random_memory(rng, config: HardwareConfig) -> Memory:
    memory = Memory.create(config, 64)
    for buffer in SOURCES:
        memory.buffers[buffer][:] = rng.integers(0, 256, memory.buffers[buffer].size, dtype=np.uint8)
    return memory


def random_stimulus(config: HardwareConfig, rng: np.random.Generator, commands: int) -> Stimulus:
    """Half POOL, half ELTWISE; one POOL in ten with kernels up to 15 x 15."""
    drawn = [random_pool(rng, config, largest_kernel=15 if rng.random() < 0.1 else 4) if rng.random() < 0.5
             else random_eltwise(rng, config, largest_count=100) for _ in range(commands)]
    return Stimulus(unit_program(config, drawn, Unit.POOL), random_memory(rng, config), (PoolUnit,))
