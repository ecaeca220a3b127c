"""The DRAM pattern walk both DMA units step through (docs/rtl-dma.md): :class:`PatternWalker`, one DRAM word of
one run a step, and what LOAD and STORE derive from a command to drive it (``run_shape``, ``pattern_walker``).
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import C, Elaboratable, Module, Mux, Signal

from aipu.sim.machine.arch import DType, HardwareConfig
from aipu.sim.machine.isa import CIRC_LOG2_BITS, STRIDE_BYTES_BITS


def log2(value: int) -> int:
    return value.bit_length() - 1


def low_bits(value, bits: int):
    return value[:bits] if bits else C(0, 1)


def window_words(config: HardwareConfig, port_bytes: int, expansion: int = 1) -> int:
    """Words of ``port_bytes`` that one DRAM word's bytes (each ``expansion`` tile bytes) can touch, with a partial
    word before them."""
    return -(-(port_bytes - 1 + expansion * config.dram.bytes_per_cycle) // port_bytes)


class PatternWalker(Elaboratable):
    """Steps through a strided DRAM pattern one DRAM word at a time (``restart``, then ``advance``).

    Parameters (stable during a command): ``base`` (first byte), ``y_stride``, ``x_stride``, ``run_bytes``,
    ``runs`` per row, ``rows``, and the tile side: ``dense_start`` (tile byte of the first run), ``dense_gap``
    (tile bytes skipped after each row), ``dense_shift`` (a DRAM byte is ``2**dense_shift`` tile bytes: a LOAD
    of codebook indices) and ``repeat_last`` (each row is walked ``repeat_last + 1`` times: a circulant LOAD).
    Outputs for the current step: ``word_address``, ``first_byte`` in that word, ``byte_count``, its
    ``tile_count`` tile bytes, ``dense`` (tile byte of the first one), ``row_end`` (last step of a row),
    ``final`` (last step), ``repeat`` (the walk of the row, 0 first) and ``run_offset`` (the step's first byte
    within its run).
    """

    def __init__(self, config: HardwareConfig, address_width: int, dense_width: int):
        self.word_bytes = config.dram.bytes_per_cycle
        self.base, self.run_bytes = Signal(address_width), Signal(address_width)
        self.y_stride, self.x_stride = Signal(STRIDE_BYTES_BITS), Signal(STRIDE_BYTES_BITS)
        self.runs, self.rows = Signal(address_width), Signal(address_width)
        self.dense_start, self.dense_gap = Signal(dense_width), Signal(dense_width)
        self.dense_shift = Signal(2)
        self.repeat_last, self.repeat = Signal(CIRC_LOG2_BITS + 1), Signal(CIRC_LOG2_BITS + 1)
        self.run_offset = Signal(address_width)
        self.restart, self.advance = Signal(), Signal()
        self.word_address = Signal(address_width)
        self.first_byte = Signal(range(self.word_bytes))
        self.byte_count = Signal(range(self.word_bytes + 1))
        self.tile_count = Signal(range((self.word_bytes << 3) + 1))
        self.dense = Signal(dense_width)
        self.row_end, self.final = Signal(), Signal()
        self._address_width = address_width

    def elaborate(self, platform) -> Module:
        m = Module()
        shift = log2(self.word_bytes)
        row_address, run_address, address = (Signal(self._address_width) for _ in range(3))
        column, row = Signal.like(self.runs), Signal.like(self.rows)
        run_end, next_word = Signal(self._address_width + 1), Signal(self._address_width + 1)
        last_in_run, last_repeat = Signal(), Signal()
        m.d.comb += [
            last_repeat.eq(self.repeat == self.repeat_last),
            self.run_offset.eq(address - run_address),
            self.word_address.eq(address >> shift),
            self.first_byte.eq(low_bits(address, shift)),
            run_end.eq(run_address + self.run_bytes),
            next_word.eq((self.word_address + 1) << shift),
            last_in_run.eq(run_end <= next_word),
            self.byte_count.eq(Mux(last_in_run, run_end, next_word) - address),
            self.tile_count.eq(self.byte_count << self.dense_shift),
            self.row_end.eq(last_in_run & (column == self.runs - 1)),
            self.final.eq(self.row_end & (row == self.rows - 1) & last_repeat),
        ]
        with m.If(self.restart):
            m.d.sync += [row_address.eq(self.base), run_address.eq(self.base), address.eq(self.base),
                         column.eq(0), row.eq(0), self.repeat.eq(0), self.dense.eq(self.dense_start)]
        with m.Elif(self.advance):
            with m.If(~last_in_run):
                m.d.sync += [address.eq(next_word), self.dense.eq(self.dense + self.tile_count)]
            with m.Elif(~self.row_end):
                m.d.sync += [column.eq(column + 1), run_address.eq(run_address + self.x_stride),
                             address.eq(run_address + self.x_stride),
                             self.dense.eq(self.dense + self.tile_count)]
            with m.Elif(~last_repeat):           # the same DRAM row again, into the next tile row
                m.d.sync += [column.eq(0), self.repeat.eq(self.repeat + 1), run_address.eq(row_address),
                             address.eq(row_address), self.dense.eq(self.dense + self.tile_count + self.dense_gap)]
            with m.Else():
                m.d.sync += [column.eq(0), row.eq(row + 1), self.repeat.eq(0), row_address.eq(row_address + self.y_stride),
                             run_address.eq(row_address + self.y_stride), address.eq(row_address + self.y_stride),
                             self.dense.eq(self.dense + self.tile_count + self.dense_gap)]
        return m


def run_shape(m: Module, config: HardwareConfig, cmd, dense_gap_zero, dense_shift, circ_log2) -> SimpleNamespace:
    """What both engines derive from the command: the merged run shape in DRAM bytes (as
    ``aipu.sim.timing.dma.run_shape``; a run of codebook indices is ``2**dense_shift`` times shorter than in the
    tile; a circulant LOAD's runs never merge, ``circ_log2`` != 0), the pattern's last byte and whether it lies
    beyond the DRAM address space."""
    width = config.dram.address_bits + 2 * STRIDE_BYTES_BITS
    run = Signal(width)
    m.d.comb += run.eq(Mux(cmd.elem_type == DType.INT16, cmd.run << 1, cmd.run) >> dense_shift)
    row_data = Signal(width)
    m.d.comb += row_data.eq(cmd.x_size * run)
    merge_x = ((cmd.x_size == 1) | (cmd.dram_x_stride == run)) & (circ_log2 == 0)
    merge_y = merge_x & dense_gap_zero & ((cmd.y_size == 1) | (cmd.dram_y_stride == row_data))
    shape = SimpleNamespace(run=run, row_data=row_data, width=width, dense_shift=dense_shift, circ_log2=circ_log2,
                            run_bytes=Signal(width), runs=Signal(width), rows=Signal(width),
                            last_byte=Signal(width + 1), beyond=Signal(), last_word=Signal(width))
    m.d.comb += [
        shape.run_bytes.eq(Mux(merge_y, cmd.y_size * row_data, Mux(merge_x, row_data, run))),
        shape.runs.eq(Mux(merge_x, 1, cmd.x_size)),
        shape.rows.eq(Mux(merge_y, 1, cmd.y_size)),
        shape.last_byte.eq(cmd.dram_addr + (cmd.y_size - 1) * cmd.dram_y_stride
                           + (cmd.x_size - 1) * cmd.dram_x_stride + run - 1),
        shape.beyond.eq((shape.last_byte >> config.dram.address_bits) != 0),
        shape.last_word.eq(shape.last_byte >> log2(config.dram.bytes_per_cycle)),
    ]
    return shape


def pattern_walker(m: Module, name: str, config: HardwareConfig, cmd, shape, dense_start, dense_gap) -> PatternWalker:
    walker = PatternWalker(config, shape.width, len(dense_start))
    m.submodules[name] = walker
    m.d.comb += [walker.base.eq(cmd.dram_addr), walker.y_stride.eq(cmd.dram_y_stride),
                 walker.x_stride.eq(cmd.dram_x_stride), walker.run_bytes.eq(shape.run_bytes),
                 walker.runs.eq(shape.runs), walker.rows.eq(shape.rows),
                 walker.dense_start.eq(dense_start), walker.dense_gap.eq(dense_gap),
                 walker.dense_shift.eq(shape.dense_shift),
                 walker.repeat_last.eq((C(1, 1) << shape.circ_log2) - 1)]
    return walker
