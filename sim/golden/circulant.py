"""Block-circulant weights on chip (docs/structured.md, "On the NPU"): what a LOAD with ``circ_size`` L > 1 writes
into WEIGHT for the first rows it reads from DRAM (T/AI 115.1-2021 §8.4.2.1 decompression and §8.4.2.3 sign
vector). Pure data movement and a sign flip: row k of each block is the first row rotated right by k
(block[k][t] = v[(t - k) mod L]), and input channel t of every row is negated where the layer's sign is -1,
so that the tile holds the dense weight C·diag(s)."""
from __future__ import annotations

import numpy as np

from aipu.sim.golden._checks import check_int
from aipu.sim.machine.isa import CIRC_SIZES


def sign_bits(packed: np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` sign bits of ``packed`` bytes (low bit first) as a bool array: True is -1."""
    bits = np.unpackbits(np.asarray(packed, np.uint8).reshape(-1), bitorder="little")
    check_int("sign bits", count, 0, bits.size)
    return bits[:count].astype(bool)


def expand_circulant_rows(first_rows: np.ndarray, circ_size: int, negative: np.ndarray) -> np.ndarray:
    """First rows [Y][X][R] (int8; R a multiple of L) -> the tile [Y·L][X][R]: tile row y·L + k holds DRAM row y
    with each group of L bytes rotated right by k, byte t negated where ``negative[t]`` (8-bit two's
    complement: -(-128) wraps to -128, which the compiler never stores)."""
    rows = np.asarray(first_rows).view(np.int8)
    if circ_size not in CIRC_SIZES:
        raise ValueError(f"circ_size {circ_size}: expected one of {CIRC_SIZES}")
    y, x, run = rows.shape
    if run % circ_size or np.shape(negative) != (run,):
        raise ValueError(f"a run of {run} bytes with {np.shape(negative)} signs: the run must be a multiple of "
                         f"circ_size {circ_size}, one sign per byte")
    groups = rows.reshape(y, x, run // circ_size, circ_size)
    tile = np.empty((y, circ_size, x, run), np.int8)
    for k in range(circ_size):
        rotated = np.roll(groups, k, axis=-1).reshape(y, x, run).astype(np.int16)
        tile[:, k] = np.where(negative, -rotated, rotated).astype(np.uint8).view(np.int8)
    return tile.reshape(y * circ_size, x, run)
