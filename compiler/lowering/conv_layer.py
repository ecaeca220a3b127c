"""A quantized conv layer (conv + requant, + an activation table) as the conv lowering takes it: the layer in
golden-model conventions, its reference on the golden model, the checks that refuse what the hardware or the
golden model cannot take (before anything is allocated), and the constants it reads from DRAM."""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from aipu.compiler.lowering.base import dtype_code, field_max
from aipu.compiler.lowering.conv_circulant import check_circulant, first_rows, sign_table
from aipu.sim import golden
from aipu.sim.machine.arch import (BIAS_BITS, DEFAULT, DTYPE_NUMPY, LUT8_ENTRIES, LUT16_INPUT_BITS, LUT_ENTRY_DTYPE,
                                MULTIPLIER_MAX, PARAM_DTYPE, SHIFT_MAX, DType, HardwareConfig, bit_range,
                                CODEBOOK_INDEX_BITS, DTYPE_BITS, dtype_bounds, elements_bytes, pack_indices,
                                pack_int4)
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import LutMode, Opcode, Rounding

DIM_MAX = field_max(DEFAULT, Opcode.CONV, "in_w")               # tile rows, columns and channels
_KERNEL_MAX = field_max(DEFAULT, Opcode.CONV, "k_h")
_STEP_MAX = field_max(DEFAULT, Opcode.CONV, "stride_h")         # strides and dilations
_PAD_MAX = field_max(DEFAULT, Opcode.LOAD, "pad_top")
_LUT16_INPUT_MIN = bit_range(LUT16_INPUT_BITS, signed=True)[0]


@dataclass
class ConvLayer:
    """A quantized conv layer in golden-model conventions (NCHW input, [K, C/groups, KH, KW] weights)."""

    x: np.ndarray                      # int8/uint8 [1, C, H, W]
    w: np.ndarray                      # int8 [K, C/groups, KH, KW]: values of w_type
    bias: np.ndarray                   # [K], BIAS_BITS signed
    multiplier: np.ndarray             # [K], 0 .. MULTIPLIER_MAX
    shift: np.ndarray                  # [K], 0 .. SHIFT_MAX
    x_zero_point: int = 0
    w_zero_point: int = 0
    out_zero_point: int = 0
    qmin: int | None = None
    qmax: int | None = None
    out_type: DType = DType.INT8
    rounding: Rounding = Rounding.HALF_UP
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)   # top, left, bottom, right
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    negative_multiplier: np.ndarray | None = None   # Leaky ReLU / PReLU: the second pair for negative sums
    negative_shift: np.ndarray | None = None
    scale: np.ndarray | None = None    # float32 per channel: the FLOAT32 requant mode instead of M/2^N
    lut: np.ndarray | None = None      # optional activation table (int16 entries) applied after requant:
    lut_index_shift: int = 0           # 8-bit outputs: 256 entries (DIRECT8); int16: 2**k + 1 (INTERP16)
    lut_input_min: int = _LUT16_INPUT_MIN
    w_type: DType = DType.INT8         # INT4: values in -8..7, stored two a byte (docs/arithmetic.md D23)
    codebook: np.ndarray | None = None  # int8 entries (2..16, sorted, distinct): w holds entries, DRAM their indices
    x_int4: bool = False               # x holds INT4 values (int8 -8..7): DRAM two a byte, CONV in_type INT4
    w_second: np.ndarray | None = None  # dual INT4: the second plane (w the first), [K, C/groups, KH, KW]
    second_multiplier: np.ndarray | None = None   # [K]: its multiplier, sharing the first plane's shift (§4.7)
    circulant: tuple[int, np.ndarray] | None = None   # (L, ±1 per input channel): w is C·diag(s), C block-circulant,
                                                      # expanded on chip from its first rows (conv_circulant.py)

    @property
    def circ_size(self) -> int:
        """L of a block-circulant layer, 1 for any other."""
        return 1 if self.circulant is None else self.circulant[0]

    @property
    def planes(self) -> int:
        """Weight planes: 2 for dual INT4 weights, which CONV runs as 2·K interleaved output channels."""
        return 1 if self.w_second is None else 2

    @property
    def mac_weights(self) -> np.ndarray:
        """The weights CONV multiplies: ``w``, or with dual planes [2·K, ...], plane 1 of channel k at 2k and
        plane 2 at 2k + 1 (docs/arithmetic.md D24)."""
        if self.w_second is None:
            return self.w
        return np.stack([self.w, self.w_second], axis=1).reshape(-1, *self.w.shape[1:])

    @property
    def index_bits(self) -> int:
        """The width of a codebook index (the fewest of CODEBOOK_INDEX_BITS that number the entries), 0 without."""
        if self.codebook is None:
            return 0
        return next(bits for bits in CODEBOOK_INDEX_BITS if len(self.codebook) <= 1 << bits)

    @property
    def weight_dram_bits(self) -> int:
        """Bits a weight takes in DRAM: an index's, INT4's 4, else 8."""
        return self.index_bits or DTYPE_BITS[self.w_type]

    @property
    def in_type(self) -> DType:
        """CONV's in_type: INT4 for an ``x_int4`` input, else x's dtype."""
        return DType.INT4 if self.x_int4 else dtype_code(self.x.dtype)

    @property
    def out_dtype(self) -> np.dtype:
        """The numpy type of the output's values (INT4's as int8)."""
        return np.dtype(np.int8) if self.out_type == DType.INT4 else DTYPE_NUMPY[self.out_type]

    @property
    def clamp(self) -> tuple[int, int]:
        low, high = dtype_bounds(self.out_type)
        return (low if self.qmin is None else self.qmin, high if self.qmax is None else self.qmax)

    def conv_golden(self, weights: np.ndarray | None = None) -> np.ndarray:
        """The accumulators of ``weights`` (default ``w``) over the input."""
        return golden.conv2d(self.x, self.w if weights is None else weights, x_zero_point=self.x_zero_point,
                             w_zero_point=self.w_zero_point, stride=self.stride, padding=self.padding,
                             dilation=self.dilation, groups=self.groups)

    def reference(self) -> np.ndarray:
        """The whole layer on the golden model: [1, K, OH, OW] of out_type."""
        qmin, qmax = self.clamp
        if self.scale is not None:
            y = golden.requantize_float32(self.conv_golden(), bias=self.bias, scale=self.scale,
                                          out_zero_point=self.out_zero_point, qmin=qmin, qmax=qmax, channel_axis=1,
                                          out_dtype=self.out_dtype)
            return self._table(y)
        if self.w_second is not None:
            y = golden.requantize_dual(self.conv_golden(), self.conv_golden(self.w_second), bias=self.bias,
                                       multiplier=self.multiplier, second_multiplier=self.second_multiplier,
                                       shift=self.shift, out_zero_point=self.out_zero_point, qmin=qmin, qmax=qmax,
                                       rounding=self.rounding.name.lower(), channel_axis=1, out_dtype=self.out_dtype)
            return self._table(y)
        y = golden.requantize(self.conv_golden(), bias=self.bias, multiplier=self.multiplier, shift=self.shift,
                              out_zero_point=self.out_zero_point, qmin=qmin, qmax=qmax,
                              rounding=self.rounding.name.lower(), channel_axis=1, out_dtype=self.out_dtype,
                              negative_multiplier=self.negative_multiplier, negative_shift=self.negative_shift)
        return self._table(y)

    def _table(self, y: np.ndarray) -> np.ndarray:
        if self.lut is None:
            return y
        if self.lut_mode == LutMode.DIRECT8:
            return golden.lut8(y, self.lut.astype(self.out_dtype))
        return golden.lut16(y, self.lut, index_shift=self.lut_index_shift, input_min=self.lut_input_min)

    @property
    def lut_mode(self) -> LutMode:
        return LutMode.INTERP16 if self.out_type == DType.INT16 else LutMode.DIRECT8


def weight_bytes(layer: ConvLayer, count: int) -> int:
    """The bytes ``count`` of the layer's weights take in WEIGHT (INT4: two a byte)."""
    return elements_bytes(count, layer.w_type)


def weight_dram_bytes(layer: ConvLayer, count: int) -> int:
    """The bytes ``count`` of the layer's weights take in DRAM (codebook indices: 8 / index_bits a byte)."""
    return -(-count * layer.weight_dram_bits // 8)


def output_size(layer: ConvLayer) -> tuple[int, int]:
    """(OH, OW) of the layer's output."""
    _, _, h, w = layer.x.shape
    _, _, kh, kw = layer.w.shape
    pt, pl, pb, pr = layer.padding
    spans = [d * (k - 1) + 1 for d, k in zip(layer.dilation, (kh, kw))]
    return (h + pt + pb - spans[0]) // layer.stride[0] + 1, (w + pl + pr - spans[1]) // layer.stride[1] + 1


MAX_LAYER_ELEMENTS = 1 << 24   # per tensor (x, w, the output): larger layers are refused before allocating
MAX_LAYER_MACS = 1 << 32       # multiply-accumulates of the whole layer: bounds the golden model's time
TENSOR_DTYPES = {"x": (DTYPE_NUMPY[DType.INT8], DTYPE_NUMPY[DType.UINT8]),    # the MAC inputs (CONV in_type)
                 "w": (DTYPE_NUMPY[DType.INT8],)}
WEIGHT_TYPES = (DType.INT8, DType.INT4)                         # CONV w_type
_PARAMS = (("bias", *bit_range(BIAS_BITS, signed=True)), ("multiplier", 0, MULTIPLIER_MAX), ("shift", 0, SHIFT_MAX))
_LEAKY_PARAMS = (("negative_multiplier", 0, MULTIPLIER_MAX), ("negative_shift", 0, SHIFT_MAX))


def _check_int(name: str, value, low: int, high: int, why: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value <= high:
        raise InputError(name, value, f"expected an integer {low}..{high}{why}")


def _check_ints(name: str, value, count: int, low: int, high: int, meaning: str) -> None:
    if (not isinstance(value, tuple) or len(value) != count
            or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and low <= v <= high
                       for v in value)):
        raise InputError(name, value, f"expected {count} integers {low}..{high} ({meaning})")


def dtype_names(dtypes) -> str:
    return " or ".join(dtype.name for dtype in dtypes)


def _check_tensor(name: str, value, layout: str, ndim: int) -> None:
    allowed = dtype_names(TENSOR_DTYPES[name])
    if not isinstance(value, np.ndarray) or value.dtype not in TENSOR_DTYPES[name]:
        raise InputError(name, value, f"expected dtype {allowed}, shape {layout}")
    if value.ndim != ndim or 0 in value.shape:
        raise InputError(name, value, f"expected shape {layout}, every extent at least 1")
    if value.size > MAX_LAYER_ELEMENTS:
        raise InputError(name, value, f"at most {MAX_LAYER_ELEMENTS} elements")


def enum_names(enum) -> str:
    """The members of ``enum`` as a layer file spells them (the golden model's lower-case names)."""
    return ", ".join(member.name.lower() for member in enum)


def check_layer(layer: ConvLayer) -> None:
    """Raise InputError naming the first field of ``layer`` the hardware or the golden model cannot take.

    Checks types, shapes and their consistency, the ranges of the command fields the layer turns into,
    a non-empty output and the size bounds, before anything is allocated or computed."""
    _check_shapes(layer)
    _check_int4_activations(layer)
    _check_requant_params(layer)
    _check_geometry(layer)
    _check_output(layer)


def _check_shapes(layer: ConvLayer) -> None:
    _check_tensor("x", layer.x, "[1][C][H][W]", 4)
    if layer.x.shape[0] != 1:
        raise InputError("x", layer.x, "expected one image: shape [1][C][H][W]")
    _check_tensor("w", layer.w, "[K][C/groups][R][S]", 4)
    _, c, _, _ = layer.x.shape
    k, cg, kh, kw = layer.w.shape
    _check_int("groups", layer.groups, 1, DIM_MAX)
    if c % layer.groups or k % layer.groups:
        raise InputError("groups", layer.groups, f"must divide the {c} input channels of x and the {k} "
                         "output channels of w")
    if cg != c // layer.groups:
        raise InputError("w", layer.w, f"shape[1] must be C/groups = {c}/{layer.groups} = {c // layer.groups}")
    if kh > _KERNEL_MAX or kw > _KERNEL_MAX:
        raise InputError("w", layer.w, f"kernels up to {_KERNEL_MAX}x{_KERNEL_MAX} (CONV k_h, k_w)")
    _check_weight_type(layer)


def _check_weight_type(layer: ConvLayer) -> None:
    """INT4 weights: values within INT4, and each group's input channels fill whole bytes (CONV packs a
    group's channels two a byte, docs/arithmetic.md D23; a depthwise layer has one channel a group)."""
    if layer.w_type not in WEIGHT_TYPES:
        raise InputError("w_type", layer.w_type, f"expected {dtype_names(WEIGHT_TYPES)}")
    if layer.codebook is not None:
        _check_codebook(layer)
    if layer.w_second is not None:
        _check_dual(layer)
    if layer.circulant is not None:
        check_circulant(layer.w, layer.groups, layer.circulant[0], layer.circulant[1], layer.w_type == DType.INT8,
                        layer.codebook is None and layer.w_second is None)
    if layer.w_type != DType.INT4:
        return
    low, high = dtype_bounds(DType.INT4)
    for name in ("w", "w_second"):
        plane = getattr(layer, name)
        outside = np.zeros(0) if plane is None else plane[(plane < low) | (plane > high)]
        if outside.size:
            raise InputError(name, int(outside.flat[0]), f"INT4 weights within {low}..{high}")
    if layer.w.shape[1] % 2:
        raise InputError("w_type", "INT4", f"an even number of input channels a group (this layer has "
                         f"{layer.w.shape[1]}: INT4 weights pack two channels a byte)")


def _check_dual(layer: ConvLayer) -> None:
    """Dual INT4 weights: a second plane of the first's shape, INT4, and its multiplier; the requantizer in NATIVE
    mode without a negative pair, whose multiplier the second plane takes (docs/arithmetic.md §4.7)."""
    second = layer.w_second
    if not isinstance(second, np.ndarray) or second.dtype != np.int8 or second.shape != layer.w.shape:
        raise InputError("w_second", second, f"int8-held INT4 codes of w's shape {list(layer.w.shape)}")
    if layer.w_type != DType.INT4 or layer.codebook is not None:
        raise InputError("w_type", layer.w_type.name, "INT4 without a codebook for dual planes")
    if layer.negative_multiplier is not None or layer.scale is not None:
        raise InputError("w_second", "dual planes", "a NATIVE requantizer without leaky (the second plane takes "
                         "the record's negative multiplier)")
    values = np.asarray(layer.second_multiplier)
    if (layer.second_multiplier is None or values.dtype.kind not in "iu"
            or values.shape not in ((layer.w.shape[0],), ()) or np.any((values < 0) | (values > MULTIPLIER_MAX))):
        raise InputError("second_multiplier", layer.second_multiplier,
                         f"integers 0..{MULTIPLIER_MAX}, one per output channel or a scalar")


def _check_int4_activations(layer: ConvLayer) -> None:
    """An INT4 input: values within INT4 and INT4 weights (CONV's in_type INT4 needs w_type INT4, whose check
    keeps each group's channels even); an INT4 output: an even channel count (REQUANT packs two a byte), no
    table (LUT reads whole bytes)."""
    if layer.x_int4:
        low, high = dtype_bounds(DType.INT4)
        outside = layer.x[(layer.x < low) | (layer.x > high)]
        if outside.size:
            raise InputError("x", int(outside.flat[0]), f"INT4 inputs within {low}..{high}")
        if layer.w_type != DType.INT4:
            raise InputError("w_type", layer.w_type.name, "INT4 for an INT4 input (docs/arithmetic.md D23)")
    if layer.out_type == DType.INT4 and (layer.w.shape[0] % 2 or layer.lut is not None):
        raise InputError("out_type", "INT4", f"an even number of output channels (this layer has "
                         f"{layer.w.shape[0]}) and no table: REQUANT packs INT4 two a byte")


def _check_codebook(layer: ConvLayer) -> None:
    """Codebook weights: 2..16 sorted distinct int8 entries, INT8 weights that are all entries, and each tap's
    input channels whole bytes of indices (LOAD expands a run of 8 / index_bits indices a byte)."""
    entries = layer.codebook
    if (not isinstance(entries, np.ndarray) or entries.dtype != np.int8 or entries.ndim != 1
            or not 2 <= entries.size <= 1 << max(CODEBOOK_INDEX_BITS) or np.any(np.diff(entries.astype(int)) <= 0)):
        raise InputError("codebook", entries, f"2..{1 << max(CODEBOOK_INDEX_BITS)} sorted distinct int8 entries")
    if layer.w_type != DType.INT8:
        raise InputError("w_type", layer.w_type.name, "INT8 with a codebook (LOAD expands indices to int8 entries)")
    if not np.all(np.isin(layer.w, entries)):
        raise InputError("w", int(layer.w[~np.isin(layer.w, entries)].flat[0]), "a codebook entry")
    per_byte = 8 // layer.index_bits
    if layer.w.shape[1] % per_byte:
        raise InputError("codebook", f"{entries.size} entries", f"input channels a group a multiple of {per_byte} "
                         f"({layer.index_bits}-bit indices pack {per_byte} a byte; this layer has {layer.w.shape[1]})")


def _check_requant_params(layer: ConvLayer) -> None:
    k = layer.w.shape[0]
    if (layer.negative_multiplier is None) != (layer.negative_shift is None):
        raise InputError("negative_multiplier", layer.negative_multiplier, "given together with negative_shift")
    if layer.scale is not None:
        scale = np.asarray(layer.scale)
        if (scale.dtype != np.float32 or scale.shape != (k,) or not np.all(np.isfinite(scale)) or np.any(scale <= 0)
                or layer.negative_multiplier is not None):
            raise InputError("scale", scale, f"float32, shape [{k}], finite and positive (FLOAT32 requant; no leaky)")
    for name, low, high in _PARAMS + (_LEAKY_PARAMS if layer.negative_multiplier is not None else ()):
        values = np.asarray(getattr(layer, name))
        if (values.dtype.kind not in "iu" or values.shape not in ([(k,)] if name == "bias" else [(k,), ()])):
            raise InputError(name, values, f"expected an integer dtype, shape [{k}] (one per output channel)"
                             + ("" if name == "bias" else " or a scalar"))
        bad = values[(values < low) | (values > high)]
        if bad.size:
            raise InputError(name, int(bad.flat[0]), f"outside {low}..{high}")


def _check_geometry(layer: ConvLayer) -> None:
    _check_ints("stride", layer.stride, 2, 1, _STEP_MAX, "vertical, horizontal")
    _check_ints("dilation", layer.dilation, 2, 1, _STEP_MAX, "vertical, horizontal")
    _check_ints("padding", layer.padding, 4, 0, _PAD_MAX, "top, left, bottom, right")
    reach = [d * (size - 1) for d, size in zip(layer.dilation, layer.w.shape[2:])]
    for name, pad, limit in zip(("top", "left", "bottom", "right"), layer.padding, reach * 2):
        if pad > min(limit, _PAD_MAX):
            raise InputError(f"padding {name}", pad, f"at most min(dilation*(kernel-1) = {limit}, "
                             f"{_PAD_MAX}) is supported")


def _check_output(layer: ConvLayer) -> None:
    """The output's type, zero points and clamp, a non-empty output that the CONV fields and the size bounds
    allow."""
    for name, enum in (("out_type", DType), ("rounding", Rounding)):
        if not isinstance(getattr(layer, name), enum):
            raise InputError(name, getattr(layer, name), f"expected a {enum.__name__}: {enum_names(enum)}")
    out_low, out_high = dtype_bounds(layer.out_type)
    x_low, x_high = dtype_bounds(layer.in_type)
    _check_int("x_zero_point", layer.x_zero_point, x_low, x_high, f" (the range of {layer.in_type.name.lower()})")
    w_low, w_high = dtype_bounds(layer.w_type)
    _check_int("w_zero_point", layer.w_zero_point, w_low, w_high, f" (the range of {layer.w_type.name})")
    _check_int("out_zero_point", layer.out_zero_point, out_low, out_high, f" (the range of {layer.out_type.name})")
    qmin, qmax = layer.clamp
    _check_int("qmin", qmin, out_low, out_high, f" (the range of {layer.out_type.name})")
    _check_int("qmax", qmax, qmin, out_high, f" (qmin .. the top of {layer.out_type.name})")
    _, _, h, w = layer.x.shape
    k, cg, kh, kw = layer.w.shape
    out_h, out_w = output_size(layer)
    if out_h < 1 or out_w < 1:
        raise InputError("w", layer.w, f"a {kh}x{kw} kernel with dilation {layer.dilation} on a {h}x{w} input "
                         f"with padding {layer.padding} gives an empty output")
    width = w + layer.padding[1] + layer.padding[3]
    if width > DIM_MAX:
        raise InputError("x", layer.x, f"padded input width {width} exceeds the CONV in_w field ({DIM_MAX})")
    if k * out_h * out_w > MAX_LAYER_ELEMENTS:
        raise InputError("output", f"{k}x{out_h}x{out_w}", f"at most {MAX_LAYER_ELEMENTS} elements")
    if k * out_h * out_w * cg * kh * kw > MAX_LAYER_MACS:
        raise InputError("multiply-accumulates", k * out_h * out_w * cg * kh * kw, f"at most {MAX_LAYER_MACS}")


def _lut_table(layer: ConvLayer, config: HardwareConfig) -> np.ndarray:
    table = np.asarray(layer.lut)
    if table.dtype != LUT_ENTRY_DTYPE or table.ndim != 1:
        raise ValueError(f"lut: expected a 1-D {LUT_ENTRY_DTYPE.name} table, got {table.dtype} {table.shape}")
    if layer.lut_mode == LutMode.DIRECT8:
        info = np.iinfo(layer.out_dtype)
        if table.shape != (LUT8_ENTRIES,) or table.min() < info.min or table.max() > info.max:
            raise ValueError(f"lut: an {layer.out_type.name} output needs {LUT8_ENTRIES} entries within "
                             f"{info.min}..{info.max}, got {table.shape[0]} in {table.min()}..{table.max()}")
    if table.nbytes > config.buffers.lut.bytes:
        raise ValueError(f"lut: {table.nbytes} bytes do not fit buffers.lut.bytes = {config.buffers.lut.bytes}")
    return table


def _param_records(layer: ConvLayer) -> np.ndarray:
    k = layer.w.shape[0]
    records = np.zeros(k, PARAM_DTYPE)
    for name, _, _ in _PARAMS + (_LEAKY_PARAMS if layer.negative_multiplier is not None else ()):
        records[name] = np.broadcast_to(getattr(layer, name), (k,))   # shapes and ranges: check_layer
    if layer.scale is not None:
        records["scale"] = layer.scale
    if layer.w_second is not None:      # the second plane's multiplier; the shift is shared (§4.7)
        records["negative_multiplier"] = np.broadcast_to(layer.second_multiplier, (k,))
    return records


def layer_constants(layer: ConvLayer, config: HardwareConfig) -> dict[str, np.ndarray]:
    """What a layer reads from DRAM besides its input: "weights" (OHWI of :attr:`ConvLayer.mac_weights`; INT4 two
    a byte along I; with a codebook the indices, 8 / index_bits a byte along I; block-circulant, the first filter
    of each block row), "params" (records), "lut", "codebook" (its 2^index_bits int8 entries) and "signs" (a
    circulant layer's sign bits), if any."""
    ohwi = np.ascontiguousarray(layer.mac_weights.transpose(0, 2, 3, 1))
    constants = {"weights": ohwi, "params": _param_records(layer)}
    if layer.w_type == DType.INT4:
        constants["weights"] = pack_int4(ohwi)
    if layer.circulant is not None:
        constants["weights"] = first_rows(layer.w, *layer.circulant)
        constants["signs"] = sign_table(layer.circulant[1])
    if layer.codebook is not None:
        constants["weights"] = pack_indices(np.searchsorted(layer.codebook, ohwi), layer.index_bits)
        table = np.full(1 << layer.index_bits, layer.codebook[-1], np.int8)
        table[:layer.codebook.size] = layer.codebook
        constants["codebook"] = table
    if layer.lut is not None:
        constants["lut"] = _lut_table(layer, config)
    return constants

