"""REQUANT's record store: the command's parameter records from PARAM, checked as they arrive, in ``lanes``
banks of one read and one write port each, from which every lane reads its record in the same cycle."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from aipu.rtl import arith
from aipu.rtl.lanes import shift_down
from aipu.rtl.ports import read_port, word_bytes
from aipu.rtl.requant_parts.interfaces import PARAM_LAYOUT, RECORD_FLAGS, command, remainder
from aipu.sim.machine.arch import PARAM_RECORD_BYTES, SHIFT_MAX, Buffer, HardwareConfig
from aipu.sim.timing.requant import RequantGeometry


def bank_rows(geometry: RequantGeometry) -> int:
    """Rows of each bank: positions 0 .. records + lanes - 2 of the unrolled channel sequence, ``lanes`` a row."""
    return -(-(geometry.records + geometry.lanes - 1) // geometry.lanes)


def rotate_down(m, name: str, words: list, amount, width: int) -> list:
    """``words`` (``width`` bits each) rotated: item j of the result is ``words[(j + amount) mod len(words)]``."""
    rotated = shift_down(m, name, Cat(*words, *words), amount, width, len(words))
    return [rotated[width * j:width * (j + 1)] for j in range(len(words))]


class RecordStore(wiring.Component):
    """Loads records ``param_index`` .. ``param_index + channels - 1`` (channels 0 .. C - 1), one PARAM read
    per cycle while ``load`` is high (``reads_per_record`` reads a record; a read lands in the next cycle),
    and serves the lanes: ``record[j]`` is the record of channel (``channel`` + j) mod C, one cycle after
    ``channel`` (the channel of lane 0, in [0, C)).

    The lanes of a group read the window of L = ``lanes`` consecutive positions ``channel`` .. ``channel``
    + L - 1 of the unrolled channel sequence (position q holds channel q mod C). The store keeps positions
    0 .. C + L - 2 in L banks, position q in bank q mod L at row q div L: L consecutive positions lie in L
    different banks, so each bank serves one read a cycle. Channel c is written to position c as it lands;
    positions C .. C + L - 2 (channels 0 .. L - 2, mod C) lie in L - 1 different banks and are written
    together in the cycle after the last record lands, from registers that kept the first L - 1 records.
    Records can be read from the cycle after that.

    Every record is checked as it lands; ``flags`` are sticky until ``begin``, which also restarts the reads.
    ``last_read`` says the read issued this cycle is the command's last.

    Signature: ``command`` (In), ``begin``, ``load`` (In), ``last_read`` (Out), ``flags`` (Out),
    ``param_read`` (the PARAM port), ``channel`` (In), ``record`` (Out, one per lane).
    """

    def __init__(self, config: HardwareConfig):
        self.config, self.geometry = config, RequantGeometry.of(config)
        layout = command(config)
        super().__init__({"command": In(layout), "begin": In(1), "load": In(1), "last_read": Out(1),
                          "flags": Out(RECORD_FLAGS), "param_read": Out(read_port(config, Buffer.PARAM)),
                          "channel": In(layout["channels"].shape),
                          "record": Out(PARAM_LAYOUT).array(self.geometry.lanes)})

    def elaborate(self, platform) -> Module:
        m = Module()
        lanes, rows = self.geometry.lanes, bank_rows(self.geometry)
        banks = []
        for b in range(lanes):
            m.submodules[f"bank{b}"] = bank = Memory(shape=PARAM_LAYOUT, depth=rows, init=[])
            banks.append((bank.write_port(), bank.read_port()))
        landed, position = self._load(m)
        self._write(m, banks, landed, position)
        self._read(m, [read for _, read in banks])
        return m

    def _load(self, m):
        """The PARAM reads, the record assembly and checks: (the record landing complete this cycle or None,
        its channel)."""
        geometry, cmd, flags = self.geometry, self.command, self.flags
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
            m.d.sync += [flags.reserved.eq(flags.reserved | (record.reserved != 0)),
                         flags.shift.eq(flags.shift | (record.shift > SHIFT_MAX)),
                         flags.negative_shift.eq(flags.negative_shift | (record.negative_shift > SHIFT_MAX)),
                         flags.negative_shift_set.eq(flags.negative_shift_set | (record.negative_shift != 0)),
                         flags.scale.eq(flags.scale | scale_refused)]
        with m.If(self.begin):
            m.d.sync += [read.eq(0), flags.eq(0)]
        landed = arith.net(m, Cat(complete, record_bits), "landed")
        return landed, arith.net(m, landing_read // geometry.reads_per_record, "landed_channel")

    def _write(self, m, banks, landed, channel) -> None:
        """Each landing record to its position; in the cycle after the last, positions C .. C + L - 2."""
        cmd, lanes = self.command, self.geometry.lanes
        complete, record_bits = landed[0], landed[1:]
        lane_bits = (lanes - 1).bit_length()
        bank_of = channel[:lane_bits] if lane_bits else 0
        last = complete & (channel == cmd.channels - 1)
        extend = Signal()                          # the cycle after the last record landed
        m.d.sync += extend.eq(last)
        # the first L - 1 records, kept; position C + k holds channel k mod C
        heads = [Signal(len(record_bits), name=f"head{k}") for k in range(lanes - 1)]
        for k, head in enumerate(heads):
            with m.If(complete & (channel == k)):
                m.d.sync += head.eq(record_bits)
        tail = [Array(heads)[remainder(m, k, cmd.channels, lane_bits, f"tail{k}_channel")] for k in range(lanes - 1)]
        # bank b holds position C + k for k = (b - C) mod L (none for k = L - 1)
        width = len(record_bits)
        filler = Const(0, width)                   # k = L - 1: no position
        tail_data = rotate_down(m, "tail_data", [*tail, filler], (-cmd.channels)[:lane_bits], width) \
            if lanes > 1 else [filler]
        for b, (write, _) in enumerate(banks):
            k = (b - cmd.channels)[:lane_bits] if lane_bits else 0
            with m.If(extend & (k != lanes - 1)):
                m.d.comb += [write.en.eq(1), write.addr.eq((cmd.channels + k) >> lane_bits),
                             write.data.eq(tail_data[b])]
            with m.Elif(complete & (bank_of == b)):
                m.d.comb += [write.en.eq(1), write.addr.eq(channel >> lane_bits), write.data.eq(record_bits)]

    def _read(self, m, reads) -> None:
        """Bank b reads the window's position congruent to b; lane j takes bank (channel + j) mod L."""
        lanes = self.geometry.lanes
        lane_bits = (lanes - 1).bit_length()
        first_bank = self.channel[:lane_bits] if lane_bits else 0
        row = self.channel >> lane_bits
        for b, read in enumerate(reads):       # the last bank never lies before the first (no constant compare)
            m.d.comb += read.addr.eq(row + (b < first_bank) if b < lanes - 1 else row)
        if lanes == 1:
            m.d.comb += self.record[0].eq(reads[0].data)
            return
        rotation = Signal(lane_bits)
        m.d.sync += rotation.eq(first_bank)
        width = Value.cast(reads[0].data).shape().width
        for record, data_bits in zip(self.record, rotate_down(m, "record", [read.data for read in reads], rotation,
                                                              width)):
            m.d.comb += record.eq(data_bits)
