"""CONV: the MAC array executing CONV commands exactly as ``sim/interpreter/`` and ``sim/golden/conv.py`` do.

Weight-stationary schedule (docs/rtl-conv.md): the command is cut into blocks (groups, out-channel chunk of
``cols``, kernel tap, in-channel chunk of ``rows``), visited in that order with the in-channel chunk
innermost. A block's ``rows x cols`` weight operands sit in one of two register banks while every output
pixel streams through the array (``beats`` cycles per pixel: two ACT and two ACC words per cycle, so any
byte alignment works); the loader fills the other bank with the next block meanwhile. Each pixel is a
read-add-write of its ``cols`` accumulators; the first block of an out-channel chunk overwrites them when
``accumulate`` is 0. A block lasts at least ``2 * beats + 1`` cycles, so a pixel's accumulators are written
back before the next block of the same chunk reads them, however few pixels the tile has. Groups that fit
share a block on the array's diagonal (``MacArrayConfig.groups_per_block`` in the machine specification, which
the compiler's tiling also reads): a depthwise layer runs ``min(rows, cols)`` channels at once. The cycles
this schedule takes are ``aipu.sim.timing.conv`` (``ConvTiming``, ``command_cycles``).

The engine is wired from named parts (aipu.rtl.conv_parts), one Verilog module each:
  sequencer  setup cycles, then the phases: load block 0; stream block b while loading block b + 1
  setup      the tile geometry and the faults
  blocks     the block walk: which block is loaded next and where its operands are
  loader     the next block's weight columns into the bank not streaming
  issue      one pixel every ``beats`` cycles: its ACT and ACC reads, gathered into runs
  mac        the weight banks and the pixel's ``cols`` dot products added to its accumulators
  writeback  the new accumulators into ACC, byte-masked to the block's output channels
"""
from __future__ import annotations

from amaranth.lib.wiring import Out, connect, flipped

from aipu.rtl.conv_parts.blocks import BlockWalk
from aipu.rtl.conv_parts.issue import PixelIssue
from aipu.rtl.conv_parts.loader import WeightLoader
from aipu.rtl.conv_parts.mac import MacArray
from aipu.rtl.conv_parts.sequencer import ConvSequencer
from aipu.rtl.conv_parts.setup import ConvSetup
from aipu.rtl.conv_parts.writeback import AccWriteBack
from aipu.rtl.ports import read_port, write_port
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Opcode, Unit


class ConvUnit(UnitComponent):
    """The MAC array: ``mac.rows x mac.cols`` multipliers of signed 9-bit operands into int32 accumulators.

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
        config, cmd = self.config, self.view(word, Opcode.CONV)
        m.submodules.sequencer = sequencer = ConvSequencer(config)
        m.submodules.setup = setup = ConvSetup(config, self.error_names)
        m.submodules.blocks = blocks = BlockWalk(config)
        m.submodules.loader = loader = WeightLoader(config)
        m.submodules.issue = issue = PixelIssue(config)
        m.submodules.mac = mac = MacArray(config)
        m.submodules.writeback = writeback = AccWriteBack(config)
        m.d.comb += [sequencer.start.eq(start), done.eq(sequencer.done), sequencer.refused.eq(setup.fault),
                     fault.eq(setup.fault), fault_field.eq(setup.fault_field), sequencer.last.eq(blocks.block.last),
                     setup.command.eq(cmd), blocks.command.eq(cmd), loader.w_zero_point.eq(cmd.w_zero_point),
                     issue.out_c.eq(cmd.out_c), mac.in_type.eq(cmd.in_type), mac.in_zero_point.eq(cmd.in_zero_point),
                     writeback.sums.eq(mac.sums)]
        connect(m, sequencer.setup, setup.steps)
        connect(m, setup.geometry, sequencer.geometry, blocks.geometry, loader.geometry, issue.geometry)
        connect(m, sequencer.phase, blocks.phase, loader.phase, issue.phase)
        connect(m, blocks.block, loader.block, issue.block)
        connect(m, loader.column, mac.column)
        connect(m, issue.operands, mac.operands)
        connect(m, issue.place, writeback.place)
        for name in ("weight_read", "weight_read_b"):
            connect(m, flipped(getattr(self, name)), getattr(loader, name))
        for name in ("act_read", "act_read_b", "acc_read", "acc_read_b"):
            connect(m, flipped(getattr(self, name)), getattr(issue, name))
        for name in ("acc_write", "acc_write_b"):
            connect(m, flipped(getattr(self, name)), getattr(writeback, name))
