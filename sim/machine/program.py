"""Commands, their binary encoding, the program container file and the disassembler.

All field positions and widths come from the declarative tables in :mod:`aipu.sim.machine.isa`; nothing here
knows a particular command. A malformed word, file or listing raises :class:`~aipu.sim.machine.errors.InputError`
(a ``ValueError``) naming where (file, line or command and byte offset), the field, the value and what
is allowed.
"""
from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from aipu.sim.machine.arch import (CONFIG_FILE_BYTES_MAX, DEFAULT, HardwareConfig, hardware_config_from_text,
                                   short_hash)
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.files import read_at_most
from aipu.sim.machine.isa import COMMAND_BITS, COMMAND_BYTES, COMMANDS, ISA_LAYOUT_HASH, OPCODE_BITS, Opcode, Unit

_UNIT_NAMES = ", ".join(Unit.__members__)

def _unit_mask(units) -> int:
    return sum(1 << int(unit) for unit in units)


def _mask_units(mask: int) -> frozenset[Unit]:
    return frozenset(unit for unit in Unit if mask >> int(unit) & 1)


@dataclass(frozen=True)
class Command:
    """One command: opcode, dependency tokens and named field values (plain ints or IntEnums).

    ``pop`` names the units whose token queue (unit -> this unit) must hold a token before the command
    runs; ``push`` the units that receive a token (this unit -> unit) after it ran."""

    opcode: Opcode
    args: dict[str, int]
    pop: frozenset[Unit] = frozenset()
    push: frozenset[Unit] = frozenset()

    @classmethod
    def make(cls, opcode: Opcode, *, pop=(), push=(), **args: int) -> Command:
        """Build a command; fields not given take their smallest legal value (0, or 1 for sizes)."""
        spec = COMMANDS[Opcode(opcode)]
        names = {f.name for f in spec.fields}
        unknown = set(args) - names
        if unknown:
            raise InputError(f"{spec.opcode.name} fields", sorted(unknown),
                             f"unknown field; {spec.opcode.name} has {', '.join(names)}")
        full = {}
        for fld in spec.fields:
            value = args.get(fld.name, fld.minimum or 0)
            full[fld.name] = int(value) if isinstance(value, int) and not isinstance(value, bool) else value
        return cls(Opcode(opcode), full, frozenset(Unit(u) for u in pop), frozenset(Unit(u) for u in push))

    @property
    def spec(self):
        return COMMANDS[self.opcode]

    @property
    def unit(self) -> Unit:
        """The unit that executes this command (FINISH: the queue named in its ``unit`` field)."""
        return self.spec.unit if self.spec.unit is not None else Unit(self.args["unit"])

    def __post_init__(self) -> None:
        # Fields as plain attributes: the interpreter reads several per command, and a lookup that falls
        # through to __getattr__ costs more than the arithmetic it feeds. (A field named like a class
        # attribute, FINISH's ``unit``, stays in ``args`` only.)
        for name, value in self.args.items():
            if not hasattr(type(self), name):
                object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> int:
        args = self.__dict__.get("args", {})
        if name in args:
            return args[name]
        raise AttributeError(name)

    def __hash__(self) -> int:
        return hash((self.opcode, tuple(sorted(self.args.items())), self.pop, self.push))

    def validate(self, config: HardwareConfig = DEFAULT, ranges: dict | None = None) -> None:
        """Raise InputError naming the first field outside its legal range. ``ranges``: a dict the caller
        keeps for one configuration, where the legal ranges are remembered from command to command."""
        name = self.opcode.name
        ranges = {} if ranges is None else ranges
        if not self._fields_legal(config, ranges):       # find the first bad field and say why
            for fld in self.spec.fields:
                if fld.name not in self.args:
                    raise InputError(f"{name} field {fld.name}", None, "missing; every field needs a value")
                _check_field(name, fld, self.args[fld.name], config, ranges)
        for direction, units in (("pop", self.pop), ("push", self.push)):
            if self.unit in units:
                raise InputError(f"{name} field {direction}", sorted(u.name for u in units),
                                 f"names its own unit {self.unit.name}")
        if self.opcode == Opcode.FINISH and self.push:
            raise InputError("FINISH field push", sorted(u.name for u in self.push), "FINISH may not push")

    def _fields_legal(self, config: HardwareConfig, ranges: dict) -> bool:
        """Whether every field is a plain int within its legal values: one pass over bounds remembered per
        opcode in ``ranges`` (a program validates thousands of commands of a few opcodes)."""
        bounds = ranges.get(("bounds", self.opcode))
        if bounds is None:
            bounds = ranges[("bounds", self.opcode)] = [
                (fld.name, fld.legal_ints, *((0, 0) if fld.legal_ints is not None else fld.legal_range(config)))
                for fld in self.spec.fields]
        args = self.args
        for field_name, legal_ints, low, high in bounds:
            value = args.get(field_name)
            if type(value) is not int or (value not in legal_ints if legal_ints is not None
                                          else not low <= value <= high):
                return False
        return True

    def encode(self, config: HardwareConfig = DEFAULT) -> bytes:
        self.validate(config)
        word = 0
        for fld, offset, width in self.spec.layout(config):
            if fld.name == "opcode":
                value = int(self.opcode)
            elif fld.name in ("pop", "push"):
                value = _unit_mask(getattr(self, fld.name))
            else:
                value = int(self.args[fld.name])
            word |= (value & ((1 << width) - 1)) << offset
        return word.to_bytes(COMMAND_BYTES, "little")

    @classmethod
    def decode(cls, data: bytes, config: HardwareConfig = DEFAULT) -> Command:
        if len(data) != COMMAND_BYTES:
            raise InputError("command word", f"{len(data)} bytes", f"expected {COMMAND_BYTES}")
        word = int.from_bytes(data, "little")
        raw_opcode = word & ((1 << OPCODE_BITS) - 1)      # the opcode is always the lowest field
        if raw_opcode not in {int(op) for op in Opcode}:
            raise InputError("field opcode", raw_opcode,
                             "unknown opcode; opcodes are " + ", ".join(f"{op.name}={int(op)}" for op in Opcode))
        spec = COMMANDS[Opcode(raw_opcode)]
        layout = spec.layout(config)
        used = layout[-1][1] + layout[-1][2]
        if word >> used:
            raise InputError(f"{spec.opcode.name}: reserved bits {used}..{COMMAND_BITS - 1}", word >> used,
                             "must be zero")
        values = {}
        for fld, offset, width in layout:
            raw = word >> offset & ((1 << width) - 1)
            values[fld.name] = raw - (1 << width) if fld.signed and raw >> (width - 1) else raw
        for direction in ("pop", "push"):
            if values[direction] >> len(Unit):
                raise InputError(f"{spec.opcode.name} field {direction}", values[direction],
                                 f"bit {len(Unit)} and up name no unit (units are {_UNIT_NAMES})")
        command = cls.make(spec.opcode, pop=_mask_units(values.pop("pop")), push=_mask_units(values.pop("push")),
                           **{k: v for k, v in values.items() if k != "opcode"})
        command.validate(config)
        return command

    def describe(self, config: HardwareConfig = DEFAULT) -> str:
        """One readable line: opcode, tokens, then every field by name."""
        tokens = (f"pop[{','.join(u.name for u in sorted(self.pop))}] "
                  f"push[{','.join(u.name for u in sorted(self.push))}]")
        parts = []
        for fld in self.spec.fields:
            value = self.args[fld.name]
            if fld.choices is not None:
                text = type(fld.legal_values()[0])(value).name
            elif fld.name.endswith("_addr"):
                text = f"{value:#x}"
            else:
                text = str(value)
            parts.append(f"{fld.name}={text}")
        return f"{self.opcode.name:<8} {tokens:<28} {' '.join(parts)}"


def _check_field(command_name: str, fld, value, config: HardwareConfig, ranges: dict) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{command_name} field {fld.name}", value, "expected an integer")
    if fld.legal_ints is not None:
        if value not in fld.legal_ints:
            raise InputError(f"{command_name} field {fld.name}", int(value),
                             "not one of " + ", ".join(f"{v.name}={int(v)}" for v in fld.legal_values()))
        return
    bounds = ranges.get(id(fld))       # the ISA's fields live as long as the module: ids are stable
    if bounds is None:
        bounds = ranges[id(fld)] = fld.legal_range(config)
    low, high = bounds
    if not low <= value <= high:
        raise InputError(f"{command_name} field {fld.name}", value, f"outside legal range {low}..{high}")


# --- Program container ---------------------------------------------------------------------------
MAGIC = b"AIPUPROG"
FORMAT_VERSION = 9     # 2: fixed-width token masks (isa.TOKEN_MASK_BITS) and the ISA layout hash; 3: SOFTMAX; 4: DWCONV;
                       # 5: INT4 operands (CONV w_type, in_type INT4); 6: codebook weights (LOAD index_bits);
                       # 7: REQUANT INT4 outputs and dual; 8: WDEC parts (streams split for parallel engines);
                       # 9: LOAD circ_size (block-circulant weights expanded on chip)
_HEADER = struct.Struct("<8sHH16s16sI")   # magic, version, queues, config hash, ISA layout hash, config length
_CRC = struct.Struct("<I")
MAX_PROGRAM_BYTES = 1 << 24    # 512 K commands, 250 times a ResNet-18's; what a program's objects may hold
MAX_LISTING_BYTES = 1 << 26    # about as many listing lines


@dataclass
class Program:
    """Per-unit command queues plus the configuration they were encoded for."""

    config: HardwareConfig = DEFAULT
    queues: dict[Unit, list[Command]] = field(default_factory=lambda: {unit: [] for unit in Unit})

    def append(self, command: Command) -> Command:
        self.queues[command.unit].append(command)
        return command

    def __len__(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def validate(self) -> None:
        """Every command legal and in its unit's queue; exactly one FINISH, last in its queue."""
        finishes = []
        ranges: dict = {}
        for unit, queue in self.queues.items():
            for index, command in enumerate(queue):
                try:
                    command.validate(self.config, ranges)
                except InputError as exc:
                    raise exc.within(f"{unit.name}[{index}]") from None
                if command.unit != unit:
                    raise InputError(f"{unit.name}[{index}]", command.opcode.name,
                                     f"belongs to queue {command.unit.name}")
                if command.opcode == Opcode.FINISH:
                    finishes.append((unit, index))
                    if index != len(queue) - 1:
                        raise InputError(f"{unit.name}[{index}]", "FINISH", "FINISH must be the last command of "
                                         f"its queue, which has {len(queue)}")
        if len(finishes) != 1:
            raise InputError("FINISH commands", len(finishes), "a program has exactly 1")

    def to_bytes(self) -> bytes:
        self.validate()
        config_json = json.dumps(self.config.to_dict(), sort_keys=True).encode()
        parts = [_HEADER.pack(MAGIC, FORMAT_VERSION, len(Unit), self.config.config_hash().encode(),
                              ISA_LAYOUT_HASH.encode(), len(config_json)), config_json]
        parts.append(struct.pack(f"<{len(Unit)}I", *(len(self.queues[unit]) for unit in Unit)))
        for unit in Unit:
            parts.extend(command.encode(self.config) for command in self.queues[unit])
        body = b"".join(parts)
        return body + _CRC.pack(zlib.crc32(body))

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "program") -> Program:
        """Check every item of a program file before use; errors name ``source`` and the byte offset."""
        try:
            return cls._from_bytes(data)
        except InputError as exc:
            raise exc.within(source) from None

    @classmethod
    def _from_bytes(cls, data: bytes) -> Program:
        if data[:len(MAGIC)] != MAGIC:
            raise InputError("magic", data[:len(MAGIC)], f"expected {MAGIC!r}: not an AIPU program")
        if len(data) < _HEADER.size + _CRC.size:
            raise InputError("size", len(data), f"truncated: header and checksum need {_HEADER.size + _CRC.size} bytes")
        _, version, n_queues, config_hash, layout_hash, config_len = _HEADER.unpack_from(data)
        if version != FORMAT_VERSION:
            raise InputError("format version", version, f"this reader understands {FORMAT_VERSION}")
        if layout_hash != ISA_LAYOUT_HASH.encode():
            raise InputError("ISA layout", layout_hash.decode(errors="replace"), f"this build's layout is "
                             f"{ISA_LAYOUT_HASH}; re-assemble or recompile the program")
        if n_queues != len(Unit):
            raise InputError("queues", n_queues, f"expected {len(Unit)} (one per unit)")
        offset = _HEADER.size
        counts_size = 4 * n_queues
        if config_len > CONFIG_FILE_BYTES_MAX:
            raise InputError("configuration length", config_len, f"at most {CONFIG_FILE_BYTES_MAX} bytes")
        if len(data) < offset + config_len + counts_size + _CRC.size:
            raise InputError("configuration length", config_len, f"truncated: does not fit in {len(data)} bytes")
        try:
            config = hardware_config_from_text(data[offset:offset + config_len])
        except InputError as exc:
            raise exc.within(f"embedded configuration at byte {offset}") from None
        # A program written before a configuration key existed hashes its configuration without it (the key
        # takes its default); otherwise the hash covers every key.
        as_written = short_hash(json.loads(data[offset:offset + config_len]))
        if config_hash not in (config.config_hash().encode(), as_written.encode()):
            raise InputError("configuration hash", config_hash.decode(errors="replace"),
                             f"the embedded configuration hashes to {config.config_hash()}")
        offset += config_len
        counts = struct.unpack_from(f"<{n_queues}I", data, offset)
        offset += counts_size
        expected = offset + COMMAND_BYTES * sum(counts) + _CRC.size
        if len(data) != expected:
            raise InputError("size", len(data), f"expected {expected} bytes for {sum(counts)} commands "
                             f"({'truncated' if len(data) < expected else 'trailing data'})")
        (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
        if crc != zlib.crc32(data[:-_CRC.size]):
            raise InputError("checksum", f"{crc:#010x}",
                             f"the contents give {zlib.crc32(data[:-_CRC.size]):#010x} (checksum mismatch: corrupted)")
        program = cls(config)
        for unit, count in zip(Unit, counts):
            for index in range(count):
                try:
                    program.queues[unit].append(Command.decode(data[offset:offset + COMMAND_BYTES], config))
                except InputError as exc:
                    raise exc.within(f"{unit.name}[{index}] at byte {offset}") from None
                offset += COMMAND_BYTES
        program.validate()
        return program

    def write(self, path) -> None:
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def read(cls, path) -> Program:
        return cls.from_bytes(read_at_most(path, MAX_PROGRAM_BYTES), source=str(path))

    def disassemble(self) -> str:
        """The listing printed by ``aipu disasm``: one command per line, grouped by queue."""
        return "".join(self.listing_lines())

    def listing_lines(self):
        """The listing's lines, each with its newline, one at a time (``aipu disasm`` writes them as they come)."""
        yield (f"; AIPU program, format v{FORMAT_VERSION}, ISA layout {ISA_LAYOUT_HASH}, "
               f"config {self.config.config_hash()}, "
               f"{len(self)} commands, MAC {self.config.mac.rows}x{self.config.mac.cols}\n")
        for unit in Unit:
            queue = self.queues[unit]
            if queue:
                yield f"; queue {unit.name}: {len(queue)} commands\n"
                for index, command in enumerate(queue):
                    yield f"{unit.name}[{index}]".ljust(13) + command.describe(self.config) + "\n"

    @classmethod
    def assemble(cls, text: str, config: HardwareConfig = DEFAULT, source: str = "listing") -> Program:
        """Parse a listing in the :meth:`disassemble` format back into a program (``aipu asm``).

        Lines: ``UNIT[index] OPCODE pop[UNITS] push[UNITS] field=value ...``; values are integers
        (decimal or 0x hex) or enumeration names; ``;`` starts a comment. Errors name ``source`` and
        the line."""
        program = cls(config)
        try:
            for number, raw in enumerate(text.splitlines(), 1):
                line = raw.split(";", 1)[0].split()
                if line:
                    try:
                        command, index = _parse_command(line, config)
                        if index != len(program.queues[command.unit]):
                            raise InputError("index", line[0], f"{command.unit.name}"
                                             f"[{len(program.queues[command.unit])}], the command's place in its "
                                             "queue")
                        program.append(command)
                    except InputError as exc:
                        raise exc.within(f"line {number}") from None
            program.validate()
        except InputError as exc:
            raise exc.within(source) from None
        return program

    @classmethod
    def read_listing(cls, path, config: HardwareConfig = DEFAULT) -> Program:
        """Assemble the listing file ``path``; it must be UTF-8 text."""
        data = read_at_most(path, MAX_LISTING_BYTES)
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            raise InputError(f"byte {exc.start}", data[exc.start:exc.start + 1], "a listing is UTF-8 text") \
                .within(path) from None
        return cls.assemble(text, config, source=str(path))


def _parse_units(token: str, name: str) -> list[Unit]:
    if not (token.startswith(name + "[") and token.endswith("]")):
        raise InputError(name, token, f"expected {name}[UNIT,...] (empty or units from {_UNIT_NAMES})")
    inner = token[len(name) + 1:-1]
    units = inner.split(",") if inner else []
    for unit in units:
        if unit not in Unit.__members__:
            raise InputError(name, unit, f"not a unit; units are {_UNIT_NAMES}")
    return [Unit[unit] for unit in units]


def _parse_value(opcode: str, fld, text: str) -> int:
    """A field value: an integer (decimal or 0x hex) or, for an enumerated field, a member name."""
    choices = fld.legal_values()
    if choices is not None and text.lstrip("-") and not text.lstrip("-")[0].isdigit():
        members = type(choices[0]).__members__
        if text not in members:
            raise InputError(f"{opcode} field {fld.name}", text, "not one of " + ", ".join(c.name for c in choices))
        return int(members[text])
    try:
        return int(text, 0)
    except ValueError:
        raise InputError(f"{opcode} field {fld.name}", text, "expected an integer (decimal or 0x hex)"
                         + (" or a name" if choices is not None else "")) from None


def _parse_command(tokens: list[str], config: HardwareConfig) -> tuple[Command, int]:
    """The command of one listing line and the index its ``QUEUE[i]`` gives."""
    queue, _, index = tokens[0].partition("[")
    if queue not in Unit.__members__:
        raise InputError("queue", queue, f"unknown queue; queues are {_UNIT_NAMES}")
    if not (index.endswith("]") and index[:-1].isdecimal() and len(index) <= 12):
        raise InputError("queue", tokens[0], f"{queue}[i], the command's place in its queue")
    if len(tokens) < 2 or tokens[1] not in Opcode.__members__:
        raise InputError("opcode", tokens[1] if len(tokens) > 1 else "",
                         "expected QUEUE[i] OPCODE pop[..] push[..] field=value ..., opcodes are "
                         + ", ".join(Opcode.__members__))
    spec = COMMANDS[Opcode[tokens[1]]]
    if len(tokens) < 4:
        raise InputError("tokens", " ".join(tokens[2:]), f"expected pop[..] push[..] after {spec.opcode.name}")
    by_name = {fld.name: fld for fld in spec.fields}
    args = {}
    for item in tokens[4:]:
        name, equals, text = item.partition("=")
        if name not in by_name:
            raise InputError(f"{spec.opcode.name} field {name}", text,
                             f"no such field; {spec.opcode.name} has {', '.join(by_name)}")
        if not equals or name in args:
            raise InputError(f"{spec.opcode.name} field {name}", item,
                             "expected field=value, each field at most once")
        args[name] = _parse_value(spec.opcode.name, by_name[name], text)
    command = Command.make(spec.opcode, pop=_parse_units(tokens[2], "pop"), push=_parse_units(tokens[3], "push"),
                           **args)
    command.validate(config)   # first: a FINISH's queue is its (checked) unit field
    if command.unit.name != queue:
        raise InputError("queue", queue, f"{spec.opcode.name} executes in queue {command.unit.name}")
    missing = [name for name in by_name if name not in args]
    if missing:
        raise InputError(f"{spec.opcode.name} fields", ", ".join(missing), "every field given, as the "
                                                                          "disassembler writes them")
    return command, int(index[:-1])
