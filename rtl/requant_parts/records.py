"""REQUANT's record memory: the command's parameter records from PARAM, checked as they arrive, read by
every lane at once."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from aipu.rtl import arith
from aipu.rtl.ports import read_port, word_bytes
from aipu.rtl.requant_parts.interfaces import PARAM_LAYOUT, RECORD_FLAGS, command
from aipu.sim.machine.arch import PARAM_RECORD_BYTES, SHIFT_MAX, Buffer, HardwareConfig
from aipu.sim.timing.requant import RequantGeometry


class RecordStore(wiring.Component):
    """Loads records ``param_index`` .. ``param_index + channels - 1`` into a local memory, one PARAM read per
    cycle while ``load`` is high (``reads_per_record`` reads a record; a read lands in the next cycle), and
    serves them to the lanes: ``record[j]`` is the one at ``channel[j]``, one cycle after the address.

    Every record is checked as it lands; ``flags`` are sticky until ``begin``, which also restarts the reads.
    ``last_read`` says the read issued this cycle is the command's last.

    Signature: ``command`` (In), ``begin``, ``load`` (In), ``last_read`` (Out), ``flags`` (Out),
    ``param_read`` (the PARAM port), ``channel`` (In, one per lane), ``record`` (Out, one per lane).
    """

    def __init__(self, config: HardwareConfig):
        self.config, self.geometry = config, RequantGeometry.of(config)
        layout = command(config)
        lanes = self.geometry.lanes
        super().__init__({"command": In(layout), "begin": In(1), "load": In(1), "last_read": Out(1),
                          "flags": Out(RECORD_FLAGS), "param_read": Out(read_port(config, Buffer.PARAM)),
                          "channel": In(layout["channels"].shape).array(lanes),
                          "record": Out(PARAM_LAYOUT).array(lanes)})

    def elaborate(self, platform) -> Module:
        m = Module()
        geometry, cmd, flags = self.geometry, self.command, self.flags
        m.submodules.memory = memory = Memory(shape=PARAM_LAYOUT, depth=geometry.records, init=[])
        store = memory.write_port()
        for channel, record in zip(self.channel, self.record):
            lookup = memory.read_port()
            m.d.comb += [lookup.addr.eq(channel), record.eq(lookup.data)]

        # a read issued in one cycle lands in the next
        read = Signal(range(geometry.records * geometry.reads_per_record + 1))
        chunk_bits = 8 * geometry.param_chunk_bytes
        port_bytes = word_bytes(self.config, Buffer.PARAM)
        chunk_byte = cmd.param_index * PARAM_RECORD_BYTES + read * geometry.param_chunk_bytes
        chunk_slot = (chunk_byte % port_bytes) // geometry.param_chunk_bytes
        landing, landing_slot, landing_read = Signal(), Signal.like(chunk_slot), Signal.like(read)
        m.d.comb += [self.param_read.addr.eq(chunk_byte // port_bytes), self.param_read.en.eq(self.load),
                     self.last_read.eq(read == cmd.channels * geometry.reads_per_record - 1)]
        m.d.sync += [landing.eq(self.load), landing_slot.eq(chunk_slot), landing_read.eq(read)]
        with m.If(self.load):
            m.d.sync += read.eq(read + 1)

        assembly = Signal(8 * PARAM_RECORD_BYTES)
        chunk = self.param_read.data.word_select(landing_slot, chunk_bits)
        record_bits = Cat(assembly[chunk_bits:], chunk)        # the chunk read last is the record's top
        record = data.View(PARAM_LAYOUT, record_bits)
        complete = landing & (landing_read % geometry.reads_per_record == geometry.reads_per_record - 1)
        scale_exponent = record.scale[arith.FP32_FRACTION_BITS:31]
        # golden refuses a scale that is not finite and positive: a sign, +-0, an infinity or a NaN
        scale_refused = record.scale[31] | (record.scale[:31] == 0) | (scale_exponent == (1 << arith.FP32_EXPONENT_BITS) - 1)
        with m.If(landing):
            m.d.sync += assembly.eq(record_bits)
        with m.If(complete):
            m.d.comb += [store.en.eq(1), store.addr.eq(landing_read // geometry.reads_per_record),
                         store.data.eq(record_bits)]
            m.d.sync += [flags.reserved.eq(flags.reserved | (record.reserved != 0)),
                         flags.shift.eq(flags.shift | (record.shift > SHIFT_MAX)),
                         flags.negative_shift.eq(flags.negative_shift | (record.negative_shift > SHIFT_MAX)),
                         flags.scale.eq(flags.scale | scale_refused)]
        with m.If(self.begin):
            m.d.sync += [read.eq(0), flags.eq(0)]
        return m
