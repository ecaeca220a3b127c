"""What every unit shares: taking a word from its queue, refusing it if illegal, the token handshake, FINISH.

A unit is a :class:`UnitComponent` subclass: it names its ``UNIT``, declares its buffer and DRAM ports
(:mod:`aipu.rtl.ports`) and implements :meth:`UnitComponent.elaborate_engine`, the datapath that executes
one legal command. The sequencer here does the rest, identically for every unit (docs/rtl.md, "Units"):

  IDLE   take the head word of the queue (``command`` stream) into a register
  CHECK  :class:`CommandChecker` on the word; illegal -> ERROR naming the field
  WAIT   every token the word pops is available and every queue it pushes into has room
         (FINISH instead: its pops and ``others_drained``) -> pop them, pulse ``start``
  EXEC   the engine runs; ``done`` -> pulse ``push`` and ``retire``, back to IDLE;
         ``fault`` -> ERROR naming the field the engine names
  ERROR  stops for good: ``error`` = 1, ``error_field`` indexes ``error_names``

The cycles of a command are counted from its ``start`` pulse to its ``retire`` pulse. IDLE, CHECK and the
cycle WAIT starts in are the fixed steps ``aipu.sim.timing.sequencer`` names (``FIRST_START``,
``NEXT_START``) for the cycle model; tests/rtl/test_system.py checks them here.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.commands import CommandChecker, command_layout, error_fields
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import COMMAND_BITS, Opcode, Unit

UNITS = len(Unit)


def control_members(error_names: tuple[str, ...]) -> dict:
    """The signature members every unit has besides its ports."""
    return {
        "command": In(stream.Signature(COMMAND_BITS)),   # the head of the unit's queue
        "pop_available": In(UNITS),    # bit u: the token queue u -> this unit holds a token
        "push_room": In(UNITS),        # bit u: the token queue this unit -> u has room
        "others_drained": In(1),       # every other queue has retired all its commands (for FINISH)
        "pop": Out(UNITS),             # one-cycle pulse: take one token from each queue u -> this unit
        "push": Out(UNITS),            # one-cycle pulse: put one token into each queue this unit -> u
        "start": Out(1),               # one-cycle pulse: the command's tokens are taken, it executes
        "retire": Out(1),              # one-cycle pulse: the command (FINISH included) has completed
        "finished": Out(1),            # FINISH has executed (sticky)
        "error": Out(1),               # the unit stopped on an illegal word or an engine fault (sticky)
        "error_field": Out(range(len(error_names))),   # index into error_names while ``error`` is 1
    }


class UnitComponent(wiring.Component):
    """A fixed-function unit: the shared sequencer plus the subclass's engine and ports."""

    UNIT: Unit
    ENGINE_ERRORS: tuple[str, ...] = ()   # error names the engine reports beyond the command's fields

    def __init__(self, config: HardwareConfig):
        self.config = config
        self.error_names = self.unit_error_names()
        super().__init__({**control_members(self.error_names), **self.ports(config)})

    @classmethod
    def unit_error_names(cls) -> tuple[str, ...]:
        """The names ``error_field`` indexes: the checker's fields, then the engine's own errors."""
        names = error_fields(cls.UNIT)
        return names + tuple(name for name in cls.ENGINE_ERRORS if name not in names)

    def ports(self, config: HardwareConfig) -> dict:
        """Signature members of the unit's buffer and DRAM ports (names per :mod:`aipu.rtl.ports`)."""
        return {}

    def error_index(self, name: str) -> int:
        return self.error_names.index(name)

    def view(self, word, opcode: Opcode) -> data.View:
        """``word`` read as the fields of ``opcode``."""
        return data.View(command_layout(self.config, opcode), word)

    def elaborate_engine(self, m: Module, word: Signal, start: Signal, done: Signal, fault: Signal,
                         fault_field: Signal) -> None:
        """Execute the legal, non-FINISH command in ``word`` (stable until ``done``), beginning in the cycle
        after ``start`` pulses. Drive ``done`` high for one cycle when it has completed, or ``fault`` (with
        ``fault_field`` = an ``error_index``) instead, before writing anything, when it cannot execute."""
        raise NotImplementedError

    def elaborate(self, platform) -> Module:
        m = Module()
        word = Signal(COMMAND_BITS)
        start, done = Signal(), Signal()
        fault, fault_field = Signal(), Signal.like(self.error_field)
        m.submodules.checker = checker = CommandChecker(self.config, self.UNIT)
        m.d.comb += checker.command.eq(word)
        header = self.view(word, Opcode.FINISH)
        pops_ready = (header.pop & ~self.pop_available) == 0
        pushes_ready = (header.push & ~self.push_room) == 0
        m.d.comb += self.start.eq(start)

        with m.FSM():
            with m.State("IDLE"):
                m.d.comb += self.command.ready.eq(1)
                with m.If(self.command.valid):
                    m.d.sync += word.eq(self.command.payload)
                    m.next = "CHECK"
            with m.State("CHECK"):
                with m.If(~checker.legal):
                    m.d.sync += self.error_field.eq(checker.error_field)
                    m.next = "ERROR"
                with m.Elif(header.opcode == Opcode.FINISH):
                    m.next = "FINISH"
                with m.Else():
                    m.next = "WAIT"
            with m.State("WAIT"):
                with m.If(pops_ready & pushes_ready):
                    m.d.comb += [self.pop.eq(header.pop), start.eq(1)]
                    m.next = "EXEC"
            with m.State("EXEC"):
                with m.If(fault):
                    m.d.sync += self.error_field.eq(fault_field)
                    m.next = "ERROR"
                with m.Elif(done):
                    m.d.comb += [self.push.eq(header.push), self.retire.eq(1)]
                    m.next = "IDLE"
            with m.State("FINISH"):
                with m.If(pops_ready & self.others_drained):
                    m.d.comb += [self.pop.eq(header.pop), self.start.eq(1), self.retire.eq(1)]
                    m.d.sync += self.finished.eq(1)
                    m.next = "HALTED"
            with m.State("HALTED"):
                pass
            with m.State("ERROR"):
                m.d.comb += self.error.eq(1)

        self.elaborate_engine(m, word, start, done, fault, fault_field)
        return m
