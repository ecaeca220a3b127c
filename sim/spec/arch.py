"""The single source of truth for the AIPU: arithmetic widths, hardware configuration and command format.

Golden model, interpreter, cycle model, RTL and compiler import their numbers from here and never
restate them. docs/arithmetic.md explains the arithmetic constants; docs/isa.md is generated from the
command definitions in this module.
"""
from __future__ import annotations

import functools
import hashlib
import json
import tomllib
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import IntEnum
from pathlib import Path

import numpy as np

from aipu.sim.spec.errors import InputError

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


# --- Hardware configuration (docs/isa.md, "Hardware configuration") ---------------------------------
# Everything below is owned by the command-format work: the configurable machine and the declarative
# command set. Widths that depend on the configuration (addresses) are computed from it, never restated.

def _key(doc: str, default: int, maximum: int, power_of_two: bool = False):
    """A configuration key: default, meaning and legal range 1 .. maximum (rendered in docs/isa.md),
    and whether it must be 2**n. The maxima keep a hostile configuration from allocating or looping
    without bound; each is far above any machine this model describes."""
    return field(default=default, metadata={"doc": doc, "maximum": maximum, "power_of_two": power_of_two})


MAC_DIM_MAX = 4096                 # rows/cols of the MAC array: a CONV tile has at most 4095 channels
BUFFER_BYTES_MAX = 1 << 26         # 64 MiB per on-chip buffer (the interpreter allocates every buffer)
PORT_BYTES_MAX = 4096              # bytes per cycle of a buffer port or of the DMA
DRAM_ADDRESS_BITS_MAX = 48
CONFIG_FILE_BYTES_MAX = 1 << 16    # a configuration is a few hundred bytes; larger files are refused


@dataclass(frozen=True)
class MacArrayConfig:
    """The MAC array: each cycle it reduces ``rows`` input channels of one kernel tap of one output
    pixel against ``rows x cols`` weights and adds the products into ``cols`` output channels."""

    rows: int = _key("input channels reduced per cycle (one kernel tap, one output pixel)", 16, MAC_DIM_MAX)
    cols: int = _key("output channels produced per cycle", 16, MAC_DIM_MAX)


@dataclass(frozen=True)
class BufferConfig:
    """One on-chip SRAM: capacity and width of its port (bytes per cycle)."""

    bytes: int = _key("capacity in bytes", 65536, BUFFER_BYTES_MAX, power_of_two=True)
    port_bytes: int = _key("port width in bytes per cycle", 16, PORT_BYTES_MAX, power_of_two=True)


def _buffer(doc: str, size: int, port_bytes: int):
    return field(default=BufferConfig(bytes=size, port_bytes=port_bytes), metadata={"doc": doc})


@dataclass(frozen=True)
class BuffersConfig:
    """The on-chip buffers; names match :class:`Buffer` (``Buffer.WEIGHT`` -> ``weight``)."""

    act: BufferConfig = _buffer("activation tiles read by CONV/POOL/ELTWISE/LUT", 256 * 1024, 16)
    weight: BufferConfig = _buffer("int8 weights (one row of the array per cycle: rows x cols bytes)",
                                   256 * 1024, 256)
    acc: BufferConfig = _buffer("int32 accumulators (cols x 4 bytes per cycle)", 64 * 1024, 64)
    out: BufferConfig = _buffer("quantized results waiting for STORE", 64 * 1024, 16)
    lut: BufferConfig = _buffer("activation tables (int16 entries)", 4 * 1024, 4)
    param: BufferConfig = _buffer("per-channel requant records", 8 * 1024, 16)


@dataclass(frozen=True)
class DramConfig:
    address_bits: int = _key("width of DRAM byte addresses in commands", 32, DRAM_ADDRESS_BITS_MAX)
    bytes_per_cycle: int = _key("sustained DMA bandwidth", 16, PORT_BYTES_MAX, power_of_two=True)
    latency_cycles: int = _key("cycles from a DMA request to its first data", 100, 1 << 20)


@dataclass(frozen=True)
class QueueConfig:
    command_depth: int = _key("commands buffered per unit queue", 64, 1 << 16)
    token_depth: int = _key("tokens one dependency-token queue holds before its producer stalls", 8, 1 << 16)


@dataclass(frozen=True)
class HardwareConfig:
    """The configurable machine. Load with :func:`load_hardware_config`; ``DEFAULT`` is the reference."""

    mac: MacArrayConfig = MacArrayConfig()
    buffers: BuffersConfig = BuffersConfig()
    dram: DramConfig = DramConfig()
    queues: QueueConfig = QueueConfig()
    clock_mhz: int = _key("clock frequency in MHz", 800, 100_000)

    def __post_init__(self) -> None:
        _validate_dataclass(self, "")
        if self.buffers.param.bytes < PARAM_RECORD_BYTES:
            raise InputError("buffers.param.bytes", self.buffers.param.bytes,
                             f"at least {PARAM_RECORD_BYTES}, one parameter record")
        if self.buffers.acc.bytes < ACC_BITS // 8:
            raise InputError("buffers.acc.bytes", self.buffers.acc.bytes,
                             f"at least {ACC_BITS // 8}, one accumulator")
        for spec in COMMANDS.values():   # every command of this configuration must fit its word
            spec.layout(self)

    # Derived quantities: the only place address widths come from.
    def buffer(self, buffer: Buffer) -> BufferConfig:
        return getattr(self.buffers, buffer.name.lower())

    def buffer_units(self, buffer: Buffer) -> int:
        """How many addressable units the buffer has (bytes, int32 entries or parameter records)."""
        return self.buffer(buffer).bytes // BUFFER_UNIT_BYTES[buffer]

    def address_bits(self, buffer: Buffer) -> int:
        return (self.buffer_units(buffer) - 1).bit_length()

    @property
    def width_parameters(self) -> dict[str, int]:
        """Named widths that command fields refer to (``Field.bits`` given as a string)."""
        widths = {f"{b.name.lower()}_addr_bits": self.address_bits(b) for b in Buffer}
        widths["sram_addr_bits"] = max(self.address_bits(b) for b in Buffer if BUFFER_UNIT_BYTES[b] == 1)
        widths["dram_addr_bits"] = self.dram.address_bits
        return widths

    def to_dict(self) -> dict:
        return asdict(self)

    def config_hash(self) -> str:
        """Stable short hash of the configuration (programs record it to refuse a mismatched machine)."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _validate_dataclass(obj, prefix: str) -> None:
    """Every leaf is an int in 1 .. its maximum (a power of two where the field says so); errors name
    the full key."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        key = prefix + f.name
        if is_dataclass(f.default):
            if type(value) is not type(f.default):
                raise InputError(key, value, "expected a table")
            _validate_dataclass(value, key + ".")
            continue
        maximum = f.metadata["maximum"]
        if not isinstance(value, int) or isinstance(value, bool):
            raise InputError(key, value, f"expected an integer 1 .. {maximum}")
        if value <= 0:
            raise InputError(key, value, "must be positive")
        if value > maximum:
            raise InputError(key, value, f"at most {maximum}")
        if f.metadata["power_of_two"] and value & (value - 1):
            raise InputError(key, value, "must be a power of two")


def _build_dataclass(cls, data, prefix: str):
    if not isinstance(data, dict):
        raise InputError(prefix.rstrip('.') or 'config', data, "expected a table")
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in known:
            raise InputError(f"{prefix}{key}", value, f"unknown key (expected one of {', '.join(known)})")
        default = known[key].default
        kwargs[key] = _build_dataclass(type(default), value, f"{prefix}{key}.") if is_dataclass(default) else value
    return cls(**kwargs)


def hardware_config_from_dict(data: dict) -> HardwareConfig:
    """Build and validate a configuration; missing keys take their defaults."""
    return _build_dataclass(HardwareConfig, data, "")


def hardware_config_from_text(data: bytes, syntax: str = "json") -> HardwareConfig:
    """Parse (``json`` or ``toml``) and validate a configuration of at most CONFIG_FILE_BYTES_MAX bytes."""
    if len(data) > CONFIG_FILE_BYTES_MAX:
        raise InputError("size", len(data), f"a configuration has at most {CONFIG_FILE_BYTES_MAX} bytes")
    try:
        text = data.decode()
        document = tomllib.loads(text) if syntax == "toml" else json.loads(text)
    except RecursionError:   # both parsers recurse per nesting level; a configuration nests 3 deep
        raise InputError("nesting", "deeper than the parser's limit", "a configuration nests 3 levels deep") \
            from None
    except ValueError as exc:  # not UTF-8, a syntax error, or an integer beyond the parser's digit limit
        raise InputError("syntax", str(exc), f"expected a {syntax.upper()} document") from None
    return hardware_config_from_dict(document)


def load_hardware_config(path) -> HardwareConfig:
    """Read a ``.toml`` or ``.json`` configuration file; errors name the file."""
    path = Path(path)
    if path.suffix not in (".toml", ".json"):
        raise InputError("config file", str(path), "expected a .toml or .json file")
    with path.open("rb") as handle:
        data = handle.read(CONFIG_FILE_BYTES_MAX + 1)
    try:
        return hardware_config_from_text(data, path.suffix[1:])
    except InputError as exc:
        raise exc.within(path) from None


# --- Command set (docs/isa.md is generated from these tables by app/isa_doc.py) ---------------------
COMMAND_BITS = 256            # every command is one fixed-width little-endian word; opcode in the lowest bits
COMMAND_BYTES = COMMAND_BITS // 8


class Unit(IntEnum):
    """Execution units; each owns one in-order command queue."""

    LOAD = 0      # DMA DRAM -> on-chip buffers (strided, with padding)
    WDEC = 1      # weight decompression DRAM -> weight buffer
    CONV = 2      # MAC array: convolution / matmul tiles into the accumulator buffer
    REQUANT = 3   # accumulator -> quantized output buffer
    LUT = 4       # table-lookup activations
    POOL = 5      # pooling, element-wise and concat rescale
    STORE = 6     # DMA output buffer -> DRAM


class Opcode(IntEnum):
    """Opcode 0 is reserved so that an all-zero (erased) word never decodes."""

    LOAD = 1
    STORE = 2
    CONV = 3
    REQUANT = 4
    LUT = 5
    POOL = 6
    ELTWISE = 7
    WDEC = 8
    FINISH = 9


class Buffer(IntEnum):
    ACT = 0       # activations: CONV/POOL/ELTWISE/LUT inputs, layout [rows][cols][channels]
    WEIGHT = 1    # int8 weights, layout [out_c][k_h][k_w][in_c / groups]
    ACC = 2       # int32 accumulators, addressed in entries, layout [pixels][channels]
    OUT = 3       # quantized results waiting for STORE, layout [pixels][channels]
    LUT = 4       # activation tables
    PARAM = 5     # per-output-channel requant records (PARAM_RECORD), addressed in records


class DType(IntEnum):
    INT8 = 0
    UINT8 = 1
    INT16 = 2


DTYPE_NUMPY = {DType.INT8: "<i1", DType.UINT8: "<u1", DType.INT16: "<i2"}
DTYPE_BYTES = {dtype: int(code[-1]) for dtype, code in DTYPE_NUMPY.items()}

# One parameter record per output channel: name, numpy type, meaning. Little-endian, packed.
PARAM_RECORD: tuple[tuple[str, str, str], ...] = (
    ("bias", "<i4", "int32 bias added to the accumulator (BIAS_BITS)"),
    ("multiplier", "<u2", "requant multiplier M (MULTIPLIER_BITS, unsigned)"),
    ("shift", "<u1", "requant shift N, 0..SHIFT_MAX"),
    ("negative_shift", "<u1", "shift used for negative values when the command's leaky flag is set"),
    ("negative_multiplier", "<u2", "multiplier used for negative values when the leaky flag is set"),
    ("reserved", "<u2", "must be zero"),
    ("scale", "<f4", "float32 scale used instead of M/2^N when the command's mode is FLOAT32"),
)
PARAM_RECORD_BYTES = sum(int(code[-1]) for _, code, _ in PARAM_RECORD)
PARAM_DTYPE = np.dtype([(name, code) for name, code, _ in PARAM_RECORD])   # one record, as numpy reads it

BUFFER_UNIT_BYTES = {Buffer.ACT: 1, Buffer.WEIGHT: 1, Buffer.ACC: ACC_BITS // 8, Buffer.OUT: 1,
                     Buffer.LUT: 1, Buffer.PARAM: PARAM_RECORD_BYTES}
LOADABLE_BUFFERS = (Buffer.ACT, Buffer.WEIGHT, Buffer.LUT, Buffer.PARAM)
VECTOR_SOURCE_BUFFERS = (Buffer.ACT, Buffer.OUT)   # where LUT/POOL/ELTWISE read their operands


class Rounding(IntEnum):
    """Rounding of right shifts; names are the golden model's mode strings in upper case."""

    FLOOR = 0                 # plain arithmetic shift (seed 002 mode)
    HALF_UP = 1               # add 2^(N-1) then floor: rshift_rnd of seed002_003_quant.md Part 3
    HALF_TO_EVEN = 2          # ties to even (ONNX / vendor float round)
    HALF_AWAY_FROM_ZERO = 3   # ties away from zero


class RequantMode(IntEnum):
    NATIVE = 0        # (acc + bias) * M >> N with the command's rounding (optional leaky negative M/N)
    FLOAT32 = 1       # ONNX-compatible: float32 scale from the parameter record, round half to even


class LutMode(IntEnum):
    DIRECT8 = 0       # 8-bit input indexes a 256-entry table directly
    INTERP16 = 1      # 16-bit input: 2^t + 1 entry table with linear interpolation
# LUT memory holds tables of signed LUT_ENTRY_BITS entries, little-endian.


class PoolMode(IntEnum):
    MAX = 0
    AVG = 1


class EltwiseOp(IntEnum):
    """Names are the golden model's op strings in upper case (RESCALE: golden concat of one input)."""

    ADD = 0
    SUB = 1
    MAX = 2
    MIN = 3
    MUL = 4           # one multiplier/shift pair (operand a's fields); b's must be 0
    RESCALE = 5       # operand a requantized into the output scale: one concat branch


@dataclass(frozen=True)
class Field:
    """One command field. ``bits`` is a width or the name of a width derived from the configuration
    (see ``HardwareConfig.width_parameters``). The legal range defaults to everything the width holds."""

    name: str
    bits: int | str
    meaning: str
    signed: bool = False
    minimum: int | None = None
    maximum: int | None = None
    choices: type[IntEnum] | tuple[IntEnum, ...] | None = None

    def width(self, config: HardwareConfig) -> int:
        return self.bits if isinstance(self.bits, int) else config.width_parameters[self.bits]

    def legal_range(self, config: HardwareConfig) -> tuple[int, int]:
        width = self.width(config)
        low, high = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if self.signed else (0, (1 << width) - 1)
        if self.minimum is not None:
            low = max(low, self.minimum)
        if self.maximum is not None:
            high = min(high, self.maximum)
        return low, high

    def legal_values(self) -> tuple[IntEnum, ...] | None:
        if self.choices is None:
            return None
        return tuple(self.choices)


@dataclass(frozen=True)
class CommandSpec:
    opcode: Opcode
    unit: Unit | None          # None: may sit in any queue (FINISH)
    summary: str
    semantics: str             # pseudo-code of what the command does (rendered in docs/isa.md)
    fields: tuple[Field, ...]

    def layout(self, config: HardwareConfig) -> tuple[tuple[Field, int, int], ...]:
        """(field, bit offset, width) for the header and every field, packed upwards from bit 0."""
        return _command_layout(self, config)


@functools.lru_cache(maxsize=None)
def _command_layout(spec: CommandSpec, config: HardwareConfig) -> tuple[tuple[Field, int, int], ...]:
    placed, offset = [], 0
    for fld in HEADER_FIELDS + spec.fields:
        width = fld.width(config)
        placed.append((fld, offset, width))
        offset += width
    if offset > COMMAND_BITS:
        raise ValueError(f"command {spec.opcode.name} needs {offset} bits with this configuration, "
                         f"more than COMMAND_BITS = {COMMAND_BITS}")
    return tuple(placed)


OPCODE_BITS = 4
HEADER_FIELDS: tuple[Field, ...] = (
    Field("opcode", OPCODE_BITS, "which command (Opcode); 0 is reserved", choices=Opcode),
    Field("pop", len(Unit), "bit u set: wait for and take one token from the queue unit u -> this unit"),
    Field("push", len(Unit), "bit u set: after executing, put one token into the queue this unit -> unit u"),
)

DIM_BITS = 12                 # tile heights, widths and channel counts: 1 .. 4095
KERNEL_BITS = 4               # kernel sizes 1 .. 15
STEP_BITS = 3                 # strides and dilations 1 .. 7
PAD_BITS = 4                  # DMA padding per side 0 .. 15
RUN_BITS = 16                 # DMA element counts per dimension
STRIDE_BYTES_BITS = 24        # DRAM strides in bytes
COUNT_BITS = 20               # element counts of vector commands
ZERO_POINT_BITS = 16          # signed: holds a zero point or clamp bound of every element type (DType)
WDEC_LENGTH_BITS = 24         # compressed stream length in bytes

_DTYPE = dict(bits=2, choices=DType)


def _dims(*names_meanings: tuple[str, str], bits: int = DIM_BITS) -> tuple[Field, ...]:
    return tuple(Field(name, bits, meaning, minimum=1) for name, meaning in names_meanings)


def _requant_fields(prefix: str, what: str) -> tuple[Field, ...]:
    return (Field(f"{prefix}multiplier", MULTIPLIER_BITS, f"multiplier M of {what}"),
            Field(f"{prefix}shift", SHIFT_BITS, f"right shift N of {what}", maximum=SHIFT_MAX))


_DMA_SHAPE = (
    Field("elem_type", **_DTYPE, meaning="element type (its size sets the element width; pad value type)"),
    *_dims(("y_size", "rows copied"), ("x_size", "columns per row"), ("run", "elements per column (contiguous)"),
           bits=RUN_BITS),
    Field("dram_y_stride", STRIDE_BYTES_BITS, "bytes between rows in DRAM"),
    Field("dram_x_stride", STRIDE_BYTES_BITS, "bytes between columns in DRAM"),
)

COMMANDS: dict[Opcode, CommandSpec] = {spec.opcode: spec for spec in (
    CommandSpec(
        Opcode.LOAD, Unit.LOAD, "strided DMA from DRAM into an on-chip buffer, with padding",
        "for y, x in (y_size+pad_top+pad_bottom) x (x_size+pad_left+pad_right):\n"
        "    dst[y][x][0:run] = pad_value if (y, x) lies in the padding else\n"
        "        DRAM[dram_addr + (y-pad_top)*dram_y_stride + (x-pad_left)*dram_x_stride][0:run]\n"
        "dst is dense in `buffer` starting at byte sram_addr",
        (Field("buffer", 3, "destination buffer", choices=LOADABLE_BUFFERS),
         Field("sram_addr", "sram_addr_bits", "destination byte address in the buffer"),
         Field("dram_addr", "dram_addr_bits", "source byte address in DRAM"),
         *_DMA_SHAPE,
         Field("pad_top", PAD_BITS, "padding rows before"), Field("pad_bottom", PAD_BITS, "padding rows after"),
         Field("pad_left", PAD_BITS, "padding columns before"), Field("pad_right", PAD_BITS, "padding columns after"),
         Field("pad_value", ZERO_POINT_BITS, "value written into padding (e.g. the input zero point)", signed=True))),
    CommandSpec(
        Opcode.STORE, Unit.STORE, "strided DMA from the output buffer to DRAM",
        "for y, x in y_size x x_size:\n"
        "    DRAM[dram_addr + y*dram_y_stride + x*dram_x_stride][0:run] = OUT[sram_addr + ((y*x_size)+x)*run*elem]",
        (Field("sram_addr", "out_addr_bits", "source byte address in the output buffer"),
         Field("dram_addr", "dram_addr_bits", "destination byte address in DRAM"),
         *_DMA_SHAPE)),
    CommandSpec(
        Opcode.CONV, Unit.CONV, "one convolution (or matmul: 1x1 kernel) tile on the MAC array",
        "x = ACT[in_addr] as [in_h][in_w][in_c] in_type (already padded by LOAD)\n"
        "w = WEIGHT[wgt_addr] as int8 [out_c][k_h][k_w][in_c/groups]\n"
        "out_h = (in_h - dilation_h*(k_h-1) - 1) // stride_h + 1   (same for out_w)\n"
        "r = conv2d(x - in_zero_point, w - w_zero_point, stride, dilation, groups)  as int32 [out_h][out_w][out_c]\n"
        "ACC[acc_addr] = r            if accumulate == 0\n"
        "ACC[acc_addr] += r           if accumulate == 1   (int32; overflow is an error)",
        (Field("in_addr", "act_addr_bits", "input tile byte address in the activation buffer"),
         *_dims(("in_h", "input tile rows (incl. padding)"), ("in_w", "input tile columns (incl. padding)"),
                ("in_c", "input tile channels")),
         Field("in_type", 2, "input element type", choices=(DType.INT8, DType.UINT8)),
         Field("in_zero_point", MAC_OPERAND_BITS, "input zero point", signed=True),
         Field("wgt_addr", "weight_addr_bits", "weight byte address in the weight buffer"),
         Field("w_zero_point", 8, "weight zero point", signed=True),
         *_dims(("out_c", "output channels of this tile")),
         *_dims(("k_h", "kernel rows"), ("k_w", "kernel columns"), bits=KERNEL_BITS),
         *_dims(("stride_h", "vertical stride"), ("stride_w", "horizontal stride"),
                ("dilation_h", "vertical dilation"), ("dilation_w", "horizontal dilation"), bits=STEP_BITS),
         *_dims(("groups", "channel groups (in_c and out_c divisible by it; depthwise: groups = in_c)")),
         Field("acc_addr", "acc_addr_bits", "accumulator entry address of the [out_h][out_w][out_c] result"),
         Field("accumulate", 1, "0: overwrite the accumulators, 1: add to them"))),
    CommandSpec(
        Opcode.REQUANT, Unit.REQUANT, "requantize int32 accumulators into the output buffer",
        "p = PARAM[param_index + c] for channel c\n"
        "y = requantize(ACC[acc_addr] as [pixels][channels] + p.bias, p.multiplier, p.shift, rounding,\n"
        "               out_zero_point, clamp to [qmin, qmax], leaky: negatives use p.negative_*)\n"
        "    or, if mode == FLOAT32, requantize_float32(acc + p.bias, p.scale, out_zero_point, qmin, qmax)\n"
        "OUT[out_addr] = y as [pixels][channels] out_type",
        (Field("acc_addr", "acc_addr_bits", "accumulator entry address"),
         Field("out_addr", "out_addr_bits", "output byte address in the output buffer"),
         *_dims(("pixels", "pixels (rows of the [pixels][channels] tile)"), bits=RUN_BITS),
         *_dims(("channels", "channels of the tile")),
         Field("param_index", "param_addr_bits", "first parameter record (one per channel)"),
         Field("out_type", **_DTYPE, meaning="output element type"),
         Field("out_zero_point", ZERO_POINT_BITS, "output zero point", signed=True),
         Field("qmin", ZERO_POINT_BITS, "lower clamp bound (output domain)", signed=True),
         Field("qmax", ZERO_POINT_BITS, "upper clamp bound (output domain)", signed=True),
         Field("mode", 2, "NATIVE: M/2^N; FLOAT32: the record's float32 scale", choices=RequantMode),
         Field("rounding", 2, "rounding of the right shift (NATIVE mode)", choices=Rounding),
         Field("leaky", 1, "NATIVE: 1 = negative sums use the record's negative multiplier/shift"))),
    CommandSpec(
        Opcode.LUT, Unit.LUT, "table-lookup activation on a vector of elements",
        "x = src_buf[src_addr] as count elements of in_type; T = LUT[table_addr] as int16 entries\n"
        "DIRECT8  (in_type INT8/UINT8): OUT[dst_addr] = T[raw byte of x] as out_type (256 entries)\n"
        "INTERP16 (in_type INT16): u = clamp(x - input_min, 0, 2^(table_log2+index_shift)),\n"
        "    i = u >> index_shift, OUT[dst_addr] = clamp(T[i] + round((T[i+1]-T[i]) * frac / 2^index_shift),\n"
        "    qmin, qmax) as out_type   (2^table_log2 + 1 entries)",
        (Field("src_buf", 3, "source buffer", choices=VECTOR_SOURCE_BUFFERS),
         Field("src_addr", "sram_addr_bits", "source byte address"),
         Field("dst_addr", "out_addr_bits", "destination byte address in the output buffer (may equal the source)"),
         *_dims(("count", "elements"), bits=COUNT_BITS),
         Field("mode", 1, "lookup mode", choices=LutMode),
         Field("in_type", **_DTYPE, meaning="input element type"),
         Field("out_type", **_DTYPE, meaning="output element type (table entries must fit it)"),
         Field("table_addr", "lut_addr_bits", "table byte address in the LUT memory"),
         Field("table_log2", 4, f"INTERP16: table of 2^table_log2 + 1 entries ({LUT16_INDEX_BITS_MIN}.."
               f"{LUT16_INDEX_BITS_MAX}); DIRECT8: 0", maximum=LUT16_INDEX_BITS_MAX),
         Field("index_shift", 5, "INTERP16: input LSBs interpolated between entries", maximum=16),
         Field("input_min", ZERO_POINT_BITS, "INTERP16: input value of the first entry", signed=True),
         Field("qmin", ZERO_POINT_BITS, "INTERP16: lower clamp bound", signed=True),
         Field("qmax", ZERO_POINT_BITS, "INTERP16: upper clamp bound", signed=True))),
    CommandSpec(
        Opcode.POOL, Unit.POOL, "max or average pooling of an [in_h][in_w][channels] tile",
        "x = src_buf[src_addr] as [in_h][in_w][channels] dtype\n"
        "OUT[dst_addr] = max_pool2d(x, kernel, stride, padding, dilation)                     if mode == MAX\n"
        "OUT[dst_addr] = avg_pool2d(x, kernel, stride, padding, count_include_pad, zero_point, rounding)\n"
        "                                                                                     if mode == AVG\n"
        "output layout [out_h][out_w][channels]",
        (Field("src_buf", 3, "source buffer", choices=VECTOR_SOURCE_BUFFERS),
         Field("src_addr", "sram_addr_bits", "source byte address"),
         Field("dst_addr", "out_addr_bits", "destination byte address in the output buffer"),
         *_dims(("in_h", "input rows"), ("in_w", "input columns"), ("channels", "channels")),
         Field("dtype", **_DTYPE, meaning="element type of input and output"),
         Field("mode", 1, "pooling mode", choices=PoolMode),
         *_dims(("k_h", "window rows"), ("k_w", "window columns"), bits=KERNEL_BITS),
         *_dims(("stride_h", "vertical stride"), ("stride_w", "horizontal stride"),
                ("dilation_h", "vertical dilation (MAX)"), ("dilation_w", "horizontal dilation (MAX)"),
                bits=STEP_BITS),
         Field("pad_top", PAD_BITS, "padding rows before"), Field("pad_left", PAD_BITS, "padding columns before"),
         Field("pad_bottom", PAD_BITS, "padding rows after"), Field("pad_right", PAD_BITS, "padding columns after"),
         Field("count_include_pad", 1, "AVG: 1 = divide by the full window, 0 = by the taps inside"),
         Field("zero_point", ZERO_POINT_BITS, "AVG: input (= output) zero point", signed=True),
         Field("rounding", 2, "AVG: rounding of the division", choices=Rounding))),
    CommandSpec(
        Opcode.ELTWISE, Unit.POOL, "element-wise add/sub/max/min/mul of two rescaled operands, or one rescale",
        "a = a_buf[a_addr] as count a_type; b likewise (RESCALE ignores b: its fields must be 0)\n"
        "ADD/SUB/MAX/MIN: OUT[dst_addr] = eltwise(op, a, b, (a_multiplier, b_multiplier), (a_shift, b_shift),\n"
        "                 zero points, rounding, out_zero_point, clamp [qmin, qmax]) as out_type\n"
        "MUL: one multiplier/shift (a_*); RESCALE: concat branch round((a - a_zero_point) * M / 2^N) + zp_out",
        (Field("op", 3, "operation", choices=EltwiseOp),
         Field("a_buf", 3, "operand a buffer", choices=VECTOR_SOURCE_BUFFERS),
         Field("a_addr", "sram_addr_bits", "operand a byte address"),
         Field("b_buf", 3, "operand b buffer", choices=VECTOR_SOURCE_BUFFERS),
         Field("b_addr", "sram_addr_bits", "operand b byte address"),
         Field("dst_addr", "out_addr_bits", "destination byte address in the output buffer"),
         *_dims(("count", "elements"), bits=COUNT_BITS),
         Field("a_type", 2, "operand a type", choices=(DType.INT8, DType.UINT8)),
         Field("b_type", 2, "operand b type", choices=(DType.INT8, DType.UINT8)),
         Field("out_type", **_DTYPE, meaning="output type"),
         Field("a_zero_point", MAC_OPERAND_BITS, "operand a zero point", signed=True),
         Field("b_zero_point", MAC_OPERAND_BITS, "operand b zero point", signed=True),
         Field("out_zero_point", ZERO_POINT_BITS, "output zero point", signed=True),
         *_requant_fields("a_", "operand a (MUL: of the product)"),
         *_requant_fields("b_", "operand b"),
         Field("rounding", 2, "rounding of the shift", choices=Rounding),
         Field("qmin", ZERO_POINT_BITS, "lower clamp bound", signed=True),
         Field("qmax", ZERO_POINT_BITS, "upper clamp bound", signed=True))),
    CommandSpec(
        Opcode.WDEC, Unit.WDEC, "decode one layer's compressed weight stream into the weight buffer",
        "w = decode(DRAM[dram_addr : dram_addr + length])   one layer's bare nnc() stream (T/AI 115.1-2021\n"
        "    chapter 10) holding the integer levels of an [out_c][in_c][k_h][k_w] tensor (codec/, per layer)\n"
        "WEIGHT[wgt_addr] = w transposed to [out_c][k_h][k_w][in_c] as int8   (levels outside int8: error)",
        (Field("dram_addr", "dram_addr_bits", "compressed stream byte address in DRAM"),
         *_dims(("length", "compressed stream length in bytes"), bits=WDEC_LENGTH_BITS),
         Field("wgt_addr", "weight_addr_bits", "destination byte address in the weight buffer"),
         *_dims(("out_c", "output channels"), ("in_c", "input channels per group")),
         *_dims(("k_h", "kernel rows"), ("k_w", "kernel columns"), bits=KERNEL_BITS))),
    CommandSpec(
        Opcode.FINISH, None, "end of program: executes once every other queue is empty",
        "wait for the popped tokens and for all other queues to drain; then the device reports done.\n"
        "A program has exactly one FINISH, the last command of its queue; it may not push tokens.",
        (Field("unit", 3, "the queue this FINISH sits in", choices=Unit),)),
)}

DEFAULT = HardwareConfig()
