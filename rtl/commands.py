"""Command words as Amaranth layouts, and the checker that stops a unit before it runs an illegal word.

Every offset, width, legal range, enumeration and opcode-to-unit assignment is read from
:mod:`aipu.sim.machine.isa` at elaboration time, so the RTL reads words exactly as
:mod:`aipu.sim.machine.program` packs them and refuses what its decoder refuses.
"""
from __future__ import annotations

import functools

from amaranth.hdl import Cat, Module, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from aipu.sim.machine.arch import HardwareConfig, bit_range
from aipu.sim.machine.isa import COMMAND_BITS, COMMANDS, HEADER_FIELDS, Opcode, Unit

RESERVED = "reserved"   # error name of the bits above a command's last field (they must be zero)


@functools.cache
def command_layout(config: HardwareConfig, opcode: Opcode) -> data.FlexibleLayout:
    """The COMMAND_BITS-bit word of ``opcode``: header and fields at ``CommandSpec.layout(config)``'s offsets."""
    return data.FlexibleLayout(COMMAND_BITS, {
        fld.name: data.Field(signed(width) if fld.signed else unsigned(width), offset)
        for fld, offset, width in COMMANDS[Opcode(opcode)].layout(config)})


def unit_opcodes(unit: Unit) -> tuple[Opcode, ...]:
    """The opcodes ``unit``'s queue may hold: its own commands and those of no fixed unit (FINISH)."""
    return tuple(spec.opcode for spec in COMMANDS.values() if spec.unit in (unit, None))


def error_fields(unit: Unit) -> tuple[str, ...]:
    """Names of the checker's ``error_field`` values: the header, the reserved bits, then every field of the
    unit's commands (a name shared by two of them is one entry)."""
    names = [fld.name for fld in HEADER_FIELDS] + [RESERVED]
    for opcode in unit_opcodes(unit):
        names += [fld.name for fld in COMMANDS[opcode].fields if fld.name not in names]
    return tuple(names)


class CommandChecker(wiring.Component):
    """Decides, combinationally, whether ``unit`` may execute a command word; the unit stops on ``legal == 0``.

    Signature:
      ``command``     In(COMMAND_BITS)   the word at the head of the unit's queue
      ``legal``       Out(1)             1: every field holds a legal value for this unit and configuration
      ``error_field`` Out(range(len(error_fields)))   when ``legal`` is 0: index into ``self.error_fields`` of
                                         the first field refused, in the order of
                                         ``sim.machine.program.Command.decode``: opcode (unknown, or another
                                         unit's), reserved bits, token-mask bits naming no unit, each field in
                                         table order (a FINISH whose ``unit`` is not this unit included),
                                         a token mask naming this unit, a FINISH that pushes
    """

    def __init__(self, config: HardwareConfig, unit: Unit):
        self.config, self.unit = config, Unit(unit)
        self.error_fields = error_fields(self.unit)
        super().__init__({"command": In(COMMAND_BITS), "legal": Out(1),
                          "error_field": Out(range(len(self.error_fields)))})

    def elaborate(self, platform) -> Module:
        m = Module()
        m.d.comb += self.legal.eq(1)
        opcodes = unit_opcodes(self.unit)
        header = data.View(command_layout(self.config, opcodes[0]), self.command)   # every layout starts with it
        with m.Switch(header.opcode):
            for opcode in opcodes:
                with m.Case(opcode):
                    self._refuse_first(m, self._violations(opcode))
            with m.Default():
                self._refuse(m, HEADER_FIELDS[0].name)
        return m

    def _violations(self, opcode: Opcode) -> list[tuple]:
        """(condition, error name) pairs in the order the software decoder checks them."""
        spec, placed = COMMANDS[opcode], COMMANDS[opcode].layout(self.config)
        view = data.View(command_layout(self.config, opcode), self.command)
        token_masks = [fld.name for fld in HEADER_FIELDS[1:]]
        used = placed[-1][1] + placed[-1][2]
        found = [(self.command[used:].any(), RESERVED)] if used < COMMAND_BITS else []
        found += [(view[name][len(Unit):].any(), name) for name in token_masks]
        for fld, _, width in placed[len(HEADER_FIELDS):]:
            value = view[fld.name]
            if spec.unit is None and fld.name == "unit":      # FINISH: the queue it sits in must be this one
                found.append((value != self.unit, fld.name))
            elif fld.legal_values() is not None:
                found.append((~Cat(*(value == member for member in fld.legal_values())).any(), fld.name))
            else:
                (low, high), (lowest, highest) = fld.legal_range(self.config), bit_range(width, fld.signed)
                if low > lowest:
                    found.append((value < low, fld.name))
                if high < highest:
                    found.append((value > high, fld.name))
        found += [(view[name][self.unit], name) for name in token_masks]
        if opcode == Opcode.FINISH:
            found.append((view.push.any(), "push"))
        return found

    def _refuse_first(self, m: Module, violations: list[tuple]) -> None:
        for index, (condition, name) in enumerate(violations):
            with (m.Elif if index else m.If)(condition):
                self._refuse(m, name)

    def _refuse(self, m: Module, name: str) -> None:
        m.d.comb += [self.legal.eq(0), self.error_field.eq(self.error_fields.index(name))]
