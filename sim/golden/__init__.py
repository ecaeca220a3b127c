"""Bit-exact golden model of the AIPU's integer arithmetic (the contract is docs/arithmetic.md).

Every function is a vectorised numpy model of one hardware unit; the command interpreter, the RTL
testbenches and the compiler's accuracy checks all call these, so a result here *is* the answer.
"""
from sim.golden.conv import conv2d, matmul
from sim.golden.requant import (onnx_requant_scale, quantize_multiplier, quantize_multiplier_tflite,
                                requantize, requantize_float32, requantize_tflite)
from sim.golden.rounding import ROUNDING_MODES, round_half_away, rounding_divide, rounding_shift_right

__all__ = [
    "ROUNDING_MODES", "conv2d", "matmul", "onnx_requant_scale", "quantize_multiplier",
    "quantize_multiplier_tflite", "requantize", "requantize_float32", "requantize_tflite",
    "round_half_away", "rounding_divide", "rounding_shift_right",
]
