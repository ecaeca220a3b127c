"""The stream and layer headers of the chapter-10 bitstream (Tables 323-325), the decoder's limits, the step size.

nnc_header() and layer_header() set up what the CTU syntax then codes: the sublayers' dimensions, shapes,
bit depths and step sizes; array1d() codes a 1-D sublayer (a bias or a vector) whole. ``DecoderLimits``
bounds the header values a decoder accepts, so that an absurd header fails before anything is allocated
(docs/codec.md §4). Both directions run the same code through an ``ElementIO``.

Where the printed text is broken the resolution of docs/codec.md is applied; the comments cite the defect id
(A1 ... A38, docs/codec.md §2) and the clause or table of T/AI 115.1-2021.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import CodecError, error_context
from .element_coder import ElementIO

SCAN_CK, SCAN_KC = 0, 1      # sublayer_scan_order


@dataclass(frozen=True)
class DecoderLimits:
    """Bounds a decoder enforces on header values so that absurd streams fail instead of exhausting memory."""

    max_weights_per_sublayer: int = 1 << 25   # int64 levels: 256 MiB
    max_weights_per_stream: int = 1 << 26     # all layers of one nnc(): a container layer is a weight + its bias
    max_weights_per_container: int = 1 << 28  # every tensor a container's index declares
    max_zdepth: int = 4096
    max_level: int = (1 << 32) - 1    # |q| of any decoded level, tree value or codebook entry


DEFAULT_LIMITS = DecoderLimits()


@dataclass
class StreamHeader:
    """nnc_header(), Table 323; total_trainable_layer is the number of layers coded."""

    integer_input: int = 0
    enable_escape_reorder: int = 1
    enable_zdep_reorder: int = 1
    enable_max_ctu3d_size: int = 0
    max_ctu3d_idx: int = 0
    array1d_depth: int = 16


@dataclass
class Sublayer:
    """One sublayer: the layer_header() fields of Table 324 and its levels.

    ``levels`` is [K] for a 1-D sublayer and [R·S][C][K] otherwise (the standard's [RS][C][K]).
    ``dim`` is 1..4; it is coded as 0 when it is 4 (A4: the 2-bit field cannot hold 4).
    """

    dim: int
    shape: tuple[int, int, int, int]
    cmaxw: int = 0
    bitdepth: int = 8
    scan_order: int = SCAN_CK
    include_bias_array1d: int = 0
    levels: np.ndarray | None = None
    step: np.float32 = field(default_factory=lambda: np.float32(1.0))

    @property
    def zdepth(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def weights(self) -> int:
        return math.prod(self.shape)


def dequantw(levels: np.ndarray, step_size: np.float32) -> np.ndarray:
    """Table 321: sign(q)·(|q|·step) in float32; the clip bounds are computed but unused (A3)."""
    q = np.asarray(levels, dtype=np.int64)
    magnitude = np.abs(q).astype(np.float32) * np.float32(step_size)
    return np.where(q < 0, -magnitude, magnitude).astype(np.float32)


def step_size(cmaxw: int, bitdepth: int, integer_input: int, one_d: bool) -> np.float32:
    """SubLayerStepSize of Table 324 in float32, with A13: 3-D divides cmaxw by 256, 1-D not."""
    if integer_input:
        return np.float32(1.0)
    if bitdepth == 0:
        raise CodecError("sublayer_bitdepth 0 gives a zero step divisor", element="sublayer_bitdepth")
    scale = np.float32(cmaxw) if one_d else np.float32(np.float32(cmaxw) / np.float32(256.0))
    return np.float32(scale / np.float32((1 << bitdepth) - 1))


def code_nnc_header(io: ElementIO, header: StreamHeader | None, layer_count: int) -> tuple[StreamHeader, int]:
    """nnc_header(), Table 323."""
    src = header or StreamHeader()
    integer_input = io.code("integer_input", src.integer_input)
    layers = io.code("total_trainable_layer", layer_count)
    result = StreamHeader(
        integer_input=integer_input,
        enable_escape_reorder=io.code("enable_escape_reorder", src.enable_escape_reorder),
        enable_zdep_reorder=io.code("enable_zdep_reorder", src.enable_zdep_reorder),
        enable_max_ctu3d_size=io.code("enable_max_ctu3d_size", src.enable_max_ctu3d_size),
        max_ctu3d_idx=io.code("max_ctu3d_idx", src.max_ctu3d_idx),
        array1d_depth=io.code("array1d_depth", src.array1d_depth))
    return result, layers


def code_layer_header(io: ElementIO, header: StreamHeader, sublayers: list[Sublayer] | None,
                      limits: DecoderLimits = DEFAULT_LIMITS) -> list[Sublayer]:
    """layer_header(), Table 324; returns the sublayers (levels not yet coded)."""
    total = io.code("total_sublayer", 0 if io.decoding else len(sublayers))
    if total == 0:
        raise CodecError("total_sublayer is 0: the do-while of Table 322 needs one sublayer",
                         element="total_sublayer")
    result: list[Sublayer] = []
    include_bn_shape = include_bias = False
    for index in range(total):
        with error_context(sublayer=index):
            src = None if io.decoding else sublayers[index]
            cmaxw = io.code("sublayer_cmaxw", 0 if io.decoding else src.cmaxw)
            shape = [1, 1, 1, 1]
            if not include_bias:
                dim = io.code("sublayer_dim", 0 if io.decoding else src.dim % 4) or 4   # A4: 0 codes 4
                if dim != 1 or not include_bn_shape:
                    for d in range(4 - dim, 4):
                        shape[d] = io.code("sublayer_shape", 0 if io.decoding else src.shape[d])
                else:
                    shape[3] = result[index - 1].shape[3]
                if dim == 1:
                    include_bn_shape = True
            else:
                include_bias = False
                shape[3] = result[index - 1].shape[3]
                dim = 1
            if 0 in shape:     # 10.3.3 (layer header) is silent on 0; an empty tensor is not a coded sublayer
                raise CodecError(f"sublayer_shape {tuple(shape)} has a zero extent", element="sublayer_shape")
            sub = Sublayer(dim=dim, shape=tuple(shape), cmaxw=cmaxw)
            if not io.decoding and sub.shape != tuple(src.shape):
                raise CodecError(f"sublayer shape {tuple(src.shape)} cannot be signalled: the 1-D length is "
                                 f"inherited as {sub.shape[3]}")
            if dim != 1:
                if index + 1 < total:
                    sub.include_bias_array1d = io.code("include_bias_array1d",
                                                       0 if io.decoding else src.include_bias_array1d)
                    include_bias = bool(sub.include_bias_array1d)
                sub.scan_order = io.code("sublayer_scan_order", 0 if io.decoding else src.scan_order)
                sub.bitdepth = io.code("sublayer_bitdepth", 0 if io.decoding else src.bitdepth)
            else:
                sub.bitdepth = header.array1d_depth
            if header.integer_input == 0 and cmaxw:
                with error_context(element="sublayer_bitdepth"):
                    sub.step = step_size(cmaxw, sub.bitdepth, 0, one_d=dim == 1)
            elif header.integer_input:
                sub.step = np.float32(1.0)
            else:
                sub.step = np.float32(0.0)
            if sub.weights > limits.max_weights_per_sublayer or sub.zdepth > limits.max_zdepth:
                raise CodecError(f"sublayer shape {tuple(shape)} exceeds the decoder limits "
                                 f"({limits.max_weights_per_sublayer} weights, z depth {limits.max_zdepth})",
                                 element="sublayer_shape")
            result.append(sub)
    return result


def code_array1d(io: ElementIO, header: StreamHeader, sub: Sublayer, truth: np.ndarray | None) -> np.ndarray:
    """array1d(), Table 325 with A18 (q = 0 unless bias_nz_flag)."""
    length = sub.shape[3]
    levels = np.zeros(length, dtype=np.int64)
    if not sub.cmaxw:
        if truth is not None and np.any(truth):
            raise CodecError("a 1-D sublayer with sublayer_cmaxw 0 must be all zero")
        return levels
    for n in range(length):
        value = 0 if truth is None else int(truth[n])
        if io.code("bias_nz_flag", int(value != 0)):
            sign = io.code("bias_sign", int(value < 0))
            magnitude = io.code("bias_abs_q", abs(value) - 1, length=header.array1d_depth) + 1
            levels[n] = -magnitude if sign else magnitude
    return levels
