"""DeepCABAC: context-adaptive arithmetic coding of integer weight levels (issue 51).

The method is the DeepCABAC patent's (seed 004, digest in docs/deepcabac.md): per weight a significance flag,
a sign flag, a unary run of abs_level_greater_X flags and a fixed-length remainder, each flag coded with a
context chosen from weights coded before it. ``reference`` defines every variant the patent describes in plain
Python; its ``nnc`` module is the one variant NNCodec 2.1.3 (ISO/IEC 15938-17) writes, bit-exact. ``compiled``
is that NNC variant in numba, held to the reference bit for bit by the tests.

This package codes one layer's levels; it has no container, no CLI and no float quantisation.
"""
from __future__ import annotations

from .reference.layer_coder import DeepCabacOptions, decode_layer, encode_layer
from .reference.nnc import decode_nnc_layer, encode_nnc_layer

__all__ = ["DeepCabacOptions", "decode_layer", "decode_nnc_layer", "encode_layer", "encode_nnc_layer"]
