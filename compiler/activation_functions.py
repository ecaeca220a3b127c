"""The operators the compiler computes by table (LUT), each as ONNX defines it in float64: the quantizer samples
them at the input's quantized values (docs/compiler.md)."""
from __future__ import annotations

import math

import numpy as np


def activation_functions() -> dict:
    """Each table-driven operator as a float64 function of (x, node attributes), as ONNX defines it."""
    from math import sqrt

    erf = np.vectorize(math.erf)

    def gelu(x, attrs):
        if attrs.get("approximate", b"none") in (b"tanh", "tanh"):
            return 0.5 * x * (1 + np.tanh(sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        return 0.5 * x * (1 + erf(x / sqrt(2)))

    def hard_sigmoid(x, attrs):
        return np.clip(attrs.get("alpha", 0.2) * x + attrs.get("beta", 0.5), 0, 1)

    return {
        "Relu": lambda x, attrs: np.maximum(x, 0),
        "LeakyRelu": lambda x, attrs: np.where(x < 0, attrs.get("alpha", 0.01) * x, x),
        "PRelu": lambda x, attrs: np.where(x < 0, attrs["slope"] * x, x),
        "Sigmoid": lambda x, attrs: 1 / (1 + np.exp(-x)),
        "Tanh": lambda x, attrs: np.tanh(x),
        "HardSigmoid": hard_sigmoid,
        "HardSwish": lambda x, attrs: x * np.clip(x / 6 + 0.5, 0, 1),
        "Swish": lambda x, attrs: x / (1 + np.exp(-attrs.get("alpha", 1.0) * x)),
        "Gelu": gelu,
        "Exp": lambda x, attrs: np.exp(x),
    }


TABLE_OPS = tuple(activation_functions())
