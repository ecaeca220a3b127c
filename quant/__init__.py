"""The quantization and dequantization methods of T/AI 115.1-2021 chapters 7.2 and 8.2 (docs/quantization.md).

One module per method family, each with its parameter record (a frozen dataclass named after the standard's
operation, holding the standard's fields), the choice of those parameters from data, the quantizer and the
dequantizer. Every method splits its tensors into units by one helper (:mod:`aipu.quant.granularity`), rounds
float -> int half away from zero (aipu.sim.golden.round_half_away) and runs its integer requantizers through the
golden model's rounding shift, so the NPU's arithmetic is the one definition.
"""
