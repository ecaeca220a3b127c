"""The single source of truth for the AIPU's numbers: arithmetic widths, element and record types, buffers
and the hardware configuration. The command set built on them is :mod:`aipu.sim.machine.isa`.

Golden model, interpreter, cycle model, RTL and compiler import their numbers from here and never
restate them; a numpy type that stores a width is derived from it here. docs/arithmetic.md explains the
arithmetic constants; docs/isa.md is generated from this module and the command tables.
"""
from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import IntEnum
from functools import cached_property
from pathlib import Path

import numpy as np

from aipu.sim.machine.errors import InputError

# --- Arithmetic contract constants (docs/arithmetic.md) ---------------------------------------------
ACC_BITS = 32                 # MAC accumulator: signed int32; the golden model raises on overflow
BIAS_BITS = 32                # per-output-channel bias, signed int32
REQUANT_SUM_BITS = 33         # acc + bias is formed one bit wider, so it never wraps
MULTIPLIER_BITS = 16          # requant multiplier M: unsigned, 0 .. 2**16 - 1
SHIFT_BITS = 6                # requant shift N field width
SHIFT_MAX = 47                # N in 0 .. SHIFT_MAX (rounding right shift)
MAC_OPERAND_BITS = 9          # MAC operands are (value - zero point): signed 9 bit, -255 .. 255
REQUANT_PRODUCT_BITS = REQUANT_SUM_BITS + MULTIPLIER_BITS  # (acc + bias) * M, signed 49 bit
REQUANT_DUAL_BITS = REQUANT_PRODUCT_BITS + 1  # dual planes: (a1 + bias) * M + a2 * M2, signed 50 bit
TFLITE_MULTIPLIER_BITS = 31   # optional TFLite-compatible requant: Q0.31 multiplier in [2**30, 2**31)
ELTWISE_SUM_BITS = 48         # eltwise add/sub/max/min: sum of the two aligned, rescaled inputs
LUT8_ENTRIES = 256            # direct table, indexed by the raw input byte
LUT_ENTRY_BITS = 16           # LUT entries are signed 16 bit (int8/uint8 tables are a subset)
LUT16_INDEX_BITS_MIN = 1      # wide LUT: 2**k + 1 entries, k in MIN .. MAX, linear interpolation
LUT16_INDEX_BITS_MAX = 10
LUT16_INPUT_BITS = 16         # wide LUT input: signed 16 bit; up to all of its bits are interpolated
SOFTMAX_EXP_BITS = 20         # softmax exp table: unsigned entries <= 2**20 (whitepaper §4.66), the row max's entry
SOFTMAX_ENTRY_BYTES = 4       # one exp-table entry in LUT memory: little-endian uint32
SOFTMAX_SUM_BITS = 32         # the row's sum of table entries: unsigned 32 bit (Zhouyi whitepaper §4.66)
# elements per row: the most whose sum of entries fits the sum, 4095 (whitepaper §4.66 says 4096, which can wrap)
SOFTMAX_LENGTH_MAX = ((1 << SOFTMAX_SUM_BITS) - 1) >> SOFTMAX_EXP_BITS
SOFTMAX_SHIFT_MAX = 30        # N of the softmax M/2^N: the divisor sum * 2**N stays below 2**62


def bit_range(bits: int, signed: bool) -> tuple[int, int]:
    """The integers a ``bits``-wide field holds (two's complement when ``signed``)."""
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def storage_dtype(bits: int, signed: bool) -> np.dtype:
    """The little-endian numpy integer of 1, 2, 4 or 8 bytes that stores a ``bits``-wide value."""
    nbytes = 1 << max(0, (bits - 1).bit_length() - 3)
    return np.dtype(f"<{'i' if signed else 'u'}{nbytes}")


MAC_OPERAND_MAX = bit_range(MAC_OPERAND_BITS, signed=True)[1]      # |value - zero point| of 8-bit data
MULTIPLIER_MAX = bit_range(MULTIPLIER_BITS, signed=False)[1]
ACC_DTYPE = storage_dtype(ACC_BITS, signed=True)                    # an accumulator, in ACC and in numpy
BIAS_DTYPE = storage_dtype(BIAS_BITS, signed=True)
LUT_ENTRY_DTYPE = storage_dtype(LUT_ENTRY_BITS, signed=True)        # a table entry in LUT memory
SOFTMAX_TABLE_DTYPE = storage_dtype(8 * SOFTMAX_ENTRY_BYTES, signed=False)   # a softmax exp-table entry


# --- Hardware configuration (docs/isa.md, "Hardware configuration") ---------------------------------
# The configurable machine. Widths that depend on it (addresses) are computed from it, never restated.

def _key(doc: str, default: int, maximum: int, power_of_two: bool = False, minimum: int = 1):
    """A configuration key: default, meaning and legal range minimum .. maximum (rendered in docs/isa.md),
    and whether it must be 2**n. The maxima keep a hostile configuration from allocating or looping
    without bound; each is far above any machine this model describes."""
    return field(default=default, metadata={"doc": doc, "minimum": minimum, "maximum": maximum,
                                            "power_of_two": power_of_two})


MAC_DIM_MAX = 4096                 # rows/cols of the MAC array: a CONV tile has at most 4095 channels
BUFFER_BYTES_MAX = 1 << 26         # 64 MiB per on-chip buffer (the interpreter allocates every buffer)
PORT_BYTES_MAX = 4096              # bytes per cycle of a buffer port or of the DMA
DRAM_ADDRESS_BITS_MAX = 48
CONFIG_FILE_BYTES_MAX = 1 << 16    # a configuration is a few hundred bytes; larger files are refused
WDEC_MAX_PARTS = 64                # parts of one WDEC stream (docs/codec.md section 11), and WDEC's part decoders


@dataclass(frozen=True)
class MacArrayConfig:
    """The MAC array: each cycle it reduces ``rows`` input channels of one kernel tap of one output
    pixel against ``rows x cols`` weights and adds the products into ``cols`` output channels."""

    rows: int = _key("input channels reduced per cycle (one kernel tap, one output pixel)", 16, MAC_DIM_MAX)
    cols: int = _key("output channels produced per cycle", 16, MAC_DIM_MAX)

    def groups_per_block(self, group_in: int, group_out: int, lanes: int = 1) -> int:
        """Groups a block puts side by side on the array's diagonal: as many as fit both its ``lanes * rows``
        input channels (``group_in`` each) and its columns (``group_out`` each), at least one (whose channels
        are then cut into chunks)."""
        return max(1, min(lanes * self.rows // group_in, self.cols // group_out))

    def blocks(self, groups: int, group_in: int, group_out: int, taps: int, lanes: int = 1) -> int:
        """Weight blocks a CONV streams its pixels through (docs/rtl-conv.md, "Cycles"): per block of groups,
        per chunk of ``cols`` output channels, per kernel tap, per chunk of ``lanes * rows`` input channels
        (``lanes``: the products each MAC cell forms a cycle, :func:`mac_lanes`)."""
        return (-(-groups // self.groups_per_block(group_in, group_out, lanes)) * -(-group_out // self.cols) * taps
                * -(-group_in // (lanes * self.rows)))


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

    act: BufferConfig = _buffer("activation tiles read by CONV/POOL/ELTWISE/LUT (CONV with INT4 weights reads two "
                                "input channels a MAC row: 2 x rows bytes of int8 inputs a pixel)", 256 * 1024, 32)
    weight: BufferConfig = _buffer("int8 weights, or INT4 two a byte (one row of the array per cycle: rows x cols "
                                   "bytes)", 256 * 1024, 256)
    acc: BufferConfig = _buffer("int32 accumulators (cols x 4 bytes per cycle)", 64 * 1024, 64)
    out: BufferConfig = _buffer("quantized results waiting for STORE", 64 * 1024, 16)
    lut: BufferConfig = _buffer("activation tables (int16 entries)", 4 * 1024, 4)
    param: BufferConfig = _buffer("per-channel requant records", 8 * 1024, 16)


@dataclass(frozen=True)
class DramConfig:
    address_bits: int = _key("width of DRAM byte addresses in commands", 32, DRAM_ADDRESS_BITS_MAX)
    bytes_per_cycle: int = _key("sustained DMA bandwidth", 16, PORT_BYTES_MAX, power_of_two=True)
    latency_cycles: int = _key("cycles from a DMA request to its first data (the NPU's AXI read: 2 in its bridge, "
                               "1 in DRAM at least)", 100, 1 << 20, minimum=3)


@dataclass(frozen=True)
class QueueConfig:
    command_depth: int = _key("commands buffered per unit queue", 64, 1 << 16)
    token_depth: int = _key("tokens one dependency-token queue holds before its producer stalls", 8, 1 << 16)


@dataclass(frozen=True)
class WdecConfig:
    bins_per_cycle: int = _key("bins of one leaf the weight decoder's engine resolves per cycle, a cascade of that "
                               "many decision stages (the RTL needs a DRAM word to hold every stage's bits: "
                               "docs/rtl-wdec.md)", 1, 4, power_of_two=True)
    engines: int = _key("the weight decoder's part decoders: a stream of K <= engines parts (the compiler's choice) "
                        "decodes on K of them at once, sharing WDEC's DRAM and WEIGHT ports", 1, WDEC_MAX_PARTS)


@dataclass(frozen=True)
class HardwareConfig:
    """The configurable machine. Load with :func:`load_hardware_config`; ``DEFAULT`` is the reference."""

    mac: MacArrayConfig = MacArrayConfig()
    buffers: BuffersConfig = BuffersConfig()
    dram: DramConfig = DramConfig()
    queues: QueueConfig = QueueConfig()
    wdec: WdecConfig = WdecConfig()
    clock_mhz: int = _key("clock frequency in MHz", 800, 100_000)

    def __post_init__(self) -> None:
        _validate_dataclass(self, "")
        if self.buffers.param.bytes < PARAM_RECORD_BYTES:
            raise InputError("buffers.param.bytes", self.buffers.param.bytes,
                             f"at least {PARAM_RECORD_BYTES}, one parameter record")
        for buffer in Buffer:   # a port delivers whole words of the buffer
            if self.buffer(buffer).port_bytes > self.buffer(buffer).bytes:
                key = f"buffers.{buffer.name.lower()}.port_bytes"
                raise InputError(key, self.buffer(buffer).port_bytes,
                                 f"at most the buffer's {self.buffer(buffer).bytes} bytes")
        for buffer in BANKED_BUFFERS:   # two banks, each of two word-interleaved SRAMs
            words = self.buffer(buffer).bytes // self.buffer(buffer).port_bytes
            if words < BANKS * SUBBANKS:
                key = f"buffers.{buffer.name.lower()}"
                raise InputError(f"{key}.bytes", self.buffer(buffer).bytes,
                                 f"at least {BANKS * SUBBANKS} words of {key}.port_bytes = "
                                 f"{self.buffer(buffer).port_bytes} (two banks of two interleaved SRAMs)")
        if self.buffers.acc.bytes < ACC_DTYPE.itemsize:
            raise InputError("buffers.acc.bytes", self.buffers.acc.bytes,
                             f"at least {ACC_DTYPE.itemsize}, one accumulator")

    # Derived quantities: the only place address widths come from.
    def buffer(self, buffer: Buffer) -> BufferConfig:
        return getattr(self.buffers, buffer.name.lower())

    def buffer_units(self, buffer: Buffer) -> int:
        """How many addressable units the buffer has (bytes, int32 entries or parameter records)."""
        return self.buffer(buffer).bytes // BUFFER_UNIT_BYTES[buffer]

    def bank_bytes(self, buffer: Buffer) -> int:
        """Bytes of one bank of ``buffer`` (docs/isa.md, "Banks"): half the buffer if it is banked."""
        return self.buffer(buffer).bytes // (BANKS if buffer in BANKED_BUFFERS else 1)

    def banks(self, buffer: Buffer, start: int, end: int) -> range:
        """The banks of ``buffer`` that bytes ``start`` (inclusive) to ``end`` (exclusive) touch."""
        size = self.bank_bytes(buffer)
        return range(start // size, (end - 1) // size + 1) if end > start else range(0)

    def address_bits(self, buffer: Buffer) -> int:
        return (self.buffer_units(buffer) - 1).bit_length()

    @cached_property       # every field check of every command asks; the configuration is frozen
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
        return short_hash(self.to_dict())


def short_hash(document) -> str:
    """16 hex digits of the SHA-256 of ``document`` as canonical JSON: a stable fingerprint that a
    program file's header records (of the configuration, and of the command layout in isa.py)."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _validate_dataclass(obj, prefix: str) -> None:
    """Every leaf is an int in its minimum .. maximum (a power of two where the field says so); errors name
    the full key."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        key = prefix + f.name
        if is_dataclass(f.default):
            if type(value) is not type(f.default):
                raise InputError(key, value, "expected a table")
            _validate_dataclass(value, key + ".")
            continue
        minimum, maximum = f.metadata["minimum"], f.metadata["maximum"]
        if not isinstance(value, int) or isinstance(value, bool):
            raise InputError(key, value, f"expected an integer {minimum} .. {maximum}")
        if value <= 0:
            raise InputError(key, value, "must be positive")
        if value < minimum:
            raise InputError(key, value, f"at least {minimum}")
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

# --- Buffers, element types and the parameter record ------------------------------------------------
class Buffer(IntEnum):
    ACT = 0       # activations: CONV/POOL/ELTWISE/LUT inputs, layout [rows][cols][channels]
    WEIGHT = 1    # int8 weights, layout [out_c][k_h][k_w][in_c / groups]
    ACC = 2       # int32 accumulators, addressed in entries, layout [pixels][channels]
    OUT = 3       # quantized results waiting for STORE, layout [pixels][channels]
    LUT = 4       # activation tables
    PARAM = 5     # per-output-channel requant records (PARAM_RECORD), addressed in records


class DType(IntEnum):
    """Element types of activations, weights and outputs. A whole-byte member's lower-case name is its numpy
    type; INT4 is signed 4-bit, two elements a byte (docs/arithmetic.md §3.1, D23): only the MAC array's
    operands (CONV's in_type and w_type) take it."""

    INT8 = 0
    UINT8 = 1
    INT16 = 2
    INT4 = 3


BYTE_TYPES = (DType.INT8, DType.UINT8, DType.INT16)          # whole bytes an element: every unit's types
DTYPE_NUMPY = {dtype: np.dtype(dtype.name.lower()).newbyteorder("<") for dtype in BYTE_TYPES}   # as stored
DTYPE_BYTES = {dtype: numpy_type.itemsize for dtype, numpy_type in DTYPE_NUMPY.items()}
DTYPE_BITS = {**{dtype: 8 * size for dtype, size in DTYPE_BYTES.items()}, DType.INT4: 4}
INT4_MIN, INT4_MAX = bit_range(DTYPE_BITS[DType.INT4], signed=True)


def dtype_bounds(dtype: DType) -> tuple[int, int]:
    """The smallest and largest value of an element of ``dtype``."""
    if dtype == DType.INT4:
        return INT4_MIN, INT4_MAX
    info = np.iinfo(DTYPE_NUMPY[dtype])
    return int(info.min), int(info.max)


def elements_bytes(count: int, dtype: DType) -> int:
    """The bytes ``count`` elements of ``dtype`` take (INT4: two a byte, an odd count's last byte half used)."""
    return -(-count * DTYPE_BITS[DType(dtype)] // 8)


def mac_lanes(w_type: DType) -> int:
    """Products each MAC cell forms a cycle: two with INT4 weights (the cell's 8-bit weight register holds two
    4-bit weights, each multiplying its own input channel: docs/arithmetic.md D23), else one."""
    return 2 if w_type == DType.INT4 else 1


def unpack_int4(packed: np.ndarray) -> np.ndarray:
    """INT4 bytes -> their elements as int8, twice as many along the last axis: element 2i is the low nibble of
    byte i, element 2i + 1 the high one (ONNX's order), each sign-extended from its bit 3."""
    raw = np.asarray(packed).view(np.uint8)
    nibbles = np.stack((raw & 0xF, raw >> 4), axis=-1).reshape(*raw.shape[:-1], 2 * raw.shape[-1])
    return ((nibbles ^ 8).astype(np.int8) - 8)


def pack_int4(values: np.ndarray) -> np.ndarray:
    """:func:`unpack_int4`'s inverse: values in INT4_MIN .. INT4_MAX, an even count along the last axis ->
    uint8 bytes (ValueError naming the first value outside, or an odd count)."""
    values = np.asarray(values)
    if values.shape[-1:] and values.shape[-1] % 2:
        raise ValueError(f"INT4 elements pack two a byte: the last axis holds {values.shape[-1]}, an odd count")
    outside = (values < INT4_MIN) | (values > INT4_MAX)
    if outside.any():
        raise ValueError(f"value {int(values[outside].flat[0])} is outside INT4's {INT4_MIN} .. {INT4_MAX}")
    nibbles = values.astype(np.uint8) & 0xF
    return nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)

# Codebook weights (docs/quantization.md, "Codebook weights on chip"): a LOAD into WEIGHT may carry each weight
# as an index of 1, 2 or 4 bits into a codebook of 2**bits int8 entries in LUT memory, indices packed like INT4
# elements (the first in the low bits of a byte), and writes every index's entry.
CODEBOOK_INDEX_BITS = (1, 2, 4)


def unpack_indices(packed: np.ndarray, bits: int) -> np.ndarray:
    """Bytes holding ``8 // bits`` indices each -> the indices as uint8, that many times as many along the last
    axis: index ``k * i + j`` is bits ``j * bits`` .. ``(j + 1) * bits - 1`` of byte ``i`` (low bits first)."""
    raw = np.asarray(packed).view(np.uint8)
    per_byte = 8 // bits
    shifts = np.arange(per_byte, dtype=np.uint8) * bits
    indices = (raw[..., None] >> shifts) & ((1 << bits) - 1)
    return indices.reshape(*raw.shape[:-1], per_byte * raw.shape[-1]).astype(np.uint8)


def pack_indices(indices: np.ndarray, bits: int) -> np.ndarray:
    """:func:`unpack_indices`' inverse: indices below ``2**bits``, a multiple of ``8 // bits`` along the last
    axis -> uint8 bytes (ValueError naming the first index outside, or the count)."""
    indices = np.asarray(indices)
    per_byte = 8 // bits
    if indices.shape[-1:] and indices.shape[-1] % per_byte:
        raise ValueError(f"{bits}-bit indices pack {per_byte} a byte: the last axis holds {indices.shape[-1]}")
    outside = (indices < 0) | (indices >= 1 << bits)
    if outside.any():
        raise ValueError(f"index {int(indices[outside].flat[0])} is outside 0 .. {(1 << bits) - 1}")
    grouped = indices.astype(np.uint8).reshape(*indices.shape[:-1], -1, per_byte)
    return np.bitwise_or.reduce(grouped << (np.arange(per_byte, dtype=np.uint8) * bits), axis=-1).astype(np.uint8)


# One parameter record per output channel: name, numpy type, meaning. Little-endian, packed.
PARAM_RECORD: tuple[tuple[str, np.dtype, str], ...] = (
    ("bias", BIAS_DTYPE, "bias added to the accumulator (BIAS_BITS, signed)"),
    ("multiplier", storage_dtype(MULTIPLIER_BITS, signed=False), "requant multiplier M (MULTIPLIER_BITS, unsigned)"),
    ("shift", storage_dtype(SHIFT_BITS, signed=False), "requant shift N, 0..SHIFT_MAX"),
    ("negative_shift", storage_dtype(SHIFT_BITS, signed=False),
     "shift used for negative values when the command's leaky flag is set"),
    ("negative_multiplier", storage_dtype(MULTIPLIER_BITS, signed=False),
     "multiplier used for negative values when the leaky flag is set"),
    ("reserved", storage_dtype(16, signed=False), "must be zero (pads the record to a power-of-two size)"),
    ("scale", np.dtype("<f4"), "float32 scale used instead of M/2^N when the command's mode is FLOAT32"),
)
PARAM_DTYPE = np.dtype([(name, numpy_type) for name, numpy_type, _ in PARAM_RECORD])   # one record
PARAM_RECORD_BYTES = PARAM_DTYPE.itemsize

# The buffers several units share are each built as BANKS banks, the halves of the buffer, each of SUBBANKS
# SRAMs holding the even and the odd words. Units of different commands that no token chain orders never
# use one bank (docs/isa.md, "Banks"), so that every SRAM has two ports at most.
BANKED_BUFFERS = (Buffer.ACT, Buffer.WEIGHT, Buffer.ACC, Buffer.OUT)
BANKS = 2
SUBBANKS = 2

BUFFER_UNIT_BYTES = {Buffer.ACT: 1, Buffer.WEIGHT: 1, Buffer.ACC: ACC_DTYPE.itemsize, Buffer.OUT: 1,
                     Buffer.LUT: 1, Buffer.PARAM: PARAM_RECORD_BYTES}


DEFAULT = HardwareConfig()
# Every size at its maximum: the widest address fields of any legal configuration (isa.py checks that
# every command still fits its word under it, so no configuration needs checking against the command set).
WIDEST = hardware_config_from_dict({"buffers": {buffer.name.lower(): {"bytes": BUFFER_BYTES_MAX} for buffer in Buffer},
                                    "dram": {"address_bits": DRAM_ADDRESS_BITS_MAX}})
