"""Lower one quantized convolution layer (conv + requant) to an AIPU command program.

The plan: the input (HWC), weights (OHWI), per-channel parameter records and the output (HWC) each
get a DRAM region. The output is split into tiles of ``tile_k`` output channels x ``tile_rows``
output rows (always the full width); the input channels of a tile are split into chunks of
``tile_c`` that CONV accumulates (groups == 1 only). Every on-chip buffer is used as two halves
(double buffering), and the units synchronise with dependency tokens:

* LOAD -> CONV after the act/weight loads of each CONV step; CONV -> LOAD frees a step's halves.
* LOAD -> REQUANT after the parameters of a k-tile; REQUANT -> LOAD frees the parameter half.
* CONV -> REQUANT after the last CONV of an output tile; REQUANT -> CONV frees the accumulator half.
* REQUANT -> STORE after each requant; STORE -> REQUANT frees the output half.
* With compressed weights, WDEC writes a step's weight half instead of a LOAD: WDEC -> CONV after it;
  CONV -> WDEC from the last CONV that read the half frees it; LOAD -> WDEC from the layer's first LOAD
  (which follows the previous layer) before the layer's first WDEC.

A "free" token is only pushed if a later command will pop it, so the program ends with every token
queue empty (the interpreter checks that at FINISH).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from aipu.compiler.weight_streams import WeightStreams
from aipu.sim import golden
from aipu.sim.machine.arch import (BIAS_BITS, BUFFER_UNIT_BYTES, DEFAULT, DTYPE_BYTES, DTYPE_NUMPY, LUT8_ENTRIES,
                                LUT16_INPUT_BITS, LUT_ENTRY_DTYPE, MULTIPLIER_MAX, PARAM_DTYPE, PARAM_RECORD_BYTES,
                                SHIFT_MAX, Buffer, DType, HardwareConfig, bit_range)
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import COMMANDS, LutMode, Opcode, RequantMode, Rounding, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program

DRAM_ALIGN = 64
ESTIMATE_TOLERANCE = 1.03   # plans whose estimated cycles are this close to the fastest count as ties


def _field_max(opcode: Opcode, name: str) -> int:
    """The largest value a fixed-width command field takes: the compiler's limits are the ISA's."""
    return COMMANDS[opcode].field(name).legal_range(DEFAULT)[1]


_DIM_MAX = _field_max(Opcode.CONV, "in_w")              # tile rows, columns and channels
_KERNEL_MAX = _field_max(Opcode.CONV, "k_h")
_STEP_MAX = _field_max(Opcode.CONV, "stride_h")         # strides and dilations
_PAD_MAX = _field_max(Opcode.LOAD, "pad_top")
_PIXELS_MAX = _field_max(Opcode.REQUANT, "pixels")      # output pixels of one tile
_LUT16_INPUT_MIN = bit_range(LUT16_INPUT_BITS, signed=True)[0]


@dataclass
class ConvLayer:
    """A quantized conv layer in golden-model conventions (NCHW input, [K, C/groups, KH, KW] weights)."""

    x: np.ndarray                      # int8/uint8 [1, C, H, W]
    w: np.ndarray                      # int8 [K, C/groups, KH, KW]
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

    @property
    def out_dtype(self) -> np.dtype:
        return DTYPE_NUMPY[self.out_type]

    @property
    def clamp(self) -> tuple[int, int]:
        info = np.iinfo(self.out_dtype)
        return (info.min if self.qmin is None else self.qmin, info.max if self.qmax is None else self.qmax)

    def conv_golden(self) -> np.ndarray:
        return golden.conv2d(self.x, self.w, x_zero_point=self.x_zero_point, w_zero_point=self.w_zero_point,
                             stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups)

    def reference(self) -> np.ndarray:
        """The whole layer on the golden model: [1, K, OH, OW] of out_type."""
        qmin, qmax = self.clamp
        if self.scale is not None:
            y = golden.requantize_float32(self.conv_golden(), bias=self.bias, scale=self.scale,
                                          out_zero_point=self.out_zero_point, qmin=qmin, qmax=qmax, channel_axis=1,
                                          out_dtype=self.out_dtype)
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


@dataclass(frozen=True)
class TilePlan:
    tile_k: int          # output channels per tile (groups > 1: a whole number of groups)
    tile_c: int          # input channels per CONV, chunks accumulated (groups > 1: per group; below C/G only
                         # when the tile holds one group, which then runs as a dense conv)
    tile_rows: int       # output rows per tile
    out_h: int
    out_w: int


@dataclass
class LoweredLayer:
    program: Program
    dram: np.ndarray                       # initial DRAM image
    output_addr: int                       # byte address of the [OH][OW][K] output in DRAM
    output_shape: tuple[int, int, int]     # (OH, OW, K)
    output_dtype: np.dtype
    plans: list[TilePlan]                  # one per layer
    regions: dict[str, tuple[int, int]] = field(default_factory=dict)   # name -> (address, bytes)
    input_dtype: np.dtype | None = None    # dtype of the network input in the "input" region

    @property
    def plan(self) -> TilePlan:
        """The first layer's plan (the only one for a single layer)."""
        return self.plans[0]

    def memory(self, dram: np.ndarray | None = None) -> Memory:
        return Memory.create(self.program.config, self.dram if dram is None else dram)

    def dram_with_input(self, x: np.ndarray) -> np.ndarray:
        """A copy of the DRAM image with another network input ([1, C, H, W], same shape and dtype)."""
        address, nbytes = self.regions["input"]
        data = np.ascontiguousarray(np.asarray(x)[0].transpose(1, 2, 0))
        if self.input_dtype is not None and data.dtype != self.input_dtype:
            raise ValueError(f"input dtype {data.dtype} does not match the program's input dtype {self.input_dtype}")
        if data.nbytes != nbytes or x.ndim != 4 or x.shape[0] != 1:
            raise ValueError(f"input of shape {list(np.shape(x))} and {data.nbytes} bytes does not match the "
                             f"program's input region of {nbytes} bytes")
        dram = self.dram.copy()
        dram[address:address + nbytes] = np.frombuffer(data.tobytes(), np.uint8)
        return dram

    def read_output(self, memory: Memory) -> np.ndarray:
        """The output tensor from a DRAM image, as [1, K, OH, OW] like the golden model."""
        nbytes = math.prod(self.output_shape) * self.output_dtype.itemsize
        raw = memory.dram[self.output_addr:self.output_addr + nbytes]
        return raw.view(self.output_dtype).reshape(self.output_shape).transpose(2, 0, 1)[None]


def _align(value: int) -> int:
    return -(-value // DRAM_ALIGN) * DRAM_ALIGN


def _output_size(layer: ConvLayer) -> tuple[int, int]:
    _, _, h, w = layer.x.shape
    _, _, kh, kw = layer.w.shape
    pt, pl, pb, pr = layer.padding
    spans = [d * (k - 1) + 1 for d, k in zip(layer.dilation, (kh, kw))]
    return (h + pt + pb - spans[0]) // layer.stride[0] + 1, (w + pl + pr - spans[1]) // layer.stride[1] + 1


MAX_LAYER_ELEMENTS = 1 << 24   # per tensor (x, w, the output): larger layers are refused before allocating
MAX_LAYER_MACS = 1 << 32       # multiply-accumulates of the whole layer: bounds the golden model's time
TENSOR_DTYPES = {"x": (DTYPE_NUMPY[DType.INT8], DTYPE_NUMPY[DType.UINT8]),    # the MAC inputs (CONV in_type)
                 "w": (DTYPE_NUMPY[DType.INT8],)}
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
    _check_tensor("x", layer.x, "[1][C][H][W]", 4)
    if layer.x.shape[0] != 1:
        raise InputError("x", layer.x, "expected one image: shape [1][C][H][W]")
    _check_tensor("w", layer.w, "[K][C/groups][R][S]", 4)
    _, c, h, w = layer.x.shape
    k, cg, kh, kw = layer.w.shape
    _check_int("groups", layer.groups, 1, _DIM_MAX)
    if c % layer.groups or k % layer.groups:
        raise InputError("groups", layer.groups, f"must divide the {c} input channels of x and the {k} "
                         "output channels of w")
    if cg != c // layer.groups:
        raise InputError("w", layer.w, f"shape[1] must be C/groups = {c}/{layer.groups} = {c // layer.groups}")
    if kh > _KERNEL_MAX or kw > _KERNEL_MAX:
        raise InputError("w", layer.w, f"kernels up to {_KERNEL_MAX}x{_KERNEL_MAX} (CONV k_h, k_w)")
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
    _check_ints("stride", layer.stride, 2, 1, _STEP_MAX, "vertical, horizontal")
    _check_ints("dilation", layer.dilation, 2, 1, _STEP_MAX, "vertical, horizontal")
    _check_ints("padding", layer.padding, 4, 0, _PAD_MAX, "top, left, bottom, right")
    reach = [d * (size - 1) for d, size in zip(layer.dilation, (kh, kw))]
    for name, pad, limit in zip(("top", "left", "bottom", "right"), layer.padding, reach * 2):
        if pad > min(limit, _PAD_MAX):
            raise InputError(f"padding {name}", pad, f"at most min(dilation*(kernel-1) = {limit}, "
                             f"{_PAD_MAX}) is supported")
    for name, enum in (("out_type", DType), ("rounding", Rounding)):
        if not isinstance(getattr(layer, name), enum):
            raise InputError(name, getattr(layer, name), f"expected a {enum.__name__}: {enum_names(enum)}")
    out_low, out_high = (int(v) for v in (np.iinfo(layer.out_dtype).min, np.iinfo(layer.out_dtype).max))
    x_info = np.iinfo(layer.x.dtype)
    _check_int("x_zero_point", layer.x_zero_point, int(x_info.min), int(x_info.max), f" (the range of {layer.x.dtype})")
    w_info = np.iinfo(layer.w.dtype)
    _check_int("w_zero_point", layer.w_zero_point, int(w_info.min), int(w_info.max), f" (the range of {layer.w.dtype})")
    _check_int("out_zero_point", layer.out_zero_point, out_low, out_high, f" (the range of {layer.out_type.name})")
    qmin, qmax = layer.clamp
    _check_int("qmin", qmin, out_low, out_high, f" (the range of {layer.out_type.name})")
    _check_int("qmax", qmax, qmin, out_high, f" (qmin .. the top of {layer.out_type.name})")
    out_h, out_w = _output_size(layer)
    if out_h < 1 or out_w < 1:
        raise InputError("w", layer.w, f"a {kh}x{kw} kernel with dilation {layer.dilation} on a {h}x{w} input "
                         f"with padding {layer.padding} gives an empty output")
    width = w + layer.padding[1] + layer.padding[3]
    if width > _DIM_MAX:
        raise InputError("x", layer.x, f"padded input width {width} exceeds the CONV in_w field ({_DIM_MAX})")
    if k * out_h * out_w > MAX_LAYER_ELEMENTS:
        raise InputError("output", f"{k}x{out_h}x{out_w}", f"at most {MAX_LAYER_ELEMENTS} elements")
    if k * out_h * out_w * cg * kh * kw > MAX_LAYER_MACS:
        raise InputError("multiply-accumulates", k * out_h * out_w * cg * kh * kw, f"at most {MAX_LAYER_MACS}")


def plan_tiles(layer: ConvLayer, config: HardwareConfig = DEFAULT, *, tile_k: int | None = None,
               tile_c: int | None = None, tile_rows: int | None = None) -> TilePlan:
    """Tiles that fit half of every buffer, chosen among even splits of K and halvings of C and of the output
    rows: the fewest commands among the plans within ESTIMATE_TOLERANCE of the fewest estimated cycles (the
    DMA's DRAM words and latency per command against the MAC array's blocks; docs/compiler.md, "Tiling").
    Explicitly given sizes are kept."""
    _, c, _, w = layer.x.shape
    k, cg, kh, kw = layer.w.shape
    groups = layer.groups
    out_h, out_w = _output_size(layer)
    kg = k // groups
    in_w = w + layer.padding[1] + layer.padding[3]
    half = {b: config.buffer(b).bytes // 2 for b in Buffer}
    out_bytes = DTYPE_BYTES[layer.out_type]

    def in_rows(rows: int) -> int:
        return (rows - 1) * layer.stride[0] + layer.dilation[0] * (kh - 1) + 1

    def channels(tk: int, tc: int) -> int:   # input channels a tile of tk output channels reads
        return tc if groups == 1 else tk // kg * tc

    def fits(tk: int, tc: int, rows: int) -> dict[str, bool]:
        return {"weight": tk * kh * kw * tc <= half[Buffer.WEIGHT],
                "param": tk * PARAM_RECORD_BYTES <= half[Buffer.PARAM],
                "acc": rows * out_w * tk * BUFFER_UNIT_BYTES[Buffer.ACC] <= half[Buffer.ACC],
                "out": rows * out_w * tk * out_bytes <= half[Buffer.OUT],
                "act": in_rows(rows) * in_w * channels(tk, tc) <= half[Buffer.ACT],
                "fields": max(tk, channels(tk, tc), in_rows(rows)) <= _DIM_MAX and rows * out_w <= _PIXELS_MAX}

    step_k = kg if groups > 1 else 1
    if tile_k is not None and (tile_k % step_k or not 1 <= tile_k <= k):
        raise ValueError(f"tile_k = {tile_k}: must be 1..{k} and a multiple of the {step_k} output channels "
                         "per group")
    if (tile_c is not None and not 1 <= tile_c <= c) or (tile_rows is not None and not 1 <= tile_rows <= out_h):
        raise ValueError(f"tile_c = {tile_c} / tile_rows = {tile_rows}: must be 1..{c} / 1..{out_h}")

    def halvings(full: int) -> list[int]:
        sizes = [full]
        while sizes[-1] > 1:
            sizes.append(-(-sizes[-1] // 2))
        return sizes

    def even_splits(full: int) -> list[int]:
        """Every tile size that splits ``full`` into n tiles as evenly as possible (ceil(full / n))."""
        return sorted({-(-full // n) for n in range(1, full + 1)}, reverse=True)

    word = config.dram.bytes_per_cycle

    def words(pixels: int, run: int, pixel_stride: int) -> int:
        """DRAM words the DMA walks for ``pixels`` runs of ``run`` bytes ``pixel_stride`` apart (one per
        cycle, partly used or not): adjacent runs merge into one (docs/rtl-dma.md)."""
        return -(-pixels * run // word) if run == pixel_stride else pixels * -(-run // word)

    def estimate(tk: int, tc: int, rows: int) -> tuple[float, int]:
        """(cycles, commands) of a plan. The DMA's cycles: DRAM words plus its latency per LOAD/STORE; inputs
        are re-read per k-tile (groups == 1; a grouped tile reads only its own groups' channels), weights per
        row tile when the input channels are split (the weight half then changes every step); a slice of a
        few channels of an HWC tensor costs a whole word per pixel. The MAC array's: per weight block
        (``MacArrayConfig.blocks``) one per pixel, and at least the ``cols`` cycles that load the next
        block's weights (docs/rtl-conv.md); edge tiles counted as full. The two overlap across tiles (double
        buffering): the busier one's cycles plus the other's share of one tile, the pipeline's fill."""
        k_tiles, row_tiles, chunks = -(-k // tk), -(-out_h // rows), -(-(c if groups == 1 else cg) // tc)
        tiles = k_tiles * row_tiles
        steps = tiles * chunks
        inputs = k_tiles * chunks * words(row_tiles * in_rows(rows) * w, channels(tk, tc), c)
        weights = chunks * words(k * kh * kw, min(tc, cg), cg) * (row_tiles if chunks > 1 else 1)
        outputs = k_tiles * words(out_h * out_w, tk * out_bytes, k * out_bytes)
        transfers = steps + (steps if chunks > 1 else k_tiles) + k_tiles + tiles
        dma = inputs + weights + outputs + config.dram.latency_cycles * transfers
        dense = groups == 1 or tc < cg
        blocks = config.mac.blocks(1 if dense else tk // kg, tc if dense else cg, tk if dense else kg, kh * kw)
        mac = steps * blocks * max(rows * out_w, config.mac.cols)
        return max(dma, mac) + min(dma, mac) / tiles, transfers + steps + tiles

    # A grouped tile reads whole groups (tile_c = C/G), or, holding one group, a chunk of its channels.
    candidates = [(*estimate(tk, tc, rows), -rows, tk, tc, rows)
                  for tk in ([tile_k] if tile_k else [n * step_k for n in even_splits(k // step_k)])
                  for tc in (([tile_c] if tile_c else halvings(c)) if groups == 1 else halvings(cg))
                  for rows in ([tile_rows] if tile_rows else halvings(out_h))
                  if (groups == 1 or tc == cg or tk == kg) and all(fits(tk, tc, rows).values())]
    if not candidates:
        tk, tc, rows = tile_k or step_k, tile_c or 1 if groups == 1 else 1, tile_rows or 1
        failed = [name for name, good in fits(tk, tc, rows).items() if not good]
        raise ValueError(f"layer does not fit the buffers even with tile_k={tk}, tile_c={tc}, tile_rows={rows} "
                         f"(too large for: {', '.join(failed)})")
    # The estimate is not exact to a few percent: among the plans that close to the fastest, the fewest commands.
    fastest = min(candidate[0] for candidate in candidates)
    _, _, _, tk, tc, rows = min(candidates, key=lambda candidate: (candidate[0] > fastest * ESTIMATE_TOLERANCE,
                                                                    candidate[1:]))
    return TilePlan(tk, tc, rows, out_h, out_w)


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
    return records


def layer_constants(layer: ConvLayer, config: HardwareConfig) -> dict[str, np.ndarray]:
    """What a layer reads from DRAM besides its input: "weights" (OHWI), "params" (records), "lut" (if any)."""
    constants = {"weights": np.ascontiguousarray(layer.w.transpose(0, 2, 3, 1)), "params": _param_records(layer)}
    if layer.lut is not None:
        constants["lut"] = _lut_table(layer, config)
    return constants


def lower_conv_layer(layer: ConvLayer, config: HardwareConfig = DEFAULT, *, compress: bool = False,
                     **tiles) -> LoweredLayer:
    """Plan DRAM, tile the layer and emit LOAD/CONV/REQUANT(/LUT)/STORE with double buffering and tokens."""
    return lower_conv_layers([layer], config, [tiles], compress=compress)


def lower_conv_layers(layers: list[ConvLayer], config: HardwareConfig = DEFAULT,
                      tiles: list[dict] | None = None, *, compress: bool = False) -> LoweredLayer:
    """Lower a chain of conv layers into one program: layer i + 1 reads layer i's output from DRAM.

    Only the first layer's ``x`` is input data; later layers' ``x`` must have the previous output's
    shape and dtype (their values are not used). Between layers the last STORE pushes a STORE -> LOAD
    token that the next layer's first LOAD pops: everything of the previous layer then happens before
    anything of the next (DRAM read-after-write and every on-chip buffer reuse). ``compress``: weight tiles
    decoded by WDEC where their stream is smaller (``WeightStreams``), the streams placed after the outputs."""
    if not layers:
        raise ValueError("lower_conv_layers needs at least one layer")
    tiles = tiles or [{} for _ in layers]
    if len(tiles) != len(layers):
        raise ValueError(f"tiles has {len(tiles)} entries for {len(layers)} layers")
    for layer in layers:
        check_layer(layer)
    plans = [plan_tiles(layer, config, **t) for layer, t in zip(layers, tiles)]
    for i in range(1, len(layers)):
        shape = (1, layers[i - 1].w.shape[0], plans[i - 1].out_h, plans[i - 1].out_w)
        if layers[i].x.shape != shape or layers[i].x.dtype != layers[i - 1].out_dtype:
            raise ValueError(f"layer {i} input {layers[i].x.dtype}{list(layers[i].x.shape)} does not match layer "
                             f"{i - 1} output {layers[i - 1].out_dtype}{list(shape)}")

    # DRAM: the network input, each layer's weights / records / table, then each layer's output (HWC).
    blobs = {"input": np.ascontiguousarray(layers[0].x[0].transpose(1, 2, 0))}
    for i, layer in enumerate(layers):
        blobs.update({f"{i}.{name}": blob for name, blob in layer_constants(layer, config).items()})
    regions, cursor = {}, 0
    for name, blob in blobs.items():
        regions[name] = (cursor, blob.nbytes)
        cursor = _align(cursor + blob.nbytes)
    for i, (layer, plan) in enumerate(zip(layers, plans)):
        regions[f"{i}.output"] = (cursor, plan.out_h * plan.out_w * layer.w.shape[0] * layer.out_dtype.itemsize)
        cursor = _align(cursor + regions[f"{i}.output"][1])

    def place(name: str, stream: bytes) -> int:
        nonlocal cursor
        blobs[name], regions[name] = np.frombuffer(stream, np.uint8), (cursor, len(stream))
        cursor = _align(cursor + len(stream))
        return regions[name][0]

    program, streams = Program(config), []
    for i, (layer, plan) in enumerate(zip(layers, plans)):
        addresses = {"input": regions["input" if i == 0 else f"{i - 1}.output"][0],
                     **{name: regions[f"{i}.{name}"][0] for name in ("weights", "params", "output", "lut")
                        if f"{i}.{name}" in regions}}
        emit_conv_layer(program, layer, plan, addresses, after_previous=i > 0, before_next=i < len(layers) - 1,
                        weight_stream=WeightStreams(layer.w, str(i), place, streams) if compress else None)
    program.append(Command.make(Opcode.FINISH, unit=Unit.STORE))
    dram = np.zeros(cursor, np.uint8)
    for name, blob in blobs.items():
        address, nbytes = regions[name]
        dram[address:address + nbytes] = np.frombuffer(blob.tobytes(), np.uint8)
    last = len(layers) - 1
    return LoweredLayer(program, dram, regions[f"{last}.output"][0],
                        (plans[last].out_h, plans[last].out_w, layers[last].w.shape[0]), layers[last].out_dtype,
                        plans, regions, layers[0].x.dtype)


def _with_tokens(command: Command, pop=(), push=()) -> Command:
    return Command(command.opcode, command.args, command.pop | set(pop), command.push | set(push))


def _decode_weights(program: Program, command: Command, first_load: int, last_reader: int | None) -> None:
    """Append a WDEC command: the last CONV of the layer to read the weight half it writes (``last_reader``, its
    index in the CONV queue) frees it, and the layer's first WDEC waits for the layer's first LOAD, which
    waits for the previous layer (so no CONV of it still reads the weight buffer)."""
    if last_reader is not None:
        convs = program.queues[Unit.CONV]
        convs[last_reader] = _with_tokens(convs[last_reader], push=[Unit.WDEC])
        command = _with_tokens(command, pop=[Unit.CONV])
    loads = program.queues[Unit.LOAD]
    if Unit.WDEC not in loads[first_load].push:
        loads[first_load] = _with_tokens(loads[first_load], push=[Unit.WDEC])
        command = _with_tokens(command, pop=[Unit.LOAD])
    program.append(command)


def emit_conv_layer(program: Program, layer: ConvLayer, plan: TilePlan, addresses: Mapping[str, int], *,
                    after_previous: bool = False, before_next: bool = False, input_row: int | None = None,
                    output_steps: tuple[int, int] | None = None,
                    weight_stream: Callable[[int, int, int, int], tuple[int, int] | None] | None = None) -> None:
    """Append one layer's commands to ``program``.

    ``addresses``: DRAM byte addresses of "input" (HWC), "weights" (OHWI), "params" (records), "output"
    (HWC) and, with a table, "lut" ("weights" is only read when a weight tile is loaded raw).
    ``after_previous``: the layer's first LOAD pops a STORE -> LOAD token; ``before_next``: its last STORE
    pushes one. Within the layer every token pushed is also popped. The input and the output may be views
    of larger tensors: ``input_row`` elements between input rows (default W * C), ``output_steps`` elements
    between output rows and between output pixels (default out_w * K and K), as a transposed convolution's
    phases read and write them. ``weight_stream(k0, k, c0, c)``: where the compressed stream of the weights
    [k0:k0+k, c0:c0+c] lies in DRAM (address, length), or None to load that tile raw; a placed tile is
    decoded by WDEC instead (the WDEC tokens: module docstring)."""
    config = program.config
    first_load = len(program.queues[Unit.LOAD])
    weight_reader: list[int | None] = [None, None]   # the last CONV (its queue index) to read each weight half
    _, c, h, w = layer.x.shape
    k, cg, kh, kw = layer.w.shape
    input_row = w * c if input_row is None else input_row
    kg = k // layer.groups
    pt, pl, pb, pr = layer.padding
    sh = layer.stride[0]
    span_h = layer.dilation[0] * (kh - 1) + 1
    in_type = next(dtype for dtype, numpy_type in DTYPE_NUMPY.items() if numpy_type == layer.x.dtype)
    out_bytes = DTYPE_BYTES[layer.out_type]
    out_row, out_pixel = (plan.out_w * k, k) if output_steps is None else output_steps
    qmin, qmax = layer.clamp

    def slot(buffer: Buffer, i: int) -> int:
        """Address (in the buffer's units) of half ``i % 2``: the double-buffering ping-pong."""
        return (i % 2) * (config.buffer_units(buffer) // 2)

    # Enumerate the work: output tiles (k-tile, row tile) and, inside each, CONV steps (channel chunks).
    k_tiles = [(k0, min(plan.tile_k, k - k0)) for k0 in range(0, k, plan.tile_k)]
    row_tiles = [(r0, min(plan.tile_rows, plan.out_h - r0)) for r0 in range(0, plan.out_h, plan.tile_rows)]
    dense = layer.groups == 1 or plan.tile_c < cg        # a chunked grouped tile holds one group: dense
    chunks = ([(c0, min(plan.tile_c, (c if layer.groups == 1 else cg) - c0))
               for c0 in range(0, c if layer.groups == 1 else cg, plan.tile_c)] if dense else [None])
    reload_weights = len(chunks) > 1
    # A grouped layer whose weights and records all fit one half loads them once: its tiles differ only there.
    resident = (not dense and len(k_tiles) > 1 and layer.w.size <= config.buffer(Buffer.WEIGHT).bytes // 2
                and k <= config.buffer_units(Buffer.PARAM) // 2)
    tiles = [(kt, rt) for kt in range(len(k_tiles)) for rt in range(len(row_tiles))]
    n_steps = len(tiles) * len(chunks)

    if layer.lut is not None:   # the table stays in LUT memory for the whole layer
        program.append(Command.make(Opcode.LOAD, push=[Unit.LUT], buffer=Buffer.LUT, dram_addr=addresses["lut"],
                                    run=layer.lut.nbytes))
    to_store = Unit.LUT if layer.lut is not None else Unit.REQUANT   # the unit that hands tiles to STORE
    step = 0
    for t, (kt, rt) in enumerate(tiles):
        k0, tk = k_tiles[kt]
        r0, rows = row_tiles[rt]
        first_of_k = rt == 0
        last_of_k = rt == len(row_tiles) - 1
        in_first = r0 * sh - pt
        in_rows = (rows - 1) * sh + span_h
        pad_top, pad_bottom = max(0, -in_first), max(0, in_first + in_rows - h)
        real_first = max(0, in_first)
        real_rows = in_rows - pad_top - pad_bottom
        loads_params = t == 0 if resident else first_of_k      # the tile's weights and records arrive with it
        param_index = slot(Buffer.PARAM, 0) + k0 if resident else slot(Buffer.PARAM, kt)

        group_base = 0 if layer.groups == 1 else (k0 // kg) * cg      # the tile's first input channel
        for chunk_index, chunk in enumerate(chunks):
            c0, tc = (group_base + chunk[0], chunk[1]) if chunk is not None else (group_base, tk // kg * cg)
            loads = []
            if loads_params and chunk_index == 0:
                loaded_k = k if resident else tk
                loads.append(dict(buffer=Buffer.PARAM, sram_addr=slot(Buffer.PARAM, kt) * PARAM_RECORD_BYTES,
                                  dram_addr=addresses["params"] + k0 * PARAM_RECORD_BYTES, elem_type=DType.INT8,
                                  y_size=1, x_size=1, run=loaded_k * PARAM_RECORD_BYTES,
                                  pop=[Unit.REQUANT] if kt >= 2 else [], push=[Unit.REQUANT]))
            weight_slot = step if reload_weights else 0 if resident else kt
            wgt_addr = slot(Buffer.WEIGHT, weight_slot) + (k0 * kh * kw * cg if resident else 0)
            decoded = None
            if reload_weights or (loads_params and chunk_index == 0):
                wgt_k, wgt_c0, wgt_c = k if resident else tk, c0 - group_base if dense else 0, tc if dense else cg
                placed = weight_stream(k0, wgt_k, wgt_c0, wgt_c) if weight_stream is not None else None
                if placed is not None:
                    decoded = Command.make(Opcode.WDEC, push=[Unit.CONV],
                                           dram_addr=placed[0], length=placed[1],
                                           wgt_addr=slot(Buffer.WEIGHT, weight_slot), out_c=wgt_k, in_c=wgt_c,
                                           k_h=kh, k_w=kw)
                else:
                    loads.append(dict(buffer=Buffer.WEIGHT, sram_addr=slot(Buffer.WEIGHT, weight_slot),
                                      dram_addr=addresses["weights"] + k0 * kh * kw * cg + wgt_c0,
                                      elem_type=DType.INT8, y_size=wgt_k, x_size=kh * kw, run=wgt_c,
                                      dram_y_stride=kh * kw * cg, dram_x_stride=cg))
            loads.append(dict(buffer=Buffer.ACT, sram_addr=slot(Buffer.ACT, step),
                              dram_addr=addresses["input"] + (real_first * input_row + c0), elem_type=in_type,
                              y_size=real_rows, x_size=w, run=tc, dram_y_stride=input_row, dram_x_stride=c,
                              pad_top=pad_top, pad_bottom=pad_bottom, pad_left=pl, pad_right=pr,
                              pad_value=layer.x_zero_point))
            if step >= 2:
                loads[0]["pop"] = list(loads[0].get("pop", [])) + [Unit.CONV]
            loads[-1]["push"] = list(loads[-1].get("push", [])) + [Unit.CONV]
            for load in loads:
                program.append(Command.make(Opcode.LOAD, **load))
            if decoded is not None:
                _decode_weights(program, decoded, first_load, weight_reader[weight_slot % 2])

            last_chunk = chunk_index == len(chunks) - 1
            pop = [Unit.LOAD] + ([Unit.REQUANT] if chunk_index == 0 and t >= 2 else []) + \
                ([Unit.WDEC] if decoded is not None else [])
            weight_reader[weight_slot % 2] = len(program.queues[Unit.CONV])
            push = ([Unit.LOAD] if step + 2 < n_steps else []) + ([Unit.REQUANT] if last_chunk else [])
            program.append(Command.make(
                Opcode.CONV, pop=pop, push=push, in_addr=slot(Buffer.ACT, step), in_h=in_rows, in_w=w + pl + pr,
                in_c=tc, in_type=in_type, in_zero_point=layer.x_zero_point,
                wgt_addr=wgt_addr, w_zero_point=layer.w_zero_point, out_c=tk, k_h=kh,
                k_w=kw, stride_h=layer.stride[0], stride_w=layer.stride[1], dilation_h=layer.dilation[0],
                dilation_w=layer.dilation[1], groups=1 if dense else tk // kg,
                acc_addr=slot(Buffer.ACC, t), accumulate=int(chunk_index > 0)))
            step += 1

        pop = [Unit.CONV] + ([Unit.LOAD] if loads_params else []) + ([Unit.STORE] if t >= 2 else [])
        push = ([Unit.LUT if layer.lut is not None else Unit.STORE] + ([Unit.CONV] if t + 2 < len(tiles) else [])
                + ([Unit.LOAD] if last_of_k and kt + 2 < len(k_tiles) and not resident else []))
        program.append(Command.make(
            Opcode.REQUANT, pop=pop, push=push, acc_addr=slot(Buffer.ACC, t), out_addr=slot(Buffer.OUT, t),
            pixels=rows * plan.out_w, channels=tk, param_index=param_index, out_type=layer.out_type,
            out_zero_point=layer.out_zero_point, qmin=qmin, qmax=qmax,
            mode=RequantMode.NATIVE if layer.scale is None else RequantMode.FLOAT32,
            rounding=layer.rounding, leaky=int(layer.negative_multiplier is not None)))
        if layer.lut is not None:   # in place on the output half
            out_info = np.iinfo(layer.out_dtype)
            table = dict(table_log2=(len(layer.lut) - 1).bit_length() - 1, index_shift=layer.lut_index_shift,
                         input_min=layer.lut_input_min, qmin=int(out_info.min), qmax=int(out_info.max)) \
                if layer.lut_mode == LutMode.INTERP16 else {}
            program.append(Command.make(
                Opcode.LUT, pop=[Unit.REQUANT] + ([Unit.LOAD] if t == 0 else []), push=[Unit.STORE],
                src_buf=Buffer.OUT, src_addr=slot(Buffer.OUT, t), dst_addr=slot(Buffer.OUT, t),
                count=rows * plan.out_w * tk, mode=layer.lut_mode, in_type=layer.out_type, out_type=layer.out_type,
                **table))
        program.append(Command.make(
            Opcode.STORE, pop=[to_store], push=[Unit.REQUANT] if t + 2 < len(tiles) else [],
            sram_addr=slot(Buffer.OUT, t), dram_addr=addresses["output"] + (r0 * out_row + k0) * out_bytes,
            elem_type=layer.out_type, y_size=rows, x_size=plan.out_w, run=tk,
            dram_y_stride=out_row * out_bytes, dram_x_stride=out_pixel * out_bytes))
    loads, stores = program.queues[Unit.LOAD], program.queues[Unit.STORE]
    if after_previous:
        loads[first_load] = _with_tokens(loads[first_load], pop=[Unit.STORE])
    if before_next:
        stores[-1] = _with_tokens(stores[-1], push=[Unit.LOAD])
