"""The host register block as docs/registers.md describes it, transaction by transaction: what each read returns,
what each write answers and changes, and the run state with its counters, cycle by cycle (no bus timing: a
write is applied in the cycle the bus's testbench says it takes effect).

Built on the register table alone (:mod:`aipu.sim.machine.registers`), never on rtl/host.py: the RTL tests
(Amaranth and cocotb) compare every response of the RTL with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import Unit
from aipu.sim.machine.registers import (ADDRESS_BITS, BY_NAME, BY_OFFSET, COUNTER_BITS, DATA_BITS, DATA_BYTES,
                                        REGISTERS, UNIT_COUNTERS, Access, ErrorCause, Response, counter_name,
                                        field_value)

WORD = (1 << DATA_BITS) - 1


def place(register: str, field_name: str, value: int) -> int:
    """``value`` at the position of ``register``'s field ``field_name``."""
    fld = next(f for f in BY_NAME[register].fields if f.name == field_name)
    return value << fld.lsb


def strobe_bits(strobe: int) -> int:
    return sum(0xFF << (8 * i) for i in range(DATA_BYTES) if strobe >> i & 1)


@dataclass
class CoreInputs:
    """What the core drives in one cycle: done, an error report, and each counter's bit per unit."""

    done: bool = False
    error: tuple[int, int, int] | None = None                 # (cause, unit, field)
    units: dict[str, int] = field(default_factory=dict)      # counter input name -> bit mask over units


class HostModel:
    def __init__(self, config: HardwareConfig):
        self.config = config
        self.stored = {r.name: r.reset_value(config) for r in REGISTERS}
        self.running = self.finished = self.failed = False
        self.error_word = self.cycles = self.cycles_high = 0
        self.counters = {counter_name(unit, c): 0 for unit in Unit for c in UNIT_COUNTERS}
        self.pulses: list[str] = []           # "start" / "abort" of the writes applied so far

    @property
    def irq(self) -> bool:
        return bool(self.stored["IRQ_STATUS"] & self.stored["IRQ_ENABLE"])

    def _stop(self, error_word: int | None) -> None:
        self.running = False
        if error_word is None:
            self.finished = True
            self.stored["IRQ_STATUS"] |= place("IRQ_STATUS", "DONE", 1)
        else:
            self.failed, self.error_word = True, error_word
            self.stored["IRQ_STATUS"] |= place("IRQ_STATUS", "ERROR", 1)

    def _write(self, address: int, data: int, strobe: int) -> tuple[Response, bool]:
        """(the response, whether the write is refused: it targets a register that may not change while busy)."""
        offset = (address % (1 << ADDRESS_BITS)) & ~(DATA_BYTES - 1)
        register = BY_OFFSET.get(offset)
        if register is None or not register.writable:
            return Response.SLVERR, False
        if self.running and not register.writable_while_busy:
            self.pulses.append("abort")
            return Response.SLVERR, True
        bits = data & strobe_bits(strobe) & register.mask(self.config)
        if register.access is Access.RW:
            keep = strobe_bits(strobe) & register.mask(self.config)
            self.stored[register.name] = (self.stored[register.name] & ~keep) | bits
        elif register.access is Access.W1C:
            self.stored[register.name] &= ~bits
        elif field_value("CONTROL", "START", bits):
            self.pulses.append("start")
            self.running, self.finished, self.failed = True, False, False
            self.error_word = self.cycles = 0
            self.counters = dict.fromkeys(self.counters, 0)
        return Response.OKAY, False

    def read(self, address: int) -> tuple[Response, int]:
        register = BY_OFFSET.get((address % (1 << ADDRESS_BITS)) & ~(DATA_BYTES - 1))
        if register is None:
            return Response.SLVERR, 0
        name = register.name
        if name == "CYCLES_LO":
            self.cycles_high = self.cycles >> DATA_BITS
        value = {"CONTROL": 0, "ERROR": self.error_word, "CYCLES_LO": self.cycles & WORD,
                 "CYCLES_HI": self.cycles_high,
                 "STATUS": place("STATUS", "BUSY", self.running) | place("STATUS", "DONE", self.finished)
                 | place("STATUS", "ERROR", self.failed)}.get(name, self.counters.get(name, self.stored[name]))
        return Response.OKAY, value & register.mask(self.config)

    def cycle(self, inputs: CoreInputs, write: tuple[int, int, int] | None = None) -> Response | None:
        """One clock cycle: the ``write`` (address, data, strobe) that takes effect in it, if any, and the core's
        ``inputs``. While busy the cycle is counted, then the first of the core's error, a refused write and done
        ends the run. Returns the write's response."""
        running = self.running
        response, refused = self._write(*write) if write is not None else (None, False)
        if not running:
            return response
        self.cycles += 1
        for unit in Unit:
            for counter in UNIT_COUNTERS:
                if inputs.units.get(counter.input, 0) >> unit & 1:
                    name = counter_name(unit, counter)
                    self.counters[name] = min(self.counters[name] + 1, (1 << COUNTER_BITS) - 1)
        if inputs.error is not None:
            cause, unit, detail = inputs.error
            self._stop(place("ERROR", "CAUSE", cause) | place("ERROR", "UNIT", unit) | place("ERROR", "FIELD", detail))
        elif refused:
            offset = (write[0] % (1 << ADDRESS_BITS)) & ~(DATA_BYTES - 1)
            self._stop(place("ERROR", "CAUSE", ErrorCause.REGISTER_WRITE_WHILE_BUSY) | place("ERROR", "FIELD", offset))
        elif inputs.done:
            self._stop(None)
        return response
