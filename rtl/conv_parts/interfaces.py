"""What CONV's parts share: the signatures between them and the register ranges they agree on.

A member's range is that of the register the value is held in, or of the values it takes in a legal command,
or (an address) wide enough for every bit the port address and the byte offset use: the parts together
compute the same bits in the same cycles as one module would.
"""
from __future__ import annotations

from amaranth.hdl import Mux, Value, signed
from amaranth.lib import data
from amaranth.lib.wiring import Out, Signature

from aipu.rtl.commands import command_layout
from aipu.rtl.ports import word_bytes, word_count
from aipu.sim.machine.arch import ACC_BITS, DTYPE_BITS, MAC_OPERAND_BITS, Buffer, DType, HardwareConfig
from aipu.sim.machine.isa import Opcode
from aipu.sim.timing.conv import ConvTiming, DepthwiseTiming, wide_input_beats


def command_field(config: HardwareConfig, name: str):
    """The shape of a CONV command field (a part that uses few fields takes them as ports of that shape)."""
    return command_layout(config, Opcode.CONV)[name].shape


def conv_command(config: HardwareConfig) -> data.FlexibleLayout:
    """The whole CONV command, for the parts that read many of its fields."""
    return command_layout(config, Opcode.CONV)


def dim(config: HardwareConfig) -> int:
    """One past the largest channel count or spatial size a command can name."""
    return 1 << command_field(config, "in_c").width


def diagonal(config: HardwareConfig) -> int:
    """The most groups a block can hold side by side on the array's diagonal (two channels a row with INT4
    weights)."""
    return min(2 * config.mac.rows, config.mac.cols)


def most_beats(config: HardwareConfig) -> int:
    """A pixel's cycles for the longest ACT run (docs/rtl-conv.md, "Cycles"): the range of ``beats``."""
    return max(ConvTiming.of(config).beats, wide_input_beats(config))


def packed_bytes(elements: Value, int4: Value) -> Value:
    """The bytes ``elements`` 8-bit elements take, or INT4 ones two a byte (an even count)."""
    return Mux(int4, elements >> 1, elements)


def phase_cycles(config: HardwareConfig) -> int:
    """One past the longest phase: a block's pixels, the pipeline drain or the first block's weights."""
    beats = most_beats(config)
    return dim(config) ** 2 * beats + 2 * beats + config.mac.cols * ConvTiming.of(config).weight_beats + 2


def geometry(config: HardwareConfig) -> Signature:
    """From the setup to the parts that walk the command: its registered geometry, fixed from the second setup
    cycle to the command's end. ``int4_weights``, ``int4_inputs``: the operand types (docs/arithmetic.md D23);
    ``beats``: a pixel's cycles for the command's ACT run; ``weights_per_out_channel`` the WEIGHT bytes of an
    output channel (k_h·k_w·group_in weights), ``step_*`` and ``tap_*`` the ACT bytes between output pixels
    and between kernel taps, ``*_chunks_last`` the last in- and out-channel chunk of a group (in-channel
    chunks of ``rows``, or ``2 * rows`` with INT4 weights), ``groups_per_block``
    MacArrayConfig.groups_per_block of the command and ``block_group_cols`` that times group_out."""
    n, taps = dim(config), 1 << 2 * command_field(config, "k_h").width
    beats = most_beats(config)
    return Signature({
        "int4_weights": Out(1), "int4_inputs": Out(1), "beats": Out(range(beats + 1)),
        "group_in": Out(range(n)), "group_out": Out(range(n)), "out_w": Out(range(n)),
        "weights_per_out_channel": Out(range(n * taps)),
        "pixel_cycles": Out(range(n * n * beats + 1)), "block_cycles": Out(range(phase_cycles(config))),
        "step_x": Out(range(1 << 32)), "step_y": Out(range(1 << 40)),
        "tap_x": Out(range(1 << 32)), "tap_y": Out(range(1 << 40)),
        "in_chunks_last": Out(range(n)), "out_chunks_last": Out(range(n)),
        "groups_per_block": Out(range(diagonal(config) + 1)), "block_group_cols": Out(range(n * diagonal(config)))})


# From the sequencer to the setup: the cycle that decodes the geometry, then the one that checks it.
SETUP_STEPS = Signature({"geometry": Out(1), "check": Out(1)})

# From the sequencer to the block walk, the loader and the issue: ``begin`` pulses in the checking cycle
# (counters to their first block), ``boundary`` at the last cycle of a phase (the loaded block streams next),
# ``bank`` is the bank the streaming block's weights are in; ``loading`` and ``issuing`` say the loader reads
# a weight word and the issue a pixel's words this cycle.
PHASE = Signature({"begin": Out(1), "boundary": Out(1), "bank": Out(1), "loading": Out(1), "issuing": Out(1)})


def next_block(config: HardwareConfig) -> Signature:
    """From the block walk: the block the loader fills (the one after the streaming block). ``act``,
    ``acc``: where its first pixel's runs start (ACT byte, ACC entry); ``weights``: the WEIGHT byte of its
    first column's run; ``rows``, ``cols``: the in- and out-channels it holds (``rows`` per group, up to
    ``2 * mac.rows`` with INT4 weights); ``act_bytes``: the bytes of a pixel's ACT run (``rows`` channels of
    each of its groups, side by side on the diagonal, in the input's type);
    ``overwrites``: its sums replace the accumulators; ``last``: it is the command's last block."""
    return Signature({
        "act": Out(range(2 * config.buffer(Buffer.ACT).bytes)), "acc": Out(range(2 * config.buffer_units(Buffer.ACC))),
        "weights": Out(range(2 * config.buffer(Buffer.WEIGHT).bytes)),
        "rows": Out(range(2 * config.mac.rows + 1)), "cols": Out(range(config.mac.cols + 1)),
        "act_bytes": Out(range(2 * config.mac.rows + 1)), "overwrites": Out(1), "last": Out(1)})


# A MAC cell is two signed HALF_OPERAND_BITS x MAC_OPERAND_BITS multipliers (docs/arithmetic.md D23): an int8
# weight operand b is split into its low NIBBLE_BITS (b & 15) and the rest (b >> 4); INT4 weights (minus their
# zero point) are one a half.
NIBBLE_BITS = DTYPE_BITS[DType.INT4]
HALF_OPERAND_BITS = NIBBLE_BITS + 1


def int8_halves(operand: Value) -> tuple[Value, Value]:
    """An int8 weight operand (MAC_OPERAND_BITS, signed) as a cell's two multiplier operands: its low nibble
    (unsigned) and the rest (signed), operand = low + 16 * high."""
    return operand[:NIBBLE_BITS], operand[NIBBLE_BITS:MAC_OPERAND_BITS].as_signed()


def weight_column(config: HardwareConfig) -> Signature:
    """From the loader to the MAC array: when ``valid``, column ``col`` of bank ``bank`` takes ``halves``: for
    cell r, entries 2r and 2r + 1 (an int8 weight minus w_zero_point split as b & 15, b >> 4; or the two INT4
    weights of the cell's byte minus w_zero_point), 0 in the cells outside the column's group."""
    return Signature({"valid": Out(1), "bank": Out(1), "col": Out(range(config.mac.cols)),
                      "halves": Out(data.ArrayLayout(signed(HALF_OPERAND_BITS), 2 * config.mac.rows))})


def pixel_operands(config: HardwareConfig) -> Signature:
    """From the issue to the MAC array, in a pixel's data cycle: its input run ``x`` (up to ``2 * rows``
    bytes: ``rows`` channels of 8 bits, or ``2 * rows`` of 8 or 4 bits with INT4 weights), its ``cols``
    accumulators ``old``, the ``bank`` of its block and whether the block ``overwrites`` them."""
    return Signature({"x": Out(16 * config.mac.rows), "old": Out(ACC_BITS * config.mac.cols), "bank": Out(1),
                      "overwrites": Out(1)})


def pixel_place(config: HardwareConfig) -> Signature:
    """From the issue to the write-back: ``valid`` in the data cycle of a pixel's last beat; its accumulators
    start at byte ``acc_offset`` of ACC word ``acc_word``; the first ``cols`` of them are the block's."""
    return Signature({"valid": Out(1), "acc_word": Out(range(2 * word_count(config, Buffer.ACC))),
                      "acc_offset": Out(range(word_bytes(config, Buffer.ACC))),
                      "cols": Out(range(config.mac.cols + 1))})


# DWCONV, the output-stationary depthwise dataflow (docs/rtl-conv.md, "Depthwise dataflow"). A block's
# ``slots`` (rows·cols) are its accumulators in ACC order: slot e is channel e mod channels of the block's output
# e div channels.

def depthwise_command(config: HardwareConfig) -> data.FlexibleLayout:
    """The whole DWCONV command (its fields lie elsewhere than CONV's)."""
    return command_layout(config, Opcode.DWCONV)


def slots(config: HardwareConfig) -> int:
    return config.mac.rows * config.mac.cols


def depthwise_geometry(config: HardwareConfig) -> Signature:
    """From the depthwise setup, registered: the phase planes' width ``plane_w`` and bytes ``plane_bytes``,
    ``out_w``, the ``outputs`` (out_h·out_w) and ``positions`` ((out_h - 1)·plane_w + out_w), ``cols_mod_w``
    (how far a block's first column moves along a plane row: cols mod plane_w), and the steps:
    ``tap_beats``, ``tap_cycles`` (k_h·k_w·tap_beats), ``drain_beats`` and ``period`` (between blocks)."""
    n, widest = dim(config), DepthwiseTiming.of(config, config.mac.rows, config.mac.cols)
    tap_cycles = (1 << 2 * command_field(config, "k_h").width) * widest.tap_beats
    return Signature({
        "plane_w": Out(range(n)), "plane_bytes": Out(range(config.buffer(Buffer.WEIGHT).bytes + 1)),
        "out_w": Out(range(n)), "outputs": Out(range(n * n)), "positions": Out(range(n * n)),
        "cols_mod_w": Out(range(config.mac.cols + 1)),
        "tap_beats": Out(range(widest.tap_beats + 1)), "tap_cycles": Out(range(tap_cycles)),
        "drain_beats": Out(range(widest.drain_beats + 1)),
        "period": Out(range(max(tap_cycles, widest.drain_beats + 1)))})


def tap_operands(config: HardwareConfig) -> Signature:
    """From the tap walk, in the data cycle of a tap's last beat (``valid``): the tap's input ``run``
    (rows·cols bytes, byte j·channels + r of position j of the block), its ``kernel`` (rows bytes), which of
    the block's positions are outputs (``kept``) and how many bytes of dropped positions precede each
    (``skip``), the accumulator ``bank`` of the block and whether the tap is its ``first``."""
    rows, cols = config.mac.rows, config.mac.cols
    return Signature({"valid": Out(1), "first": Out(1), "bank": Out(1), "run": Out(8 * slots(config)),
                      "kernel": Out(8 * rows), "kept": Out(cols),
                      "skip": Out(data.ArrayLayout(range(slots(config)), cols))})


def block_drain(config: HardwareConfig) -> Signature:
    """From the tap walk, in the data cycle of a block's last tap (``start``): its ``bank``, the ACC entry of
    its first output ``acc_first``, its output ``entries`` (outputs·channels) and whether it is the ``last``."""
    return Signature({"start": Out(1), "bank": Out(1), "acc_first": Out(range(2 * config.buffer_units(Buffer.ACC))),
                      "entries": Out(range(slots(config) + 1)), "last": Out(1)})


def slot_operands(config: HardwareConfig) -> Signature:
    """From the slot operands to the MAC array: each slot's input byte ``x`` and its weight operand ``w``
    (kernel byte minus w_zero_point)."""
    return Signature({"x": Out(8 * slots(config)),
                      "w": Out(data.ArrayLayout(signed(MAC_OPERAND_BITS), slots(config)))})


PRODUCT_BITS = 2 * MAC_OPERAND_BITS     # a product of two signed operands
