"""The REQUANT unit: int32 accumulators -> quantized outputs, exactly as sim/golden/requant.py (docs/rtl-requant.md).

One command runs in four phases:
  CHECK    acc_addr / param_index regions inside their buffers; lane channel counters start
  LOAD     the command's ``channels`` parameter records, PARAM -> a local record store of ``lanes`` banks
           (one read and one write port each) that serves every lane its record in every cycle, checking
           them as they arrive
  VERDICT  every refusal of the interpreter, in its order, before anything is written
  STREAM   ``lanes`` accumulators per cycle through a two-stage pipeline: (A) read one ACC word and each
           lane's record, (B) pair the accumulators into output lanes (``dual``: two an output), compute
           every lane and merge the output nibbles into a two-word window that writes OUT one full word at
           a time (a last partial word in one FLUSH cycle)

The engine is wired from named parts (aipu.rtl.requant_parts), one Verilog module each: control (the
phases), checks, records (LOAD and the record banks), fetch (stage A), lane0 .. laneN (the requantizer of
each lane) and window (stage B's write-back). The lanes and record geometry (``RequantGeometry``) and the
cycles are ``aipu.sim.timing.requant``.
"""
from __future__ import annotations

from amaranth.lib.wiring import Out, flipped, connect

from aipu.rtl.ports import read_port, write_port
from aipu.rtl.requant_parts.checks import RequantChecks
from aipu.rtl.requant_parts.control import RequantControl
from aipu.rtl.requant_parts.fetch import GroupFetch
from aipu.rtl.requant_parts.lane import LANE_FIELDS, Requantizer
from aipu.rtl.requant_parts.records import RecordStore
from aipu.rtl.requant_parts.window import OutputWindow
from aipu.rtl.unit import UnitComponent
from aipu.sim.machine.arch import Buffer, HardwareConfig
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.timing.requant import RequantGeometry


class RequantUnit(UnitComponent):
    """REQUANT: ``lanes`` accumulators per cycle after the records of the tile are loaded."""

    UNIT = Unit.REQUANT
    ENGINE_ERRORS = ("param_reserved", "param_shift", "param_negative_shift", "param_scale")

    def ports(self, config: HardwareConfig) -> dict:
        return {"acc_read": Out(read_port(config, Buffer.ACC)), "param_read": Out(read_port(config, Buffer.PARAM)),
                "out_write": Out(write_port(config, Buffer.OUT))}

    def elaborate_engine(self, m, word, start, done, fault, fault_field):
        config, cmd = self.config, self.view(word, Opcode.REQUANT)
        m.submodules.control = control = RequantControl(self.error_names)
        m.submodules.checks = checks = RequantChecks(config, self.error_names)
        m.submodules.records = records = RecordStore(config)
        m.submodules.fetch = fetch = GroupFetch(config)
        m.submodules.window = window = OutputWindow(config)
        m.d.comb += [*(part.command.eq(cmd) for part in (checks, records, fetch, window)),
                     control.start.eq(start), done.eq(control.done), fault.eq(control.fault),
                     fault_field.eq(control.fault_field),
                     control.region_fault.eq(checks.region_fault), control.region_field.eq(checks.region_field),
                     control.verdict_fault.eq(checks.verdict_fault), control.verdict_field.eq(checks.verdict_field),
                     control.last_read.eq(records.last_read), control.last_group.eq(fetch.last),
                     checks.flags.eq(records.flags), records.begin.eq(control.begin), records.load.eq(control.load),
                     records.channel.eq(fetch.channel), fetch.begin.eq(control.begin), fetch.issue.eq(control.issue),
                     window.begin.eq(control.begin), window.flush.eq(control.flush), window.valid.eq(fetch.valid),
                     window.in_tile.eq(fetch.in_tile), window.group_nibble.eq(fetch.group_nibble)]
        connect(m, flipped(self.param_read), records.param_read)
        connect(m, flipped(self.acc_read), fetch.acc_read)
        connect(m, flipped(self.out_write), window.out_write)
        lanes = RequantGeometry.of(config).lanes
        for j in range(lanes):      # dual outputs take output lanes 0 .. lanes / 2 - 1 (with one lane, lane 0)
            m.submodules[f"lane{j}"] = lane = Requantizer(config, planes=2 if j < max(1, lanes // 2) else 1)
            m.d.comb += [lane.accumulator.eq(fetch.accumulator[j]), lane.second.eq(fetch.second[j]),
                         lane.record.eq(records.record[j]), window.value[j].eq(lane.value),
                         *(getattr(lane, name).eq(getattr(cmd, name)) for name in LANE_FIELDS)]
