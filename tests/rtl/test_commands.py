"""rtl/commands.py against sim.machine.program: the same bits for the same fields, the same verdict on a word."""
from __future__ import annotations

import re

from amaranth.back import verilog
from amaranth.hdl import Module
from amaranth.sim import Simulator
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from aipu.rtl.commands import RESERVED, CommandChecker, command_layout, unit_opcodes
from tests.rtl.configs import EVERY_CONFIG
from aipu.sim.machine.arch import DEFAULT, bit_range
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import COMMAND_BITS, COMMAND_BYTES, COMMANDS, HEADER_FIELDS, Opcode, Unit
from aipu.sim.machine.program import Command

PER_OPCODE = 4   # commands of each opcode per simulation: one simulator run checks many words, so the file stays fast
# One simulation per example: shrinking would re-run it thousands of times; a failure names its word instead.
SIMULATED = settings(max_examples=2, deadline=None, phases=(Phase.explicit, Phase.reuse, Phase.generate))


def _legal_value(fld, config):
    if fld.legal_values() is not None:
        return st.sampled_from([int(member) for member in fld.legal_values()])
    return st.integers(*fld.legal_range(config))


@st.composite
def legal_commands(draw, config, opcode: Opcode):
    """An ``opcode`` command that sim.machine.program encodes (every field legal, tokens naming other units only)."""
    spec = COMMANDS[opcode]
    args = {fld.name: draw(_legal_value(fld, config)) for fld in spec.fields}
    unit = spec.unit if spec.unit is not None else Unit(args["unit"])
    others = [u for u in Unit if u != unit]
    pop = draw(st.sets(st.sampled_from(others)))
    push = set() if spec.opcode == Opcode.FINISH else draw(st.sets(st.sampled_from(others)))
    return Command.make(spec.opcode, pop=pop, push=push, **args)


def _draw_every_opcode(data, config) -> list[Command]:
    return [command for opcode in Opcode
            for command in data.draw(st.lists(legal_commands(config, opcode), min_size=PER_OPCODE,
                                              max_size=PER_OPCODE))]


def _word(command, config) -> int:
    return int.from_bytes(command.encode(config), "little")


def _illegal_values(fld, width, command, config) -> list[int]:
    """Raw values of ``fld`` the decoder (or, for FINISH's queue, the queue check) refuses in ``command``."""
    if fld.name in ("pop", "push"):
        return [1 << bit for bit in range(len(Unit), width)] + [1 << int(command.unit)]
    if fld.name == "opcode":
        return [op for op in range(1 << width) if op not in unit_opcodes(command.unit)]
    if command.opcode == Opcode.FINISH and fld.name == "unit":
        # another queue, but not one this FINISH pops from (the decoder would name pop first: its own unit)
        return [u for u in range(1 << width) if u != command.unit and u not in command.pop]
    if fld.legal_values() is not None:
        return [v for v in range(1 << width) if v not in [int(member) for member in fld.legal_values()]]
    (low, high), (lowest, highest) = fld.legal_range(config), bit_range(width, fld.signed)
    return [v for v in (lowest, low - 1, high + 1, highest) if not low <= v <= high and lowest <= v <= highest]


@st.composite
def corrupted_words(draw, config, opcode: Opcode):
    """[(word, unit)]: a legal ``opcode`` command of ``unit`` with, in turn, each field (and the reserved bits)
    made illegal."""
    command = draw(legal_commands(config, opcode))
    placed = command.spec.layout(config)
    candidates = [(offset, width, st.sampled_from(bad)) for fld, offset, width in placed
                  if (bad := _illegal_values(fld, width, command, config))]
    used = placed[-1][1] + placed[-1][2]
    if used < COMMAND_BITS:
        candidates.append((used, COMMAND_BITS - used, st.integers(1, (1 << COMMAND_BITS - used) - 1)))
    word = _word(command, config)
    return [(word & ~(((1 << width) - 1) << offset) | (draw(values) & ((1 << width) - 1)) << offset, command.unit)
            for offset, width, values in candidates]


def _refused_field(word: int, config, unit: Unit) -> str | None:
    """The field sim.machine.program refuses ``word`` in ``unit``'s queue by (None: accepted).

    A word of another unit's opcode is refused by its queue (Program.validate) before its fields mean anything."""
    opcode_bits = HEADER_FIELDS[0].width(config)
    raw_opcode = word & ((1 << opcode_bits) - 1)
    if raw_opcode in list(Opcode) and raw_opcode not in unit_opcodes(unit):
        return "opcode"
    try:
        command = Command.decode(word.to_bytes(COMMAND_BYTES, "little"), config)
    except InputError as error:
        if "reserved bits" in error.field:
            return RESERVED
        return re.fullmatch(r"(?:\w+ )?field (\w+)", error.field).group(1)
    return None if command.unit == unit else "unit"


def _check_words(config, cases: list[tuple[int, Unit]]) -> list[tuple[int, str | None]]:
    """Run every (word, unit) through that unit's checker in one simulation; (legal, error name) per word."""
    m = Module()
    checkers = {unit: CommandChecker(config, unit) for unit in Unit}
    for unit, checker in checkers.items():
        m.submodules[unit.name.lower()] = checker
    verdicts = []

    async def testbench(ctx):
        for word, unit in cases:
            checker = checkers[unit]
            ctx.set(checker.command, word)
            legal = ctx.get(checker.legal)
            verdicts.append((legal, None if legal else checker.error_fields[ctx.get(checker.error_field)]))

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
    return verdicts


def _assert_verdicts(config, cases, expected) -> None:
    for (word, unit), got, wanted in zip(cases, _check_words(config, cases), expected, strict=True):
        assert got == wanted, f"{unit.name} checker on {word:#066x}: (legal, error) {got}, software {wanted}"


@EVERY_CONFIG
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_layout_packs_like_the_encoder(config, data):
    for opcode in Opcode:
        layout = command_layout(config, opcode)
        placed = COMMANDS[opcode].layout(config)
        assert layout.size == COMMAND_BITS
        assert [(name, f.offset, f.width, f.shape.signed) for name, f in layout] == \
            [(fld.name, offset, width, fld.signed) for fld, offset, width in placed]
    for command in _draw_every_opcode(data, config):
        fields = {"opcode": command.opcode, "pop": sum(1 << u for u in command.pop),
                  "push": sum(1 << u for u in command.push), **command.args}
        assert command_layout(config, command.opcode).const(fields).as_bits() == _word(command, config)


@EVERY_CONFIG
@SIMULATED
@given(data=st.data())
def test_checker_accepts_legal_commands(config, data):
    commands = _draw_every_opcode(data, config)
    cases = [(_word(command, config), command.unit) for command in commands]
    _assert_verdicts(config, cases, [(1, None)] * len(cases))


@EVERY_CONFIG
@SIMULATED
@given(data=st.data())
def test_checker_refuses_what_the_decoder_refuses(config, data):
    cases = [case for opcode in Opcode
             for words in data.draw(st.lists(corrupted_words(config, opcode), min_size=PER_OPCODE,
                                             max_size=PER_OPCODE))
             for case in words]
    expected = [(0, _refused_field(word, config, unit)) for word, unit in cases]
    assert all(name is not None for _, name in expected)
    _assert_verdicts(config, cases, expected)


def test_checker_converts_to_verilog():
    text = verilog.convert(CommandChecker(DEFAULT, Unit.CONV), name="conv_command_checker")
    assert "module conv_command_checker" in text
    for port in ("command", "legal", "error_field"):
        assert re.search(rf"\b(input|output)\b[^;]*\b{port}\b", text)
