"""ELTWISE in the POOL unit, and the element plumbing POOL shares with it (docs/rtl-pool.md).

:class:`SourceReads` reads a run of bytes at any address of ACT or OUT per cycle, :func:`pack_output`
writes groups of output elements as whole OUT words, :func:`dtype_bounds` / :func:`element_value` read
the element types. :class:`EltwiseEngine` takes a group of ``lanes`` element pairs per cycle
(``aipu.sim.timing.pool.lanes``) through three stages, each lane:

  issue   read a[i : i + lanes] (two words of a_buf) and b[i : i + lanes] (two words of b_buf)
  scale   d = value - zero point; ADD/SUB/MAX/MIN: t_a = d_a * (M_a << (N - N_a)), t_b likewise, with
          N = max(N_a, N_b) (golden eltwise: the terms are aligned exactly); MUL: t_a = d_a * d_b * M_a;
          RESCALE: t_a = d_a * M_a (golden concat's requantize), t_b = 0
  output  combine, round(. / 2**N) in the command's rounding, + out_zero_point, clamp to [qmin, qmax]

The aligned multipliers and N are registered once per command (CHECK), so each lane has one multiplier per
operand and one barrel shifter.
"""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed

from aipu.rtl.arith import clamp, net, rounding_shift_right
from aipu.rtl.lanes import shift_down, shift_up
from aipu.rtl.ports import word_bytes
from aipu.rtl.unit import UnitComponent
from aipu.sim.golden.eltwise import MAX_ALIGN
from aipu.sim.machine.arch import (DTYPE_BYTES, DTYPE_NUMPY, ELTWISE_SUM_BITS, MAC_OPERAND_BITS, MULTIPLIER_BITS,
                                   SHIFT_BITS, BYTE_TYPES, Buffer, DType, HardwareConfig)
from aipu.sim.machine.isa import VECTOR_SOURCE_BUFFERS, EltwiseOp
from aipu.sim.timing.pool import lanes

SOURCE_BUFFERS = VECTOR_SOURCE_BUFFERS       # where POOL and ELTWISE read
ELEMENT = signed(8 * max(DTYPE_BYTES.values()) + 1)   # holds a value of every element type

OPERAND_TYPES = (DType.INT8, DType.UINT8)
ALIGNED_BITS = MULTIPLIER_BITS + MAX_ALIGN        # M << (N - N_i) of an operand that passed the alignment check
PRODUCT_BITS = 2 * MAC_OPERAND_BITS + MULTIPLIER_BITS   # MUL: d_a * d_b * M


def dtype_bounds(dtype, types=BYTE_TYPES):
    """(lowest, highest) value of the element type ``dtype`` (a DType-valued signal), one of ``types``."""
    low, high = Const(0, ELEMENT), Const(0, ELEMENT)
    for member in types:
        info = np.iinfo(DTYPE_NUMPY[member])
        low, high = Mux(dtype == member, int(info.min), low), Mux(dtype == member, int(info.max), high)
    return low, high


def element_value(dtype, low_byte, high_byte):
    """The value of an element of ``dtype`` from its (little-endian) bytes, as an ``ELEMENT``."""
    return Mux(dtype == DType.INT16, Cat(low_byte, high_byte).as_signed(),
               Mux(dtype == DType.INT8, low_byte.as_signed(), low_byte))


def is_wide(dtype):
    """1 for the two-byte element type."""
    return dtype == DType.INT16


class SourceReads:
    """Reads a run of bytes at any byte address of ACT or OUT per cycle, for two streams.

    Stream a (POOL's taps, ELTWISE's operand a) reads through ``<buffer>_read`` and ``<buffer>_read_b``,
    stream b (operand b) through ``_read_c`` and ``_read_d``: the word holding the run's first byte and the
    next one, so a run of up to a word's bytes may start anywhere. An engine drives ``a_address``/``a_enable``
    and ``a_used``, the bytes of the run it uses (and b's); the run's bytes (``a_run_bytes`` / ``b_run_bytes``
    of them) are in ``a_bytes`` / ``b_bytes`` the next cycle. The next word is read only if the used bytes
    reach into it: a command reads no word outside its operands (docs/isa.md, "Banks").
    """

    PORTS = {"a": ("", "_b"), "b": ("_c", "_d")}

    def __init__(self, m: Module, unit: UnitComponent, a_buffer, b_buffer, a_run_bytes: int, b_run_bytes: int):
        self.a_address, self.a_enable, self.a_used, self.a_bytes = self._stream(m, unit, "a", a_buffer, a_run_bytes)
        self.b_address, self.b_enable, self.b_used, self.b_bytes = self._stream(m, unit, "b", b_buffer, b_run_bytes)

    def _stream(self, m: Module, unit: UnitComponent, stream: str, buffer_select, run_bytes: int):
        """(address, enable, used bytes, the run's bytes one cycle later) of one stream over both source
        buffers."""
        address = Signal(unit.config.width_parameters["sram_addr_bits"], name=f"{stream}_address")
        enable = Signal(name=f"{stream}_enable")
        used = Signal(range(run_bytes + 1), name=f"{stream}_used")
        run = [Const(0, 8)] * run_bytes
        for buffer in SOURCE_BUFFERS:
            name = buffer.name.lower()
            ports = [getattr(unit, f"{name}_read{suffix}") for suffix in self.PORTS[stream]]
            shift = (word_bytes(unit.config, buffer) - 1).bit_length()
            offset = Signal(shift, name=f"{name}_{stream}_offset")
            here = enable & (buffer_select == buffer)
            reaches_next = address[:shift] + used > word_bytes(unit.config, buffer)
            for index, port in enumerate(ports):
                m.d.comb += [port.addr.eq((address >> shift) + index), port.en.eq(here & (reaches_next | (index == 0)))]
            with m.If(here):
                m.d.sync += offset.eq(address)
            window = shift_down(m, f"{name}_{stream}_run", Cat(*(port.data for port in ports)), offset, 8, run_bytes)
            run = [Mux(buffer_select == buffer, window[8 * index:8 * (index + 1)], run[index])
                   for index in range(run_bytes)]
        return address, enable, used, [net(m, value, f"{stream}_byte{index}") for index, value in enumerate(run)]


def pack_output(m: Module, config: HardwareConfig, port, begin, dst_addr, wide, valid, values, count, flush) -> None:
    """Write a contiguous stream of output elements (from ``dst_addr``; when ``valid``, the first ``count`` of
    ``values``) to OUT, a word at a time: bytes gather in a pending word that is written when its last byte
    arrives; ``flush`` writes it as it is. A group is at most one word (``lanes``), so one that crosses
    a word boundary completes the first word and starts the second: at most one write per cycle. A group of
    fewer than ``len(values)`` elements may come anywhere in the stream (POOL's last channel group of each
    pixel), so the lanes beyond ``count`` are zeroed before their bytes are ORed into the pending word."""
    nbytes = word_bytes(config, Buffer.OUT)
    if nbytes < 2:
        raise ValueError("the POOL unit needs OUT port_bytes >= 2 to write an int16 element per cycle")
    shift = (nbytes - 1).bit_length()
    address = Signal(len(dst_addr) + 1)
    pending_data, pending_mask = Signal(8 * nbytes), Signal(nbytes)
    present = [index < count for index in range(len(values))]
    values = [Mux(here, value, 0) for here, value in zip(present, values)]   # bytes past the group stay 0
    group_data = Mux(wide, Cat(*(value[:16] for value in values)), Cat(*(value[:8] for value in values)))
    group_mask = Mux(wide, Cat(*(bit.replicate(2) for bit in present)), Cat(*present))
    offset = address[:shift]
    placed_data = shift_up(m, "placed_data", group_data, offset, 8, 2 * nbytes)
    placed_mask = shift_up(m, "placed_mask", group_mask, offset, 1, 2 * nbytes)
    merged_data = pending_data | placed_data[:8 * nbytes]
    merged_mask = pending_mask | placed_mask[:nbytes]
    m.d.comb += port.addr.eq(address >> shift)
    with m.If(begin):
        m.d.sync += [address.eq(dst_addr), pending_data.eq(0), pending_mask.eq(0)]
    with m.Elif(valid):
        m.d.sync += address.eq(address + (count << wide))
        with m.If(merged_mask[-1]):      # the word's last byte has arrived
            m.d.comb += [port.en.eq(1), port.data.eq(merged_data), port.mask.eq(merged_mask)]
            m.d.sync += [pending_data.eq(placed_data[8 * nbytes:]), pending_mask.eq(placed_mask[nbytes:])]
        with m.Else():
            m.d.sync += [pending_data.eq(merged_data), pending_mask.eq(merged_mask)]
    with m.Elif(flush):
        m.d.comb += [port.en.eq(1), port.data.eq(pending_data), port.mask.eq(pending_mask)]


def region_beyond(config: HardwareConfig, buffer_select, address, nbytes):
    """The byte region [address, address + nbytes) ends beyond the selected buffer."""
    end = address + nbytes
    beyond = Const(0)
    for buffer in SOURCE_BUFFERS:
        beyond = Mux(buffer_select == buffer, end > config.buffer(buffer).bytes, beyond)
    return beyond


class EltwiseEngine:
    """The ELTWISE datapath; ``faults`` lists (condition, field) in the interpreter's order of checks."""

    def __init__(self, unit, m: Module, command, phase: dict, reads: SourceReads, enabled):
        self.unit, self.m, self.command, self.phase, self.enabled = unit, m, command, phase, enabled
        width = lanes(unit.config)
        self.out_valid, self.out_last, self.out_count = Signal(), Signal(), Signal(range(width + 1))
        self.out_values = [Signal(ELEMENT, name=f"eltwise_out{lane}") for lane in range(width)]
        c = command
        self.two_operands = (c.op == EltwiseOp.ADD) | (c.op == EltwiseOp.SUB) | (c.op == EltwiseOp.MAX) | \
            (c.op == EltwiseOp.MIN)
        self.faults = self._faults()
        self._datapath(reads)

    def _faults(self) -> list[tuple]:
        c, config = self.command, self.unit.config
        is_mul, is_rescale = c.op == EltwiseOp.MUL, c.op == EltwiseOp.RESCALE
        unused = [(is_mul, name) for name in ("b_multiplier", "b_shift")]
        unused += [(is_rescale, name) for name in ("b_buf", "b_addr", "b_type", "b_zero_point", "b_multiplier",
                                                  "b_shift")]
        a_low, a_high = dtype_bounds(c.a_type, OPERAND_TYPES)
        b_low, b_high = dtype_bounds(c.b_type, OPERAND_TYPES)
        out_low, out_high = dtype_bounds(c.out_type)
        return [
            (region_beyond(config, c.a_buf, c.a_addr, c.count), "a_addr"),
            *((selected & (getattr(c, name) != 0), name) for selected, name in unused),
            (~is_rescale & region_beyond(config, c.b_buf, c.b_addr, c.count), "b_addr"),
            ((c.a_zero_point < a_low) | (c.a_zero_point > a_high), "a_zero_point"),
            (~is_rescale & ((c.b_zero_point < b_low) | (c.b_zero_point > b_high)), "b_zero_point"),
            # the operand with the smaller shift would be aligned by more than MAX_ALIGN bits
            (self.two_operands & (c.b_shift > c.a_shift + MAX_ALIGN), "a_shift"),
            (self.two_operands & (c.a_shift > c.b_shift + MAX_ALIGN), "b_shift"),
            ((c.qmin < out_low) | (c.qmin > out_high), "qmin"),
            ((c.qmax < out_low) | (c.qmax > out_high), "qmax"),
            (c.qmin > c.qmax, "qmin"),
            ((c.out_zero_point < out_low) | (c.out_zero_point > out_high), "out_zero_point"),
            (c.dst_addr + c.count * (1 + (c.out_type == DType.INT16)) > config.buffer(Buffer.OUT).bytes,
             "dst_addr"),
        ]

    def _datapath(self, reads: SourceReads) -> None:
        m, c, width = self.m, self.command, lanes(self.unit.config)
        # per command: N and the aligned multipliers (b's is 0 where b takes no part)
        shift, a_scale, b_scale = Signal(SHIFT_BITS), Signal(ALIGNED_BITS), Signal(ALIGNED_BITS)
        common = Mux(self.two_operands & (c.b_shift > c.a_shift), c.b_shift, c.a_shift)
        with m.If(self.phase["check"]):
            m.d.sync += [shift.eq(common), a_scale.eq(c.a_multiplier << (common - c.a_shift)[:SHIFT_BITS]),
                         b_scale.eq(Mux(self.two_operands, c.b_multiplier << (common - c.b_shift)[:SHIFT_BITS], 0))]

        # issue: the group of ``width`` elements from ``first`` of both operands
        first, finished = Signal(len(c.count) + 1), Signal()
        issuing = self.phase["run"] & self.enabled & ~finished
        left = c.count - first
        last = left <= width
        with m.If(self.enabled):
            m.d.comb += [reads.a_address.eq(c.a_addr + first), reads.a_enable.eq(issuing),
                         reads.b_address.eq(c.b_addr + first), reads.b_enable.eq(issuing & (c.op != EltwiseOp.RESCALE)),
                         reads.a_used.eq(Mux(last, left, width)), reads.b_used.eq(Mux(last, left, width))]
        with m.If(self.phase["begin"]):
            m.d.sync += [first.eq(0), finished.eq(0)]
        with m.Elif(issuing):
            m.d.sync += [first.eq(first + width), finished.eq(last)]

        # scale: the centred operands times their multipliers, per lane
        read_valid, read_last, read_count = Signal(), Signal(), Signal(range(width + 1))
        m.d.sync += [read_valid.eq(issuing), read_last.eq(last), read_count.eq(Mux(last, left, width))]
        term_bits = signed(max(ELTWISE_SUM_BITS, PRODUCT_BITS))
        scaled_valid, scaled_last, scaled_count = Signal(), Signal(), Signal.like(read_count)
        m.d.sync += [scaled_valid.eq(read_valid), scaled_last.eq(read_last), scaled_count.eq(read_count)]
        results = []
        for lane in range(width):
            a_centred = net(m, element_value(c.a_type, reads.a_bytes[lane], 0) - c.a_zero_point, f"a_centred{lane}")
            b_centred = net(m, element_value(c.b_type, reads.b_bytes[lane], 0) - c.b_zero_point, f"b_centred{lane}")
            a_term, b_term = Signal(term_bits, name=f"a_term{lane}"), Signal(term_bits, name=f"b_term{lane}")
            m.d.sync += [a_term.eq(Mux(c.op == EltwiseOp.MUL, a_centred * b_centred, a_centred) * a_scale),
                         b_term.eq(b_centred * b_scale)]
            results.append(self._output(a_term, b_term, shift, lane))

        # output: registered results of the group
        m.d.sync += [self.out_valid.eq(scaled_valid & self.enabled), self.out_last.eq(scaled_last),
                     self.out_count.eq(scaled_count),
                     *(out.eq(result) for out, result in zip(self.out_values, results))]

    def _output(self, a_term, b_term, shift, lane: int):
        """Combine one lane's terms, round once, add the zero point, clamp."""
        m, c = self.m, self.command
        combined = Signal(signed(len(a_term) + 1), name=f"combined{lane}")
        with m.Switch(c.op):
            with m.Case(EltwiseOp.SUB):
                m.d.comb += combined.eq(a_term - b_term)
            with m.Case(EltwiseOp.MAX):
                m.d.comb += combined.eq(Mux(a_term > b_term, a_term, b_term))
            with m.Case(EltwiseOp.MIN):
                m.d.comb += combined.eq(Mux(a_term < b_term, a_term, b_term))
            with m.Default():       # ADD; MUL and RESCALE have b_term = 0
                m.d.comb += combined.eq(a_term + b_term)
        shifted = net(m, rounding_shift_right(combined, shift, c.rounding) + c.out_zero_point, f"shifted{lane}")
        return clamp(shifted, c.qmin, c.qmax)
