"""CONV's and DWCONV's cycles (docs/rtl-conv.md, "Cycles"): the schedules of the MAC array.

CONV, weight-stationary (``aipu.rtl.conv``): the command is cut into blocks (``MacArrayConfig.blocks``). While a
block's weights sit in one register bank, every output pixel streams through the array in ``beats`` cycles
(two ACT and two ACC words a cycle, so any byte alignment works), and the next block's ``cols`` weight columns
load into the other bank at ``weight_beats`` cycles each. A block lasts at least ``2 * beats + 1`` cycles, so a
pixel's accumulators are written back before the next block of the same chunk reads them.

DWCONV, output-stationary (docs/rtl-conv.md, "Depthwise dataflow"; ``aipu.rtl.conv`` too): each multiplier
accumulates one channel of one output position of a block of ``cols`` positions, one kernel tap a ``tap_beats``
step (the block's input run from WEIGHT, the tap's ``channels`` weights from ACT); a second accumulator bank
drains the previous block into ACC meanwhile.
"""
from __future__ import annotations

from dataclasses import dataclass

from aipu.sim.machine.arch import ACC_DTYPE, BUFFER_UNIT_BYTES, Buffer, DType, HardwareConfig, elements_bytes, mac_lanes
from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.program import Command

ENTRY_BYTES = ACC_DTYPE.itemsize
MAC_OPCODES = (Opcode.CONV, Opcode.DWCONV)      # the commands whose multiply-accumulates utilisation counts
SETUP_CYCLES = 2          # decode the tile geometry, then check it (faults are raised in the second cycle)


def _words_spanned(length: int, config: HardwareConfig, buffer: Buffer) -> int:
    """Worst-case number of port words ``length`` bytes touch, starting at any legal address of ``buffer``."""
    port = config.buffer(buffer).port_bytes
    worst_offset = port - min(port, BUFFER_UNIT_BYTES[buffer])
    return (worst_offset + length + port - 1) // port


def _beats(words: int) -> int:
    """Cycles to move ``words`` words through a pair of ports."""
    return (words + 1) // 2


@dataclass(frozen=True)
class ConvTiming:
    """The cycle constants of a configuration and operand types: cycles per output pixel and per weight column,
    and the products each MAC cell forms a cycle."""

    beats: int          # cycles per pixel: the ACT run of ``lanes * rows`` channels and the ACC run of ``cols``
    weight_beats: int   # cycles per weight column: a run of ``rows`` bytes (``lanes * rows`` weights)
    lanes: int = 1      # products per MAC cell a cycle (2 with INT4 weights, docs/arithmetic.md D23)

    @classmethod
    def of(cls, config: HardwareConfig, w_type: DType = DType.INT8, in_type: DType = DType.INT8) -> ConvTiming:
        lanes = mac_lanes(w_type)
        act_run = elements_bytes(lanes * config.mac.rows, in_type)
        act = _beats(_words_spanned(act_run, config, Buffer.ACT))
        return cls(max(act, acc_beats(config)), _beats(_words_spanned(config.mac.rows, config, Buffer.WEIGHT)), lanes)

    def block_cycles(self, config: HardwareConfig, pixels: int) -> int:
        """Cycles of every block but the last: the pixels, the next block's weights, the ACC write-back gap."""
        return max(pixels * self.beats, config.mac.cols * self.weight_beats, 2 * self.beats + 1)

    def cycles(self, config: HardwareConfig, *, groups: int, group_in: int, group_out: int, taps: int,
               pixels: int) -> int:
        """:func:`conv_cycles` with this configuration's constants taken already (a tiler weighs many plans)."""
        blocks = config.mac.blocks(groups, group_in, group_out, taps, self.lanes)
        return (SETUP_CYCLES + config.mac.cols * self.weight_beats
                + (blocks - 1) * self.block_cycles(config, pixels) + (pixels + 1) * self.beats + 1)


def acc_beats(config: HardwareConfig) -> int:
    """Cycles to move a pixel's ``cols`` accumulators through a pair of ACC ports (the write-back's time: at
    most ``beats``, whatever the operand types)."""
    return _beats(_words_spanned(config.mac.cols * ENTRY_BYTES, config, Buffer.ACC))


def wide_input_beats(config: HardwareConfig) -> int:
    """``beats`` of INT4 weights against 8-bit inputs, the longest ACT run (``2 * rows`` bytes); every other
    legal pair of types has int8's ``beats`` (a run of ``rows`` bytes, or fewer)."""
    return ConvTiming.of(config, DType.INT4, DType.INT8).beats


def conv_cycles(config: HardwareConfig, *, groups: int, group_in: int, group_out: int, taps: int,
                pixels: int, w_type: DType = DType.INT8, in_type: DType = DType.INT8) -> int:
    """Cycles from start to retire of a legal CONV of ``groups`` groups of ``group_in`` input and ``group_out``
    output channels, ``taps`` kernel taps (k_h * k_w) and ``pixels`` output pixels, on operands of these types
    (docs/rtl-conv.md, "Cycles"): the numbers a tile plan knows, without a command."""
    return ConvTiming.of(config, w_type, in_type).cycles(config, groups=groups, group_in=group_in,
                                                         group_out=group_out, taps=taps, pixels=pixels)


@dataclass(frozen=True)
class DepthwiseTiming:
    """DWCONV's steps for one tile shape: a block is ``cols`` consecutive positions of the output rows laid end
    to end at the input planes' width (fewer for a shorter tile) times ``channels`` channels; each kernel tap is
    a ``tap_beats`` step, and the block's accumulators drain into ACC in ``drain_beats`` while the next block
    accumulates in the other bank."""

    tap_beats: int      # the block's input run (width * channels bytes of WEIGHT) and the tap's weights (ACT)
    drain_beats: int    # the block's width * channels accumulators, read (accumulate) and written in ACC

    @classmethod
    def of(cls, config: HardwareConfig, channels: int, positions: int) -> DepthwiseTiming:
        width = min(config.mac.cols, positions)
        tap = max(_beats(_words_spanned(width * channels, config, Buffer.WEIGHT)),
                  _beats(_words_spanned(channels, config, Buffer.ACT)))
        return cls(tap, _beats(_words_spanned(width * channels * ENTRY_BYTES, config, Buffer.ACC)))

    def block_cycles(self, taps: int) -> int:
        """Cycles between the starts of two blocks: the taps, or the drain if it is longer."""
        return max(taps * self.tap_beats, self.drain_beats)


def depthwise_positions(out_h: int, out_w: int, plane_w: int) -> int:
    """The positions a DWCONV's blocks cover: ``out_h`` output rows laid end to end ``plane_w`` apart (the
    width of the input's phase planes; the ``plane_w - out_w`` positions after a row are not outputs)."""
    return (out_h - 1) * plane_w + out_w


def depthwise_cycles(config: HardwareConfig, *, channels: int, taps: int, out_h: int, out_w: int,
                     plane_w: int) -> int:
    """Cycles from start to retire of a legal DWCONV of ``channels`` channels, ``taps`` kernel taps, an
    ``out_h x out_w`` output and input phase planes ``plane_w`` wide (ceil(in_w / stride_w); docs/rtl-conv.md,
    "Depthwise dataflow"): the setup, every block but the last at ``block_cycles``, then the last block's
    taps, the cycle its last products arrive, its drain and the last write."""
    positions = depthwise_positions(out_h, out_w, plane_w)
    timing = DepthwiseTiming.of(config, channels, positions)
    blocks = -(-positions // config.mac.cols)
    return (SETUP_CYCLES + (blocks - 1) * timing.block_cycles(taps) + taps * timing.tap_beats + 1
            + timing.drain_beats + 1)


def conv_output_size(command: Command) -> tuple[int, int]:
    """(out_h, out_w) of a CONV or DWCONV command (its input is padded already)."""
    c = command.args
    return ((c["in_h"] - c["dilation_h"] * (c["k_h"] - 1) - 1) // c["stride_h"] + 1,
            (c["in_w"] - c["dilation_w"] * (c["k_w"] - 1) - 1) // c["stride_w"] + 1)


def command_cycles(config: HardwareConfig, command: Command) -> int:
    """Cycles from start to retire of a legal CONV or DWCONV command (docs/rtl-conv.md, "Cycles")."""
    c = command.args
    out_h, out_w = conv_output_size(command)
    if command.opcode == Opcode.DWCONV:
        return depthwise_cycles(config, channels=c["channels"], taps=c["k_h"] * c["k_w"], out_h=out_h, out_w=out_w,
                                plane_w=-(-c["in_w"] // c["stride_w"]))
    return conv_cycles(config, groups=c["groups"], group_in=c["in_c"] // c["groups"],
                       group_out=c["out_c"] // c["groups"], taps=c["k_h"] * c["k_w"], pixels=out_h * out_w,
                       w_type=DType(c["w_type"]), in_type=DType(c["in_type"]))


def useful_macs(command: Command) -> int:
    """Multiply-accumulates the command needs (what utilisation counts): CONV's or DWCONV's."""
    c = command.args
    out_h, out_w = conv_output_size(command)
    if command.opcode == Opcode.DWCONV:
        return out_h * out_w * c["channels"] * c["k_h"] * c["k_w"]
    return out_h * out_w * c["out_c"] * c["k_h"] * c["k_w"] * (c["in_c"] // c["groups"])
