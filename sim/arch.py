"""The single source of truth for the AIPU: arithmetic widths, hardware configuration and command format.

Golden model, interpreter, cycle model, RTL and compiler import their numbers from here and never
restate them. docs/arithmetic.md explains the arithmetic constants; docs/isa.md is generated from the
command definitions in this module.
"""
from __future__ import annotations

# --- Arithmetic contract constants (docs/arithmetic.md) ---------------------------------------------
ACC_BITS = 32                 # MAC accumulator: signed int32; the golden model raises on overflow
BIAS_BITS = 32                # per-output-channel bias, signed int32
REQUANT_SUM_BITS = 33         # acc + bias is formed one bit wider, so it never wraps
MULTIPLIER_BITS = 16          # requant multiplier M: unsigned, 0 .. 2**16 - 1
SHIFT_BITS = 6                # requant shift N field width
SHIFT_MAX = 47                # N in 0 .. SHIFT_MAX (rounding right shift)
