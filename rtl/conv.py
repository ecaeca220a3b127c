"""CONV: the MAC array executing CONV and DWCONV commands exactly as ``sim/interpreter/`` and ``sim/golden/conv.py`` do.

Weight-stationary schedule (docs/rtl-conv.md): the command is cut into blocks (groups, out-channel chunk of
``cols``, kernel tap, in-channel chunk of ``rows``, or ``2 * rows`` with INT4 weights: two products per MAC
cell, docs/arithmetic.md D23), visited in that order with the in-channel chunk innermost. A block's
``rows x cols`` weight bytes sit in one of two register banks while every output
pixel streams through the array (``beats`` cycles per pixel: two ACT and two ACC words per cycle, so any
byte alignment works); the loader fills the other bank with the next block meanwhile. Each pixel is a
read-add-write of its ``cols`` accumulators; the first block of an out-channel chunk overwrites them when
``accumulate`` is 0. A block lasts at least ``2 * beats + 1`` cycles, so a pixel's accumulators are written
back before the next block of the same chunk reads them, however few pixels the tile has. Groups that fit
share a block on the array's diagonal (``MacArrayConfig.groups_per_block`` in the machine specification, which
the compiler's tiling also reads): a depthwise layer runs ``min(rows, cols)`` channels at once. The cycles
this schedule takes are ``aipu.sim.timing.conv`` (``ConvTiming``, ``command_cycles``).

DWCONV is output-stationary (docs/rtl-conv.md, "Depthwise dataflow"): each multiplier accumulates one channel of
one output position of a block of ``cols`` positions in its own int32 register, one kernel tap per
``tap_beats`` cycles (the input run from WEIGHT's wide port, the tap's kernel from ACT), while the previous
block's bank drains into ACC (``depthwise_cycles``).

The engine is wired from named parts (aipu.rtl.conv_parts), one Verilog module each:
  sequencer        setup cycles, then CONV's phases (load block 0; stream block b while loading block b + 1)
                   or a DWCONV's run
  setup            CONV's tile geometry and faults
  blocks           the block walk: which block is loaded next and where its operands are
  loader           the next block's weight columns into the bank not streaming
  issue            one pixel every ``beats`` cycles: its ACT and ACC reads, gathered into runs
  mac              the weight banks and the pixel's ``cols`` dot products added to its accumulators; for a
                   DWCONV each multiplier's product alone
  writeback        the new accumulators into ACC, byte-masked to the block's output channels
  depthwise_setup  DWCONV's geometry and faults
  taps             DWCONV's tap walk: blocks of positions, their taps' input runs and kernels
  slots            a tap's run squeezed into the accumulator slots (ACC order), each slot's weight
  accumulators     DWCONV's two banks of one int32 per multiplier
  drain            a finished bank into ACC, one run of entries
"""
from __future__ import annotations

from amaranth.hdl import Cat, Mux
from amaranth.lib.wiring import Out, connect

from aipu.rtl.conv_parts.accumulators import DepthwiseAccumulators
from aipu.rtl.conv_parts.blocks import BlockWalk
from aipu.rtl.conv_parts.depthwise_setup import DepthwiseSetup
from aipu.rtl.conv_parts.drain import DepthwiseDrain
from aipu.rtl.conv_parts.issue import PixelIssue
from aipu.rtl.conv_parts.loader import WeightLoader
from aipu.rtl.conv_parts.mac import MacArray
from aipu.rtl.conv_parts.sequencer import ConvSequencer
from aipu.rtl.conv_parts.setup import ConvSetup
from aipu.rtl.conv_parts.slots import SlotOperands
from aipu.rtl.conv_parts.taps import TapWalk
from aipu.rtl.conv_parts.writeback import AccWriteBack
from aipu.rtl.ports import read_port, write_port
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Opcode, Unit


class ConvUnit(UnitComponent):
    """The MAC array: ``mac.rows x mac.cols`` cells of two signed 9 x 5-bit multipliers into int32 accumulators.

    Ports: two ACT, two WEIGHT and two ACC read ports and two ACC write ports (``_b``: the next word), so a
    run at any alignment moves in ``ConvTiming`` beats.
    """

    UNIT = Unit.CONV

    def ports(self, config: HardwareConfig) -> dict:
        members = {}
        for buffer in (Buffer.ACT, Buffer.WEIGHT, Buffer.ACC):
            for suffix in ("", "_b"):
                members[f"{buffer.name.lower()}_read{suffix}"] = Out(read_port(config, buffer))
        for suffix in ("", "_b"):
            members[f"acc_write{suffix}"] = Out(write_port(config, Buffer.ACC))
        return members

    def elaborate_engine(self, m, word, start, done, fault, fault_field):
        config, cmd, dw = self.config, self.view(word, Opcode.CONV), self.view(word, Opcode.DWCONV)
        depthwise = cmd.opcode == Opcode.DWCONV
        m.submodules.sequencer = sequencer = ConvSequencer(config)
        m.submodules.setup = setup = ConvSetup(config, self.error_names)
        m.submodules.depthwise_setup = dw_setup = DepthwiseSetup(config, self.error_names)
        m.submodules.mac = mac = MacArray(config)
        m.d.comb += [sequencer.start.eq(start), done.eq(sequencer.done), sequencer.depthwise.eq(depthwise),
                     fault.eq(setup.fault | dw_setup.fault), fault_field.eq(setup.fault_field | dw_setup.fault_field),
                     sequencer.refused.eq(fault), setup.command.eq(cmd), dw_setup.command.eq(dw),
                     mac.depthwise.eq(depthwise), mac.in_type.eq(Mux(depthwise, dw.in_type, cmd.in_type)),
                     mac.in_zero_point.eq(Mux(depthwise, dw.in_zero_point, cmd.in_zero_point))]
        connect(m, sequencer.setup, setup.steps, dw_setup.steps)
        reads, writes = self.weight_stationary(m, cmd, sequencer, setup, mac)
        dw_reads, dw_writes = self.output_stationary(m, dw, sequencer, dw_setup, mac)
        for name in reads:
            share_read(m, getattr(self, name), reads[name], dw_reads[name])
        for name in writes:
            share_write(m, getattr(self, name), writes[name], dw_writes[name])

    def weight_stationary(self, m, cmd, sequencer, setup, mac):
        """CONV's parts; returns their read and write ports by the unit's port names."""
        config = self.config
        m.submodules.blocks = blocks = BlockWalk(config)
        m.submodules.loader = loader = WeightLoader(config)
        m.submodules.issue = issue = PixelIssue(config)
        m.submodules.writeback = writeback = AccWriteBack(config)
        m.d.comb += [sequencer.last.eq(blocks.block.last), blocks.command.eq(cmd),
                     mac.int4_weights.eq(setup.geometry.int4_weights),
                     loader.w_zero_point.eq(cmd.w_zero_point), issue.out_c.eq(cmd.out_c), writeback.sums.eq(mac.sums)]
        connect(m, setup.geometry, sequencer.geometry, blocks.geometry, loader.geometry, issue.geometry)
        connect(m, sequencer.phase, blocks.phase, loader.phase, issue.phase)
        connect(m, blocks.block, loader.block, issue.block)
        connect(m, loader.column, mac.column)
        connect(m, issue.operands, mac.operands)
        connect(m, issue.place, writeback.place)
        reads = {name: getattr(loader, name) for name in ("weight_read", "weight_read_b")}
        reads |= {name: getattr(issue, name) for name in ("act_read", "act_read_b", "acc_read", "acc_read_b")}
        return reads, {name: getattr(writeback, name) for name in ("acc_write", "acc_write_b")}

    def output_stationary(self, m, dw, sequencer, dw_setup, mac):
        """DWCONV's parts; returns their read and write ports by the unit's port names."""
        config = self.config
        m.submodules.taps = taps = TapWalk(config)
        m.submodules.slots = slots = SlotOperands(config)
        m.submodules.accumulators = accumulators = DepthwiseAccumulators(config)
        m.submodules.drain = drain = DepthwiseDrain(config)
        m.d.comb += [taps.command.eq(dw), taps.begin.eq(sequencer.depthwise_begin), slots.command.eq(dw),
                     accumulators.valid.eq(taps.tap.valid), accumulators.first.eq(taps.tap.first),
                     accumulators.bank.eq(taps.tap.bank), accumulators.products.eq(mac.products),
                     drain.accumulate.eq(dw.accumulate), drain.bank0.eq(accumulators.bank0),
                     drain.bank1.eq(accumulators.bank1), sequencer.depthwise_done.eq(drain.done)]
        connect(m, dw_setup.geometry, taps.geometry, drain.geometry)
        connect(m, taps.tap, slots.tap)
        connect(m, slots.operands, mac.slots)
        connect(m, taps.drain, drain.block)
        reads = {name: getattr(taps, name) for name in ("weight_read", "weight_read_b", "act_read", "act_read_b")}
        reads |= {name: getattr(drain, name) for name in ("acc_read", "acc_read_b")}
        return reads, {name: getattr(drain, name) for name in ("acc_write", "acc_write_b")}


def share_read(m, port, *readers):
    """One read port for parts that never read in the same cycle: the address of whichever reads, the data to
    all."""
    address = readers[0].addr
    for reader in readers[1:]:
        address = Mux(reader.en, reader.addr, address)
    m.d.comb += [port.addr.eq(address), port.en.eq(Cat(*(reader.en for reader in readers)).any())]
    m.d.comb += [reader.data.eq(port.data) for reader in readers]


def share_write(m, port, *writers):
    """One write port for parts that never write in the same cycle."""
    chosen = writers[0]
    fields = {name: getattr(chosen, name) for name in ("addr", "data", "mask")}
    for writer in writers[1:]:
        fields = {name: Mux(writer.en, getattr(writer, name), value) for name, value in fields.items()}
    m.d.comb += [getattr(port, name).eq(value) for name, value in fields.items()]
    m.d.comb += port.en.eq(Cat(*(writer.en for writer in writers)).any())
