"""The command set: units, opcodes, every command's fields and their packing into one word.

Encoding, assembler, docs/isa.md (app/isa_doc.py), interpreter and RTL are driven by these tables; field
widths are written here or derived from :mod:`aipu.sim.machine.arch` (arithmetic widths, buffer addresses).
``ISA_LAYOUT_HASH`` fingerprints the packing, so a program file from another layout is refused.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import IntEnum

from aipu.sim.machine.arch import (BUFFER_UNIT_BYTES, CODEBOOK_INDEX_BITS, LUT8_ENTRIES, LUT16_INDEX_BITS_MAX,
                                LUT16_INDEX_BITS_MIN, LUT16_INPUT_BITS, MAC_OPERAND_BITS, MULTIPLIER_BITS, PARAM_RECORD,
                                SHIFT_BITS, SHIFT_MAX, SOFTMAX_EXP_BITS, SOFTMAX_LENGTH_MAX, SOFTMAX_SHIFT_MAX, WIDEST,
                                WDEC_MAX_PARTS, Buffer, BYTE_TYPES, DTYPE_BYTES, DType, HardwareConfig, bit_range, short_hash)

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
    SOFTMAX = 10
    DWCONV = 11


LOADABLE_BUFFERS = (Buffer.ACT, Buffer.WEIGHT, Buffer.LUT, Buffer.PARAM)
VECTOR_SOURCE_BUFFERS = (Buffer.ACT, Buffer.OUT)   # where LUT/POOL/ELTWISE read their operands


class IndexBits(IntEnum):
    """LOAD's DRAM bytes as they are (PLAIN) or as packed codebook indices of 1, 2 or 4 bits
    (docs/quantization.md, "Codebook weights on chip"); the value is the index width."""

    PLAIN = 0
    ONE = 1
    TWO = 2
    FOUR = 4


CIRC_LOG2_BITS = 2            # LOAD's block-circulant expansion: circ_size = 2**circ_log2, 1 (plain) .. 8
CIRC_SIZES = tuple(1 << exponent for exponent in range(1 << CIRC_LOG2_BITS))   # L of circ_log2 0, 1, ...
CIRC_SIGNS_MAX = 256          # a circulant LOAD's run: at most this many bytes, one sign bit each (LOAD's register)


if tuple(IndexBits)[1:] != CODEBOOK_INDEX_BITS:
    raise ValueError(f"IndexBits {tuple(IndexBits)[1:]} differ from arch.CODEBOOK_INDEX_BITS {CODEBOOK_INDEX_BITS}")


class Rounding(IntEnum):
    """Rounding of right shifts; names are the golden model's mode strings in upper case."""

    FLOOR = 0                 # plain arithmetic shift (the shift-quantization patent's S640)
    HALF_UP = 1               # add 2^(N-1) then floor (docs/arithmetic.md D2)
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
        low, high = bit_range(self.width(config), self.signed)
        if self.minimum is not None:
            low = max(low, self.minimum)
        if self.maximum is not None:
            high = min(high, self.maximum)
        return low, high

    def legal_values(self) -> tuple[IntEnum, ...] | None:
        if self.choices is None:
            return None
        return tuple(self.choices)

    @functools.cached_property       # asked for every field of every command a program validates
    def legal_ints(self) -> frozenset[int] | None:
        """The legal values of an enumerated field as plain integers (None: the field has a range)."""
        return None if self.choices is None else frozenset(int(value) for value in self.choices)


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

    def field(self, name: str) -> Field:
        return next(fld for fld in self.fields if fld.name == name)


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
# Token masks have a fixed width with room for more units, so adding a unit moves no other field. 12 leaves
# room for five more and keeps every command within COMMAND_BITS under every legal configuration (checked
# below; 16 would not fit ELTWISE with the largest buffers).
TOKEN_MASK_BITS = 12
if len(Unit) > TOKEN_MASK_BITS:
    raise ValueError(f"{len(Unit)} units do not fit the token masks of TOKEN_MASK_BITS = {TOKEN_MASK_BITS}")
HEADER_FIELDS: tuple[Field, ...] = (
    Field("opcode", OPCODE_BITS, "which command (Opcode); 0 is reserved", choices=Opcode),
    Field("pop", TOKEN_MASK_BITS, "bit u set: wait for and take one token from the queue unit u -> this unit "
          "(bits of no unit must be 0)"),
    Field("push", TOKEN_MASK_BITS, "bit u set: after executing, put one token into the queue this unit -> unit u "
          "(bits of no unit must be 0)"),
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
WDEC_PARTS_BITS = WDEC_MAX_PARTS.bit_length()   # WDEC's parts: 1 .. WDEC_MAX_PARTS parts of one stream
CODEBOOK_ADDR_BITS = 16       # LOAD's codebook slot: the first 2**16 slots of LUT memory (1 MiB) hold codebooks
CODEBOOK_SLOT_BYTES = 1 << max(CODEBOOK_INDEX_BITS)   # a codebook starts at a multiple of the largest one's size

_DTYPE = dict(bits=2, choices=BYTE_TYPES)


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
        "dst is dense in `buffer` starting at byte sram_addr\n"
        "index_bits = b > 0 (codebook weights): k = 8/b indices a DRAM byte, elem_type one byte, buffer WEIGHT,\n"
        "    run a multiple of k; the DRAM runs hold run/k bytes (strides count DRAM bytes) and\n"
        "    dst[y][x][i] = C[index i of the run's bytes, low bits first], C = LUT[16*codebook_addr] as 2^b int8\n"
        "circ_size = L = 2**circ_log2 > 1 (block-circulant weights): index_bits PLAIN, buffer WEIGHT,\n"
        "    one-byte elem_type, L <= dram.bytes_per_cycle, run a multiple of L and at most 256, dram_addr and both strides multiples\n"
        "    of L, no padding; DRAM row y becomes the L tile rows y*L + k (k < L), y_size*L rows in all:\n"
        "    dst[y*L+k][x][t] = s(t) * src[y][x][L*(t//L) + (t - k) mod L]   (each L-group rotated right by k)\n"
        "    s(t) = -1 where bit t (low bit first) of the bytes at LUT[16*codebook_addr] is 1, else +1;\n"
        "    the negation is in 8 bits (-(-128) = -128)",
        (Field("buffer", 3, "destination buffer", choices=LOADABLE_BUFFERS),
         Field("sram_addr", "sram_addr_bits", "destination byte address in the buffer"),
         Field("dram_addr", "dram_addr_bits", "source byte address in DRAM"),
         *_DMA_SHAPE,
         Field("pad_top", PAD_BITS, "padding rows before"), Field("pad_bottom", PAD_BITS, "padding rows after"),
         Field("pad_left", PAD_BITS, "padding columns before"), Field("pad_right", PAD_BITS, "padding columns after"),
         Field("pad_value", ZERO_POINT_BITS, "value written into padding (e.g. the input zero point)", signed=True),
         Field("index_bits", 3, "PLAIN: bytes as they are; 1, 2, 4: each DRAM byte holds 8/index_bits codebook "
               "indices", choices=IndexBits),
         Field("codebook_addr", CODEBOOK_ADDR_BITS, f"index_bits > 0: the codebook's LUT memory address in units "
               f"of {CODEBOOK_SLOT_BYTES} bytes; circ_size > 1: the sign bits' (ignored otherwise)"),
         Field("circ_log2", CIRC_LOG2_BITS, "circ_size L = 2**circ_log2; L > 1: each DRAM row expands to L "
               "block-circulant rows (docs/structured.md)"))),
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
        "w = WEIGHT[wgt_addr] as [out_c][k_h][k_w][in_c/groups] w_type\n"
        "    INT4: two elements a byte, the even channel in the low nibble; in_c/groups even;\n"
        "    INT4 inputs need INT4 weights\n"
        "out_h = (in_h - dilation_h*(k_h-1) - 1) // stride_h + 1   (same for out_w)\n"
        "r = conv2d(x - in_zero_point, w - w_zero_point, stride, dilation, groups)  as int32 [out_h][out_w][out_c]\n"
        "ACC[acc_addr] = r            if accumulate == 0\n"
        "ACC[acc_addr] += r           if accumulate == 1   (int32; overflow is an error)",
        (Field("in_addr", "act_addr_bits", "input tile byte address in the activation buffer"),
         *_dims(("in_h", "input tile rows (incl. padding)"), ("in_w", "input tile columns (incl. padding)"),
                ("in_c", "input tile channels")),
         Field("in_type", 2, "input element type", choices=(DType.INT8, DType.UINT8, DType.INT4)),
         Field("in_zero_point", MAC_OPERAND_BITS, "input zero point (within in_type's range)", signed=True),
         Field("wgt_addr", "weight_addr_bits", "weight byte address in the weight buffer"),
         Field("w_zero_point", 8, "weight zero point (within w_type's range)", signed=True),
         *_dims(("out_c", "output channels of this tile")),
         *_dims(("k_h", "kernel rows"), ("k_w", "kernel columns"), bits=KERNEL_BITS),
         *_dims(("stride_h", "vertical stride"), ("stride_w", "horizontal stride"),
                ("dilation_h", "vertical dilation"), ("dilation_w", "horizontal dilation"), bits=STEP_BITS),
         *_dims(("groups", "channel groups (in_c and out_c divisible by it; depthwise: groups = in_c)")),
         Field("acc_addr", "acc_addr_bits", "accumulator entry address of the [out_h][out_w][out_c] result"),
         Field("accumulate", 1, "0: overwrite the accumulators, 1: add to them"),
         Field("w_type", 2, "weight element type (INT4: two products per MAC cell a cycle)",
               choices=(DType.INT8, DType.INT4)))),
    CommandSpec(
        Opcode.DWCONV, Unit.CONV, "one depthwise convolution tile (channel multiplier 1), output-stationary on the "
        "MAC array",
        "the padded input tile by phase (row mod stride_h, column mod stride_w), each phase a dense plane:\n"
        "ph = ceil(in_h / stride_h), pw = ceil(in_w / stride_w)\n"
        "x[p + stride_h*i][q + stride_w*j][c] = WEIGHT[in_addr + (((p*stride_w + q)*ph + i)*pw + j)*channels + c]\n"
        "    as in_type   (p < stride_h, q < stride_w, i < ph, j < pw; already padded by LOAD; slots past\n"
        "    the tile are not read)\n"
        "w[c][ky][kx] = ACT[wgt_addr + (ky*k_w + kx)*channels + c] as int8   (tap-major)\n"
        "out_h = (in_h - dilation_h*(k_h-1) - 1) // stride_h + 1   (same for out_w)\n"
        "r = conv2d(x - in_zero_point, w - w_zero_point, stride, dilation, groups = channels)\n"
        "    as int32 [out_h][out_w][channels]\n"
        "ACC[acc_addr] = r            if accumulate == 0\n"
        "ACC[acc_addr] += r           if accumulate == 1   (int32)\n"
        "channels <= mac.rows, else the command faults naming channels",
        (Field("in_addr", "weight_addr_bits", "input tile byte address in the WEIGHT buffer (its wide port)"),
         *_dims(("in_h", "input tile rows (incl. padding)"), ("in_w", "input tile columns (incl. padding)"),
                ("channels", "channels of the tile, in and out (at most mac.rows)")),
         Field("in_type", 2, "input element type", choices=(DType.INT8, DType.UINT8)),
         Field("in_zero_point", MAC_OPERAND_BITS, "input zero point", signed=True),
         Field("wgt_addr", "act_addr_bits", "kernel byte address in the ACT buffer ([k_h][k_w][channels])"),
         Field("w_zero_point", 8, "weight zero point", signed=True),
         *_dims(("k_h", "kernel rows"), ("k_w", "kernel columns"), bits=KERNEL_BITS),
         *_dims(("stride_h", "vertical stride (the input's row phases)"),
                ("stride_w", "horizontal stride (the input's column phases)"),
                ("dilation_h", "vertical dilation"), ("dilation_w", "horizontal dilation"), bits=STEP_BITS),
         Field("acc_addr", "acc_addr_bits", "accumulator entry address of the [out_h][out_w][channels] result"),
         Field("accumulate", 1, "0: overwrite the accumulators, 1: add to them"))),
    CommandSpec(
        Opcode.REQUANT, Unit.REQUANT, "requantize int32 accumulators into the output buffer",
        "p = PARAM[param_index + c] for channel c\n"
        "y = requantize(ACC[acc_addr] as [pixels][channels] + p.bias, p.multiplier, p.shift, rounding,\n"
        "               out_zero_point, clamp to [qmin, qmax], leaky: negatives use p.negative_*)\n"
        "    or, if mode == FLOAT32, requantize_float32(acc + p.bias, p.scale, out_zero_point, qmin, qmax)\n"
        "    or, if dual == 1 (NATIVE, leaky 0, p.negative_shift 0): a1, a2 = ACC[acc_addr] as [pixels][channels][2],\n"
        "        u = rounding_shift_right((a1 + p.bias) * p.multiplier + a2 * p.negative_multiplier, p.shift,\n"
        "        rounding), then + out_zero_point and the clamp\n"
        "OUT[out_addr] = y as [pixels][channels] out_type\n"
        "    INT4: two elements a byte, the even channel in the low nibble; channels even",
        (Field("acc_addr", "acc_addr_bits", "accumulator entry address"),
         Field("out_addr", "out_addr_bits", "output byte address in the output buffer"),
         *_dims(("pixels", "pixels (rows of the [pixels][channels] tile)"), bits=RUN_BITS),
         *_dims(("channels", "channels of the tile")),
         Field("param_index", "param_addr_bits", "first parameter record (one per channel)"),
         Field("out_type", 2, "output element type (INT4: two a byte)", choices=(*BYTE_TYPES, DType.INT4)),
         Field("out_zero_point", ZERO_POINT_BITS, "output zero point", signed=True),
         Field("qmin", ZERO_POINT_BITS, "lower clamp bound (output domain)", signed=True),
         Field("qmax", ZERO_POINT_BITS, "upper clamp bound (output domain)", signed=True),
         Field("mode", 2, "NATIVE: M/2^N; FLOAT32: the record's float32 scale", choices=RequantMode),
         Field("rounding", 2, "rounding of the right shift (NATIVE mode)", choices=Rounding),
         Field("leaky", 1, "NATIVE: 1 = negative sums use the record's negative multiplier/shift"),
         Field("dual", 1, "NATIVE: 1 = two accumulator planes a channel, the second scaled by the record's "
               "negative multiplier (T/AI 115.1-2021 §7.2.3.3 dual INT4)"))),
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
         Field("index_shift", 5, "INTERP16: input LSBs interpolated between entries", maximum=LUT16_INPUT_BITS),
         Field("input_min", ZERO_POINT_BITS, "INTERP16: input value of the first entry", signed=True),
         Field("qmin", ZERO_POINT_BITS, "INTERP16: lower clamp bound", signed=True),
         Field("qmax", ZERO_POINT_BITS, "INTERP16: upper clamp bound", signed=True))),
    CommandSpec(
        Opcode.SOFTMAX, Unit.LUT, "softmax of each row of a [rows][length] tile (docs/arithmetic.md §6.4)",
        "x = src_buf[src_addr] as [rows][length] in_type; E = LUT[table_addr] as "
        f"{LUT8_ENTRIES} uint32 entries <= 2^{SOFTMAX_EXP_BITS}\n"
        "per row: m = max(x), S = sum(E[m - x]) (32-bit unsigned), D = S << shift\n"
        "OUT[dst_addr] = clamp((E[m - x] * multiplier + D // 2) // D + out_zero_point, qmin, qmax) as out_type",
        (Field("src_buf", 3, "source buffer", choices=VECTOR_SOURCE_BUFFERS),
         Field("src_addr", "sram_addr_bits", "source byte address"),
         Field("dst_addr", "out_addr_bits", "destination byte address in the output buffer (not overlapping the "
               "source)"),
         *_dims(("rows", "rows (softmax vectors)"), bits=RUN_BITS),
         Field("length", DIM_BITS, f"elements per row (1..{SOFTMAX_LENGTH_MAX})", minimum=1,
               maximum=SOFTMAX_LENGTH_MAX),
         Field("in_type", 2, "input element type", choices=(DType.INT8, DType.UINT8)),
         Field("out_type", **_DTYPE, meaning="output element type"),
         Field("table_addr", "lut_addr_bits", "exp table byte address in the LUT memory"),
         Field("multiplier", MULTIPLIER_BITS, "multiplier M of the output scale 1/s_y ~ M / 2^shift"),
         Field("shift", SHIFT_BITS, "shift N of the output scale", maximum=SOFTMAX_SHIFT_MAX),
         Field("out_zero_point", ZERO_POINT_BITS, "output zero point", signed=True),
         Field("qmin", ZERO_POINT_BITS, "lower clamp bound", signed=True),
         Field("qmax", ZERO_POINT_BITS, "upper clamp bound", signed=True))),
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
        "    chapter 10) in the npu profile (docs/codec.md section 11; `aipu codec encode --profile npu`)\n"
        "    holding the integer levels of an [out_c][in_c][k_h][k_w] tensor; a stream outside the\n"
        "    profile or corrupt is an error, at the element where it leaves the profile\n"
        "WEIGHT[wgt_addr] = w transposed to [out_c][k_h][k_w][in_c] as int8   (levels outside int8: error)\n"
        "parts > 1: the stream is `parts` little-endian u32 byte lengths, then that many parts back to back,\n"
        "    part i holding output channels [i*out_c/parts, (i+1)*out_c/parts) (rounded down): part 0 a\n"
        "    profile stream, the others continuation parts (of the headers only max_ctu3d_idx)",
        (Field("dram_addr", "dram_addr_bits", "compressed stream byte address in DRAM"),
         *_dims(("length", "compressed stream length in bytes"), bits=WDEC_LENGTH_BITS),
         Field("wgt_addr", "weight_addr_bits", "destination byte address in the weight buffer"),
         *_dims(("out_c", "output channels"), ("in_c", "input channels per group")),
         *_dims(("k_h", "kernel rows"), ("k_w", "kernel columns"), bits=KERNEL_BITS),
         Field("parts", WDEC_PARTS_BITS, "independently decodable parts of the stream (docs/codec.md section 11)",
               minimum=1, maximum=WDEC_MAX_PARTS))),
    CommandSpec(
        Opcode.FINISH, None, "end of program: executes once every other queue is empty",
        "wait for the popped tokens and for all other queues to drain; then the device reports done.\n"
        "A program has exactly one FINISH, the last command of its queue; it may not push tokens.",
        (Field("unit", 3, "the queue this FINISH sits in", choices=Unit),)),
)}

for _spec in COMMANDS.values():   # raises if a command outgrows its word under some legal configuration
    _spec.layout(WIDEST)


def load_expansion(command) -> int:
    """Tile bytes one DRAM byte of a DMA command becomes: ``8 // index_bits`` for a LOAD of codebook indices,
    else 1 (a STORE has no ``index_bits``)."""
    bits = command.args.get("index_bits", IndexBits.PLAIN)
    return 8 // bits if bits else 1


def circ_size(command) -> int:
    """The block size L of a LOAD's circulant expansion: ``2**circ_log2`` (1: a plain LOAD; a STORE has none)."""
    return 1 << command.args.get("circ_log2", 0)


def load_tile_rows(command) -> int:
    """The tile rows (without padding) a LOAD writes: ``y_size``, times ``circ_size`` for a circulant LOAD."""
    return command.y_size * circ_size(command)


def circ_sign_bytes(command) -> int:
    """The bytes of sign bits a circulant LOAD reads from LUT memory: one bit per byte of its run."""
    return -(-command.run // 8)


def dram_run_bytes(command) -> int:
    """The DRAM bytes of one run of a LOAD or STORE: ``run`` elements, packed ``load_expansion`` to a byte."""
    return command.run * DTYPE_BYTES[DType(command.elem_type)] // load_expansion(command)


def _layout_description() -> dict:
    """Everything that decides how a command word is packed and read, as plain data."""
    def members(fld: Field) -> list | None:
        return None if fld.choices is None else [[member.name, int(member)] for member in fld.legal_values()]

    return {"command_bits": COMMAND_BITS, "units": [[unit.name, int(unit)] for unit in Unit],
            "address_units": {buffer.name: BUFFER_UNIT_BYTES[buffer] for buffer in Buffer},
            "parameter_record": [[name, numpy_type.str] for name, numpy_type, _ in PARAM_RECORD],
            "commands": [{"opcode": [spec.opcode.name, int(spec.opcode)],
                          "unit": None if spec.unit is None else spec.unit.name,
                          "fields": [[fld.name, fld.bits, fld.signed, fld.minimum, fld.maximum, members(fld)]
                                     for fld in HEADER_FIELDS + spec.fields]}
                         for spec in COMMANDS.values()]}


# Recorded in every program file's header: a program packed under another layout is refused.
ISA_LAYOUT_HASH = short_hash(_layout_description())
