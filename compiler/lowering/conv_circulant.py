"""Block-circulant conv layers lowered with their weights expanded on chip (docs/structured.md, "On the NPU").

A circulant layer's int8 weight is C·diag(s) (T/AI 115.1-2021 §8.4.2): every block of L filters x L input
channels (per kernel tap) circulant, input channel c negated where the sign vector s is -1. DRAM holds only the
first filter of each block row with the signs undone, OHWI (``first_rows``), and the signs as bits (``sign_table``);
a LOAD with circ_log2 = log2 L writes the L filters of each block row into WEIGHT (docs/isa.md, LOAD).
"""
from __future__ import annotations

import numpy as np

from aipu.sim.golden.circulant import expand_circulant_rows
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import CIRC_SIGNS_MAX, CIRC_SIZES


def check_circulant(w: np.ndarray, groups: int, circ_size: int, signs, w_type_int8: bool, plain: bool) -> None:
    """Refuse in one line what LOAD cannot expand: the sizes (L of CIRC_SIZES above 1 dividing the filters and
    the input channels, at most CIRC_SIGNS_MAX input channels, one group, plain int8 weights), the signs
    (one ±1 per input channel) and weights that are not exactly C·diag(s) with C block-circulant."""
    k, c = w.shape[:2]
    if circ_size not in CIRC_SIZES[1:] or k % circ_size or c % circ_size:
        raise InputError("circ_size", circ_size, f"one of {CIRC_SIZES[1:]} dividing the {k} filters and the "
                         f"{c} input channels")
    if groups != 1 or not w_type_int8 or not plain:
        raise InputError("circ_size", circ_size, "a one-group conv with plain int8 weights (no INT4, codebook or "
                         "second plane)")
    if c > CIRC_SIGNS_MAX:
        raise InputError("circ_size", circ_size, f"a layer of at most {CIRC_SIGNS_MAX} input channels (LOAD's "
                         f"sign register; this one has {c})")
    vector = np.asarray(signs)
    if vector.shape != (c,) or not np.isin(vector, (-1, 1)).all():
        raise InputError("sign vector", f"{vector.shape} values", f"{c} values, each -1 or +1")
    if not np.array_equal(expanded_weights(first_rows(w, circ_size, vector), circ_size, vector), ohwi(w)):
        raise InputError("circ_size", circ_size, "int8 weights that are block-circulant with this sign vector "
                         "(each block row's filters rotations of its first, its scale shared)")


def ohwi(w: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(w).transpose(0, 2, 3, 1))


def first_rows(w: np.ndarray, circ_size: int, signs) -> np.ndarray:
    """What DRAM holds: the first filter of each block row with the signs undone, OHWI [K/L][KH][KW][C] int8."""
    return ohwi(np.asarray(w)[::circ_size] * np.asarray(signs, np.int8).reshape(1, -1, 1, 1)).astype(np.int8)


def sign_table(signs) -> np.ndarray:
    """The sign bits LOAD reads from LUT memory: bit c (low bit first) set where input channel c is negated."""
    return np.packbits(np.asarray(signs) < 0, bitorder="little")


def expanded_weights(rows: np.ndarray, circ_size: int, signs) -> np.ndarray:
    """The OHWI weights a circulant LOAD of all of ``rows`` writes (the golden expansion, docs/isa.md LOAD)."""
    k_rows, kh, kw, c = rows.shape
    tile = expand_circulant_rows(rows.reshape(k_rows, kh * kw, c), circ_size, np.asarray(signs) < 0)
    return tile.reshape(k_rows * circ_size, kh, kw, c)
