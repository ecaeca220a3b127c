"""The quantizer's options: what `aipu compile` asks of the calibration and the quantization (docs/compiler.md §3),
checked on construction so that a value no calibration can use is refused before any work, naming its option."""
from __future__ import annotations

import math
from dataclasses import dataclass

from aipu.compiler.activation_formats import check_activations
from aipu.compiler.weight_formats import check_format
from aipu.quant.brelu import N_SIGMA_PERCENTILE
from aipu.sim.machine.errors import InputError

SCHEMES = ("affine", "pow2")


@dataclass(frozen=True)
class QuantOptions:
    method: str = "extrema"                   # calibrate.METHODS
    symmetric_activations: bool = False
    per_channel_weights: bool = True
    n_std: float = 3.0
    percentile: float = 99.99
    momentum: float | None = None
    rounding: str = "half_up"                 # of every shift (D2)
    scheme: str = "affine"                    # SCHEMES: "pow2" is the shift-quantization patent's
    int16: tuple[str, ...] = ()               # tensors quantized to int16 (symmetric), where their readers allow
    target_sqnr_db: float | None = None       # make tensors int16 until every layer reaches it (driver)
    full_range: tuple[str, ...] = ()          # tensors calibrated to their extrema whatever the method
    weights: str | None = None                # weight_formats.WEIGHT_FORMATS; None: the scheme's (pow2 or int8)
    layer_weights: tuple[tuple[str, str], ...] = ()    # (layer, format) pairs: the mapping file
    activations: str = "int8"                 # activation_formats.ACTIVATIONS
    circulant: tuple[tuple[str, int, tuple[int, ...]], ...] = ()   # (layer, L, signs): block-circulant layers

    def __post_init__(self):
        """InputError naming the `aipu compile` option of a value no calibration can use."""
        if self.scheme not in SCHEMES:
            raise InputError("--scheme", self.scheme, " or ".join(SCHEMES))
        check_activations("--activations", self.activations)
        if self.method == "brelu" and self.n_std not in N_SIGMA_PERCENTILE:
            raise InputError("--n-std", self.n_std, "3, 3.2 or 3.5 under --method brelu (T/AI 115.1-2021 Table 195)")
        if self.weights is not None:
            check_format("--weights", self.weights)
        for layer, weight_format in self.layer_weights:
            check_format(f"layer {layer!r}", weight_format)
        if self.scheme == "pow2" and self.activations != "int8":
            raise InputError("--activations", self.activations, "int8 under --scheme pow2 (the scheme's 7-bit "
                             "features at power-of-two scales)")
        if self.scheme == "pow2":
            for name, weight_format in (("--weights", self.weights), *self.layer_weights):
                if weight_format not in (None, "pow2"):
                    raise InputError(name, weight_format, "pow2 under --scheme pow2 (its requantizer is a shift: "
                                     "every scale a power of two)")
        for option, value, good, allowed in (
                ("--n-std", self.n_std, lambda v: v > 0, "a finite number above 0"),
                ("--percentile", self.percentile, lambda v: 0 < v <= 100, "a number above 0, at most 100"),
                ("--momentum", self.momentum, lambda v: 0 <= v <= 1, "a number 0 .. 1"),
                ("--target-sqnr", self.target_sqnr_db, lambda v: 0 < v <= 100, "a number of dB above 0, at most 100")):
            if value is not None and (type(value) not in (int, float) or not math.isfinite(value) or not good(value)):
                raise InputError(option, value, allowed)

