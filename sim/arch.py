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
MAC_OPERAND_BITS = 9          # MAC operands are (value - zero point): signed 9 bit, -255 .. 255
REQUANT_PRODUCT_BITS = REQUANT_SUM_BITS + MULTIPLIER_BITS  # (acc + bias) * M, signed 49 bit
TFLITE_MULTIPLIER_BITS = 31   # optional TFLite-compatible requant: Q0.31 multiplier in [2**30, 2**31)
ELTWISE_SUM_BITS = 48         # eltwise add/sub/max/min: sum of the two aligned, rescaled inputs
LUT8_ENTRIES = 256            # direct table, indexed by the raw input byte
LUT_ENTRY_BITS = 16           # LUT entries are signed 16 bit (int8/uint8 tables are a subset)
LUT16_INDEX_BITS_MIN = 1      # wide LUT: 2**k + 1 entries, k in MIN .. MAX, linear interpolation
LUT16_INDEX_BITS_MAX = 10
