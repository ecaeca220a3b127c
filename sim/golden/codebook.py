"""Codebook weights on chip (docs/quantization.md, "Codebook weights on chip"): what a LOAD with ``index_bits``
writes into WEIGHT for the packed indices it reads from DRAM (T/AI 115.1-2021 §7.2.2.2, stored as §8.2 D2)."""
from __future__ import annotations

import numpy as np

from aipu.sim.golden._checks import check_int
from aipu.sim.machine.arch import CODEBOOK_INDEX_BITS, unpack_indices


def expand_codebook(packed: np.ndarray, codebook: np.ndarray, bits: int) -> np.ndarray:
    """Packed ``bits``-bit indices (uint8 bytes, low bits first) -> the codebook's int8 entry of each index,
    ``8 // bits`` times as many along the last axis. ``codebook`` holds exactly ``2**bits`` int8 entries, so
    every index selects one."""
    if bits not in CODEBOOK_INDEX_BITS:
        raise ValueError(f"index bits {bits}: expected one of {CODEBOOK_INDEX_BITS}")
    table = np.asarray(codebook)
    check_int("codebook entries", table.size, 1 << bits, 1 << bits)
    return table.astype(np.int8).reshape(-1)[unpack_indices(packed, bits)]
