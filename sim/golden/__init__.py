"""Bit-exact golden model of the AIPU's integer arithmetic (the contract is docs/arithmetic.md).

Every function is a vectorised numpy model of one hardware unit; the command interpreter, the RTL
testbenches and the compiler's accuracy checks all call these, so a result here *is* the answer.
"""
from aipu.sim.golden.circulant import expand_circulant_rows, sign_bits
from aipu.sim.golden.codebook import expand_codebook
from aipu.sim.golden.conv import (ConvGeometry, accumulator_range, conv2d, conv_geometry, conv_sums,
                             conv_sums_channels_last, matmul)
from aipu.sim.golden.eltwise import ELTWISE_OPS, concat, eltwise, eltwise_params
from aipu.sim.golden.lut import build_lut8, build_lut16, lut8, lut16
from aipu.sim.golden.pool import avg_pool2d, global_avg_pool, max_pool2d
from aipu.sim.golden.pow2 import (FEATURE_QUAN, KERNEL_QUAN, pow2_quantize, pow2_requant_params,
                             pow2_scale_exponent)
from aipu.sim.golden.requant import (RequantStage, leaky_relu_multipliers, onnx_requant_scale, quantize_multiplier,
                                quantize_multiplier_tflite, requant_stage, requantize, requantize_dual,
                                requantize_float32, requantize_records, requantize_tflite)
from aipu.sim.golden.rounding import ROUNDING_MODES, round_half_away, rounding_divide, rounding_shift_right
from aipu.sim.golden.softmax import build_softmax_table, softmax

__all__ = [
    "ConvGeometry", "ELTWISE_OPS", "FEATURE_QUAN", "KERNEL_QUAN", "ROUNDING_MODES", "RequantStage",
    "accumulator_range", "avg_pool2d", "build_lut16", "build_lut8", "build_softmax_table", "concat", "conv2d", "conv_geometry",
    "conv_sums", "conv_sums_channels_last", "eltwise", "eltwise_params", "expand_circulant_rows", "expand_codebook", "global_avg_pool",
    "leaky_relu_multipliers", "lut16", "lut8", "matmul", "max_pool2d", "onnx_requant_scale", "pow2_quantize",
    "pow2_requant_params", "pow2_scale_exponent", "quantize_multiplier", "quantize_multiplier_tflite",
    "requant_stage", "requantize", "requantize_dual", "requantize_float32", "requantize_records", "requantize_tflite",
    "round_half_away", "rounding_divide", "rounding_shift_right", "softmax",
]
