"""The REQUANT unit: int32 accumulators -> quantized outputs, exactly as sim/golden/requant.py (docs/rtl-requant.md).

One command runs in four phases:
  CHECK    acc_addr / param_index regions inside their buffers; lane channel counters start
  LOAD     the command's ``channels`` parameter records, PARAM -> a local record memory with one read port
           per lane (the records are then never a bottleneck), checking them as they arrive
  VERDICT  every refusal of the interpreter, in its order, before anything is written
  STREAM   ``lanes`` accumulators per cycle through a two-stage pipeline: (A) read one ACC word and each
           lane's record, (B) compute every lane and merge the output bytes into a two-word window that
           writes OUT one full word at a time (a last partial word in one FLUSH cycle)

The lanes and record geometry (``RequantGeometry``) and the cycles are ``aipu.sim.timing.requant``.
"""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Mux, Signal, signed, unsigned
from amaranth.lib import data
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import Out

from aipu.rtl import arith
from aipu.rtl.ports import read_port, word_bytes, write_port
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import (ACC_BITS, DTYPE_BYTES, DTYPE_NUMPY, PARAM_RECORD, PARAM_RECORD_BYTES, SHIFT_BITS,
                                   SHIFT_MAX, Buffer, HardwareConfig)
from aipu.sim.machine.isa import ZERO_POINT_BITS, Opcode, RequantMode, Unit
from aipu.sim.timing.requant import WIDEST_ELEMENT_BYTES, RequantGeometry

# The record as the PARAM buffer stores it (little-endian, packed): integers keep their signedness, the
# float32 scale is its bit pattern.
PARAM_LAYOUT = data.StructLayout({
    name: (signed if dtype.kind == "i" else unsigned)(8 * dtype.itemsize) for name, dtype, _ in PARAM_RECORD})
# FLOAT32 results are saturated at 2**FLOAT_INT_BITS before + zero point and the clamp: beyond any zero point
# plus any clamp bound, so the clamp decides exactly as golden's does on the unsaturated value.
FLOAT_INT_BITS = ZERO_POINT_BITS + 1


def _by_type(out_type, values: dict):
    """The entry of ``values`` (DType -> int) for the command's ``out_type``."""
    result = Const(0)
    for dtype, value in values.items():
        result = Mux(out_type == dtype, value, result)
    return result


def _barrel_shift_left(m, value, amount, unit_bits: int, name: str):
    """``value`` << (amount * unit_bits), keeping the width: one constant-shift stage per bit of ``amount``
    (a variable shift of a wide value makes every output bit depend on every input bit)."""
    for bit in range(len(amount)):
        shifted = Cat(Const(0, unit_bits << bit), value)[:len(value)]
        value = arith.net(m, Mux(amount[bit], shifted, value), f"{name}_{bit}")
    return value


def _remainder(m, value, divisor, value_bits: int, name: str):
    """value mod divisor for value < 2**value_bits (restoring division, one compare-subtract per bit)."""
    for step in reversed(range(value_bits)):
        value = arith.net(m, Mux(value >= (divisor << step), value - (divisor << step), value), f"{name}_{step}")
    return value


class RequantUnit(UnitComponent):
    """REQUANT: ``lanes`` accumulators per cycle after the records of the tile are loaded."""

    UNIT = Unit.REQUANT
    ENGINE_ERRORS = ("param_reserved", "param_shift", "param_negative_shift", "param_scale")

    def ports(self, config: HardwareConfig) -> dict:
        return {"acc_read": Out(read_port(config, Buffer.ACC)), "param_read": Out(read_port(config, Buffer.PARAM)),
                "out_write": Out(write_port(config, Buffer.OUT))}

    def elaborate_engine(self, m, word, start, done, fault, fault_field):
        config, geometry = self.config, RequantGeometry.of(self.config)
        lanes, out_bytes = geometry.lanes, geometry.out_bytes
        cmd = self.view(word, Opcode.REQUANT)
        elements = cmd.pixels * cmd.channels
        element_bytes = _by_type(cmd.out_type, DTYPE_BYTES)
        type_min = _by_type(cmd.out_type, {t: int(np.iinfo(d).min) for t, d in DTYPE_NUMPY.items()})
        type_max = _by_type(cmd.out_type, {t: int(np.iinfo(d).max) for t, d in DTYPE_NUMPY.items()})
        wide = element_bytes == WIDEST_ELEMENT_BYTES
        lane_bits = (lanes - 1).bit_length()
        first_lane = cmd.acc_addr[:lane_bits] if lane_bits else Const(0)
        last_entry = cmd.acc_addr + elements - 1
        first_group, last_group = cmd.acc_addr >> lane_bits, last_entry >> lane_bits

        # --- local record memory, one read port per lane ---------------------------------------------
        m.submodules.records = records = Memory(shape=PARAM_LAYOUT, depth=geometry.records, init=[])
        record_write = records.write_port()
        record_reads = [records.read_port() for _ in range(lanes)]

        # --- LOAD datapath: a read issued in one cycle lands in the next --------------------------------
        load_read = Signal(range(geometry.records * geometry.reads_per_record + 1))
        load_issue = Signal()
        chunk_bits = 8 * geometry.param_chunk_bytes
        chunk_byte = cmd.param_index * PARAM_RECORD_BYTES + load_read * geometry.param_chunk_bytes
        chunk_address = chunk_byte // word_bytes(config, Buffer.PARAM)
        chunk_slot = (chunk_byte % word_bytes(config, Buffer.PARAM)) // geometry.param_chunk_bytes
        landing, landing_slot = Signal(), Signal.like(chunk_slot)
        landing_read = Signal.like(load_read)
        m.d.comb += [self.param_read.addr.eq(chunk_address), self.param_read.en.eq(load_issue)]
        m.d.sync += [landing.eq(load_issue), landing_slot.eq(chunk_slot), landing_read.eq(load_read)]
        assembly = Signal(8 * PARAM_RECORD_BYTES)
        chunk = self.param_read.data.word_select(landing_slot, chunk_bits)
        record_bits = Cat(assembly[chunk_bits:], chunk)        # the chunk read last is the record's top
        record = data.View(PARAM_LAYOUT, record_bits)
        record_complete = landing & (landing_read % geometry.reads_per_record == geometry.reads_per_record - 1)
        bad_reserved, bad_shift, bad_negative_shift, bad_scale = (Signal(name=f"bad_{n}") for n in
                                                                  ("reserved", "shift", "negative_shift", "scale"))
        scale_exponent = record.scale[arith.FP32_FRACTION_BITS:31]
        # golden refuses a scale that is not finite and positive: a sign, +-0, an infinity or a NaN
        scale_refused = record.scale[31] | (record.scale[:31] == 0) | (scale_exponent == (1 << arith.FP32_EXPONENT_BITS) - 1)
        with m.If(landing):
            m.d.sync += assembly.eq(record_bits)
        with m.If(record_complete):
            m.d.comb += [record_write.en.eq(1), record_write.addr.eq(landing_read // geometry.reads_per_record),
                         record_write.data.eq(record_bits)]
            m.d.sync += [bad_reserved.eq(bad_reserved | (record.reserved != 0)),
                         bad_shift.eq(bad_shift | (record.shift > SHIFT_MAX)),
                         bad_negative_shift.eq(bad_negative_shift | (record.negative_shift > SHIFT_MAX)),
                         bad_scale.eq(bad_scale | scale_refused)]

        # --- STREAM stage A: one lane group per cycle ----------------------------------------------------
        group = Signal.like(last_group)
        channel_step = Signal.like(cmd.channels)                   # lanes mod channels
        lane_channels = [Signal.like(cmd.channels, name=f"lane{j}_channel") for j in range(lanes)]
        group_byte = Signal(signed(len(cmd.out_addr) + 2))       # OUT byte of lane 0 of the group
        issue = Signal()
        slot_bits = (geometry.acc_entries // lanes - 1).bit_length()
        m.d.comb += [self.acc_read.addr.eq(group >> slot_bits), self.acc_read.en.eq(issue)]
        for port, channel in zip(record_reads, lane_channels):
            m.d.comb += port.addr.eq(channel)
        b_valid, b_slot = Signal(), Signal(max(1, slot_bits))
        b_lanes = Signal(lanes)
        b_group_byte = Signal.like(group_byte)
        lane_in_tile = Cat(((group != first_group) | (j >= first_lane)) &
                           ((group != last_group) | (j <= last_entry[:lane_bits] if lane_bits else Const(1)))
                           for j in range(lanes))
        m.d.sync += b_valid.eq(issue)
        with m.If(issue):
            m.d.sync += [b_slot.eq(group[:slot_bits] if slot_bits else 0), b_lanes.eq(lane_in_tile),
                         b_group_byte.eq(group_byte), group.eq(group + 1),
                         group_byte.eq(group_byte + lanes * element_bytes)]
            for channel in lane_channels:
                advanced = channel + channel_step
                m.d.sync += channel.eq(Mux(advanced >= cmd.channels, advanced - cmd.channels, advanced))

        # --- STREAM stage B: compute every lane, merge its bytes into the OUT window ----------------------
        entries = self.acc_read.data.word_select(b_slot, ACC_BITS * lanes) if slot_bits else \
            self.acc_read.data[:ACC_BITS * lanes]
        results = [self._lane(m, cmd, entries[ACC_BITS * j:ACC_BITS * (j + 1)].as_signed(), port.data, f"lane{j}")
                   for j, port in enumerate(record_reads)]
        lane_data = Mux(wide, Cat(r[:16] for r in results), Cat(r[:8] for r in results))
        lane_mask = Mux(wide, Cat(Cat(b_lanes[j], b_lanes[j]) for j in range(lanes)), b_lanes)
        window_bytes = 2 * out_bytes
        bias = WIDEST_ELEMENT_BYTES * lanes                     # keeps the first group's offset >= 0
        window_base = Signal(len(cmd.out_addr) + 1)             # OUT byte address of the window's first word
        window_data, window_mask = Signal(8 * window_bytes), Signal(window_bytes)
        offset = Signal(range(out_bytes + 2 * bias))
        m.d.comb += offset.eq(b_group_byte - window_base + bias)
        reach = bias + window_bytes                                # zero-extended so every slice exists
        placed_data = _barrel_shift_left(m, Cat(lane_data, Const(0, 8 * reach)), offset, 8, "placed_data")
        placed_data = placed_data[8 * bias:8 * reach]
        placed_mask = _barrel_shift_left(m, Cat(lane_mask, Const(0, reach)), offset, 1, "placed_mask")
        placed_mask = Mux(b_valid, placed_mask[bias:reach], 0)
        merged_data = Cat(Mux(placed_mask[i], placed_data[8 * i:8 * i + 8], window_data[8 * i:8 * i + 8])
                          for i in range(window_bytes))
        merged_mask = window_mask | placed_mask
        word_full = merged_mask[out_bytes - 1]
        flush = Signal()
        m.d.comb += [self.out_write.addr.eq(window_base // out_bytes), self.out_write.data.eq(merged_data[:8 * out_bytes]),
                     self.out_write.mask.eq(merged_mask[:out_bytes]), self.out_write.en.eq(word_full | flush)]
        with m.If(word_full):
            m.d.sync += [window_data.eq(merged_data[8 * out_bytes:]), window_mask.eq(merged_mask[out_bytes:]),
                         window_base.eq(window_base + out_bytes)]
        with m.Else():
            m.d.sync += [window_data.eq(merged_data), window_mask.eq(merged_mask)]

        # --- control -----------------------------------------------------------------------------------
        load_reads = cmd.channels * geometry.reads_per_record
        with m.FSM(name="requant"):
            with m.State("IDLE"):
                with m.If(start):
                    m.next = "CHECK"
            with m.State("CHECK"):
                self._start_lanes(m, cmd, lane_channels, channel_step, first_lane)
                m.d.sync += [load_read.eq(0), group.eq(first_group), window_mask.eq(0),
                             window_base.eq(cmd.out_addr // out_bytes * out_bytes),
                             group_byte.eq(cmd.out_addr - first_lane * element_bytes),
                             bad_reserved.eq(0), bad_shift.eq(0), bad_negative_shift.eq(0), bad_scale.eq(0)]
                region_faults = [(cmd.acc_addr + elements > config.buffer_units(Buffer.ACC), "acc_addr"),
                                 (cmd.param_index + cmd.channels > config.buffer_units(Buffer.PARAM), "param_index")]
                self._fault_first(m, region_faults, fault, fault_field, otherwise="LOAD")
            with m.State("LOAD"):
                m.d.comb += load_issue.eq(1)
                m.d.sync += load_read.eq(load_read + 1)
                with m.If(load_read == load_reads - 1):
                    m.next = "LAND"
            with m.State("LAND"):
                m.next = "VERDICT"
            with m.State("VERDICT"):
                self._fault_first(m, self._refusals(cmd, elements, element_bytes, type_min, type_max, bad_reserved,
                                                    bad_shift, bad_negative_shift, bad_scale),
                                  fault, fault_field, otherwise="STREAM")
            with m.State("STREAM"):
                m.d.comb += issue.eq(1)
                with m.If(group == last_group):
                    m.next = "TAIL"
            with m.State("TAIL"):
                m.next = "FLUSH"
            with m.State("FLUSH"):
                m.d.comb += [flush.eq(window_mask[:out_bytes] != 0), done.eq(1)]
                m.d.sync += window_mask.eq(0)
                m.next = "IDLE"

    def _start_lanes(self, m, cmd, lane_channels, channel_step, first_lane):
        """Channel of each lane in the first group: (j - first_lane) mod channels, formed as
        ((j - first_lane + lanes) mod channels - lanes mod channels) mod channels (all operands >= 0)."""
        lanes = len(lane_channels)
        step = _remainder(m, Const(lanes), cmd.channels, lanes.bit_length(), "lanes_mod_channels")
        m.d.sync += channel_step.eq(step)
        for j, channel in enumerate(lane_channels):
            ahead = _remainder(m, j + lanes - first_lane, cmd.channels, (2 * lanes).bit_length(), f"lane{j}_ahead")
            m.d.sync += channel.eq(Mux(ahead >= step, ahead - step, ahead + cmd.channels - step))

    def _fault_first(self, m, refusals, fault, fault_field, *, otherwise: str):
        """Raise ``fault`` naming the first refusal whose condition holds; else go on to ``otherwise``."""
        condition = Const(0)
        for refused, name in reversed(refusals):
            condition = refused | condition
        with m.If(condition):
            m.d.comb += fault.eq(1)
            m.next = "IDLE"
            chosen = Const(0)
            for refused, name in reversed(refusals):
                chosen = Mux(refused, self.error_index(name), chosen)
            m.d.comb += fault_field.eq(chosen)
        with m.Else():
            m.next = otherwise

    def _refusals(self, cmd, elements, element_bytes, type_min, type_max, bad_reserved, bad_shift,
                  bad_negative_shift, bad_scale):
        """The interpreter's ExecutionErrors after the regions, in its order: records (_params), leaky in FLOAT32,
        golden's checks (requantize / requantize_float32 check different things in different orders), out_addr."""
        clamp_bounds = [((cmd.qmin < type_min) | (cmd.qmin > type_max), "qmin"),
                        ((cmd.qmax < type_min) | (cmd.qmax > type_max), "qmax"),
                        (cmd.qmin > cmd.qmax, "qmin")]
        zero_point = [((cmd.out_zero_point < type_min) | (cmd.out_zero_point > type_max), "out_zero_point")]
        floating = cmd.mode == RequantMode.FLOAT32
        native_checks = [(bad_shift, "param_shift"), (cmd.leaky & bad_negative_shift, "param_negative_shift"),
                         *clamp_bounds, *zero_point]
        float_checks = [(bad_scale, "param_scale"), *zero_point, *clamp_bounds]
        out_region = cmd.out_addr + elements * element_bytes > self.config.buffer_units(Buffer.OUT)
        return [(bad_reserved, "param_reserved"), (floating & cmd.leaky, "leaky"),
                *((~floating & refused, name) for refused, name in native_checks),
                *((floating & refused, name) for refused, name in float_checks),
                (out_region, "out_addr")]

    @staticmethod
    def _lane(m, cmd, accumulator, record, name: str):
        """One output value of a lane (golden requantize / requantize_float32), clamped to [qmin, qmax]."""
        net = arith.net
        total = net(m, accumulator + record.bias, f"{name}_sum")          # REQUANT_SUM_BITS: never wraps
        use_negative = cmd.leaky & (total < 0)
        multiplier = Mux(use_negative, record.negative_multiplier, record.multiplier)
        shift = net(m, Mux(use_negative, record.negative_shift, record.shift)[:SHIFT_BITS], f"{name}_shift")
        product = net(m, total * multiplier, f"{name}_product")
        native = arith.rounding_shift_right(product, shift, cmd.rounding)
        as_float = net(m, arith.int_to_fp32(m, total, f"{name}_float"), f"{name}_float")
        scaled = net(m, arith.fp32_multiply(m, as_float, record.scale, f"{name}_scaled"), f"{name}_scaled")
        floating = arith.fp32_round_to_int(m, scaled, FLOAT_INT_BITS, f"{name}_rint")
        value = net(m, Mux(cmd.mode == RequantMode.FLOAT32, floating, native) + cmd.out_zero_point, f"{name}_value")
        return net(m, arith.clamp(value, cmd.qmin, cmd.qmax), f"{name}_out")
