"""The NPU a chip team integrates: an AXI4-Lite slave for the host, one AXI4 master to DRAM and an interrupt.

Inside (docs/rtl.md, "The NPU top"):

  host      :class:`HostRegisters`: PROGRAM_BASE, DRAM_BYTES, CONTROL.START, STATUS, ERROR, the counters, ``irq``
  fetcher   :class:`CommandFetcher`: the program image's queues from DRAM into one FIFO per unit
  bridge    :class:`DramBridge`: the fetcher, LOAD and WDEC read and STORE writes through ``m_axi``
  units     the seven units, each taking its commands from its FIFO while the run lasts
  fabric    the token queues (:mod:`aipu.rtl.fabric`) and the on-chip buffers, ACT, WEIGHT, ACC and OUT as
            banks of two-port memories (:mod:`aipu.rtl.banks`)

START resets the units and the token queues, clears the bridge's error and starts the fetcher. The run ends when
FINISH executes (STATUS.DONE) or at the first error, which ERROR names; in one cycle the fetcher's refusal wins
over the bridge's error, which wins over the units' (in ``Unit`` order), which win over a bank conflict (an
access that found its memory's ports taken: a program that breaks the bank rule), which wins over an unbalanced
FINISH.
Once the run has ended no unit takes another command. STORE retires only when its writes are answered.

``trace_depth`` > 0 adds what only a testbench wants: per unit a log of every command's start and retire cycle
(counted from START's cycle, entry i = command i), read back by backdoor like :class:`aipu.rtl.system.System`'s.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect, flipped

from aipu.rtl.axi import AxiLiteSignature, AxiSignature
from aipu.rtl.banks import Access, attach_banked_buffer, memory_names, subbank_memories
from aipu.rtl.conv import ConvUnit
from aipu.rtl.dma import LoadUnit, StoreUnit
from aipu.rtl.dram_bridge import DramBridge
from aipu.rtl.fabric import CYCLE_BITS, attach_buffer_ports, buffer_memory, cycle_log, log_cycles, token_queues
from aipu.rtl.fetch import COUNT_BITS, CommandFetcher
from aipu.rtl.host import HostRegisters
from aipu.rtl.lut import LutUnit
from aipu.rtl.ports import port_space
from aipu.rtl.pool import PoolUnit
from aipu.rtl.requant import RequantUnit
from aipu.rtl.unit import UnitComponent
from aipu.rtl.wdec import Wdec
from aipu.sim.machine.arch import BANKED_BUFFERS, Buffer, HardwareConfig
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.registers import ADDRESS_BITS, DATA_BITS, FETCHER, ErrorCause

READERS = (FETCHER, Unit.LOAD, Unit.WDEC)       # the bridge's readers, in ARID order
UNIT_CLASSES = (LoadUnit, Wdec, ConvUnit, RequantUnit, LutUnit, PoolUnit, StoreUnit)


class Npu(wiring.Component):
    """The NPU of ``config``; ``fifo_depth``: commands each unit's FIFO holds at least."""

    def __init__(self, config: HardwareConfig, *, fifo_depth: int = 4, trace_depth: int = 0):
        self.config, self.trace_depth = config, trace_depth
        self.host = HostRegisters(config)
        self.fetcher = CommandFetcher(config, fifo_depth)
        self.bridge = DramBridge(config, READERS, Unit.STORE)
        self.units: dict[Unit, UnitComponent] = {
            cls.UNIT: cls(config, await_write_responses=True) if cls is StoreUnit else cls(config)
            for cls in UNIT_CLASSES}
        self.buffers: dict[Buffer, list[Memory]] = {     # a banked buffer's memories bank-major (rtl/banks.py)
            buffer: subbank_memories(config, buffer) if buffer in BANKED_BUFFERS else [buffer_memory(config, buffer)]
            for buffer in Buffer}
        self.cycle_logs = {unit: cycle_log(trace_depth) for unit in Unit} if trace_depth else {}
        super().__init__({
            "s_axil": In(AxiLiteSignature(ADDRESS_BITS, DATA_BITS)),
            "m_axi": Out(AxiSignature(config.dram.address_bits, 8 * config.dram.bytes_per_cycle,
                                      self.bridge.id_bits)),
            "irq": Out(1),
        })

    def memories(self) -> dict[str, Memory]:
        """The memories a testbench reads back by backdoor, by their names in the design."""
        return {**{name: mem for buffer in Buffer for name, mem in self.buffer_memories(buffer).items()},
                **{f"cycle_log_{unit.name.lower()}": mem for unit, mem in self.cycle_logs.items()}}

    def buffer_memories(self, buffer: Buffer) -> dict[str, Memory]:
        """The memories of ``buffer`` by their names in the design, in the order of :attr:`buffers`."""
        return dict(zip(memory_names(buffer), self.buffers[buffer]))

    def elaborate(self, platform) -> Module:
        m = Module()
        host, fetcher, bridge = self.host, self.fetcher, self.bridge
        m.submodules.host, m.submodules.fetcher, m.submodules.bridge = host, fetcher, bridge
        for name, mem in self.memories().items():
            m.submodules[name] = mem
        connect(m, flipped(self.s_axil), host.s_axil)
        connect(m, bridge.m_axi, flipped(self.m_axi))
        start = host.start
        m.d.comb += [self.irq.eq(host.irq), fetcher.start.eq(start), fetcher.program_base.eq(host.program_base),
                     fetcher.dram_bytes.eq(host.dram_bytes), bridge.clear.eq(start),
                     bridge.dram_bytes.eq(host.dram_bytes)]
        connect(m, fetcher.dram_read, bridge.read[READERS.index(FETCHER)])
        cycle = Signal(CYCLE_BITS)
        m.d.sync += cycle.eq(Mux(start, 1, cycle + 1))
        retired = {unit: Signal(COUNT_BITS, name=f"retired_{unit.name.lower()}") for unit in Unit}
        busy = {}
        unbanked = {buffer: mems[0] for buffer, mems in self.buffers.items() if buffer not in BANKED_BUFFERS}
        for unit, component in self.units.items():
            m.submodules[unit.name.lower()] = ResetInserter(start)(component)
            self._feed(m, unit, component, retired)
            busy[unit] = self._count(m, unit, component)
            self._attach_dram(m, unit, component, attach_buffer_ports(m, unbanked, component))
            if self.trace_depth:
                log_cycles(m, self.cycle_logs[unit], retired[unit], cycle, component)
        tokens = Module()
        unbalanced = token_queues(tokens, self.config.queues.token_depth, self.units)
        m.submodules.tokens = ResetInserter(start)(tokens)
        conflicts = self._attach_banks(m)
        finished = Cat(*(component.finished for component in self.units.values())).any()
        m.d.comb += host.done.eq(finished)
        self._errors(m, finished & unbalanced, busy, conflicts)
        return m

    def _attach_banks(self, m: Module) -> list[tuple[Value, Unit, Buffer]]:
        """Every unit port into a banked buffer onto its memories (rtl/banks.py). Returns (conflict level, the
        unit whose access found the ports taken, the buffer) per access."""
        conflicts = []
        for buffer in BANKED_BUFFERS:
            accesses = {"read": [], "write": []}
            for unit, component in self.units.items():
                for name in component.signature.members:
                    space = port_space(name)
                    if space is not None and space[0] == buffer:
                        accesses[space[1]].append(Access(unit, name, getattr(component, name)))
            conflicts += [(missed, access.unit, buffer) for access, missed in attach_banked_buffer(
                m, self.buffer_memories(buffer), accesses["read"], accesses["write"])]
        return conflicts

    def _feed(self, m: Module, unit: Unit, component: UnitComponent, retired: dict[Unit, Signal]) -> None:
        """The unit's commands from its FIFO while the run lasts; FINISH may run once the others retired all
        the commands the header counts."""
        stream = self.fetcher.command(unit)
        m.d.comb += [component.command.valid.eq(stream.valid & self.host.busy),
                     component.command.payload.eq(stream.payload),
                     stream.ready.eq(component.command.ready & self.host.busy)]
        with m.If(self.host.start):
            m.d.sync += retired[unit].eq(0)
        with m.Elif(component.retire):
            m.d.sync += retired[unit].eq(retired[unit] + 1)
        others = [retired[other] == self.fetcher.queue_lengths[other] for other in Unit if other != unit]
        m.d.comb += component.others_drained.eq(Cat(*others).all())

    def _count(self, m: Module, unit: Unit, component: UnitComponent) -> Signal:
        """The host's per-unit counter inputs: retire; busy from start to retire; waiting from the cycle after
        CHECK to start; a DRAM request refused while busy. Returns the busy level (a command executes)."""
        host, name = self.host, unit.name.lower()
        busy, checking, waiting = (Signal(name=f"{name}_{what}") for what in ("busy", "checking", "waiting"))
        taken = component.command.valid & component.command.ready
        m.d.sync += [busy.eq((busy | component.start) & ~component.retire), checking.eq(taken),
                     waiting.eq((waiting | checking) & ~component.start)]
        with m.If(host.start):
            m.d.sync += [busy.eq(0), checking.eq(0), waiting.eq(0)]
        ports = [getattr(component, port) for port in ("dram_read", "dram_write") if port in component.signature.members]
        refused = [port.valid & ~port.ready for port in ports]
        m.d.comb += [host.unit_retire[unit].eq(component.retire), host.unit_busy[unit].eq(busy),
                     host.unit_wait[unit].eq(waiting & ~component.start),
                     host.unit_dram_stall[unit].eq(busy & Cat(*refused).any() if refused else 0)]
        return busy

    def _attach_dram(self, m: Module, unit: Unit, component: UnitComponent, names: list[str]) -> None:
        """The unit's DRAM ports ``names`` onto the bridge: a reader on its ARID's port, STORE on the write port
        with ``writes_answered`` from the bridge's ``write_idle``."""
        for name in names:
            port = getattr(component, name)
            if name == "dram_write":
                connect(m, port, self.bridge.write)
                m.d.comb += component.writes_answered.eq(self.bridge.write_idle)
            else:
                connect(m, port, self.bridge.read[READERS.index(unit)])

    def _errors(self, m: Module, unbalanced: Value, busy: dict[Unit, Signal],
                conflicts: list[tuple[Value, Unit, Buffer]]) -> None:
        """The first error source, by priority, to the host's ERROR inputs (levels until START)."""
        host, fetcher, bridge = self.host, self.fetcher, self.bridge
        sources = [(fetcher.error, ErrorCause.PROGRAM_IMAGE, FETCHER, fetcher.error_field),
                   (bridge.error, bridge.error_cause, bridge.error_unit, bridge.error_field)]
        for unit, component in self.units.items():
            cause = Mux(busy[unit], ErrorCause.ENGINE_FAULT, ErrorCause.ILLEGAL_COMMAND)
            sources.append((component.error, cause, unit, component.error_field))
        sources += [(missed, ErrorCause.BANK_CONFLICT, unit, buffer) for missed, unit, buffer in conflicts]
        sources.append((unbalanced, ErrorCause.TOKEN_ERROR, 0, 0))
        for index, (condition, cause, unit, field) in enumerate(sources):
            with (m.Elif if index else m.If)(condition):
                m.d.comb += [host.error.eq(1), host.error_cause.eq(cause), host.error_unit.eq(unit),
                             host.error_field.eq(field)]
