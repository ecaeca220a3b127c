"""The host register block: the map a driver programs and watches the NPU through, as one table.

Every register's byte offset, access, reset value and bit fields are written here once: docs/registers.md
(app/register_doc.py), the RTL (rtl/host.py) and its tests are driven by this table, as the command format is
by :mod:`aipu.sim.machine.isa`. Registers are 32 bits wide on a 32-bit AXI4-Lite data bus, at 4-byte aligned
byte offsets. A few widths and constants depend on the hardware configuration (the DRAM address width, the
identity words); they are named here and computed by :func:`register_widths` and :func:`constant_values`.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum

from aipu.sim.machine.arch import WIDEST, HardwareConfig
from aipu.sim.machine.isa import ISA_LAYOUT_HASH, Unit

DATA_BITS = 32
DATA_BYTES = DATA_BITS // 8
ADDRESS_BITS = 12               # the block answers a 4 KiB window; the address's two lowest bits are ignored
REGISTER_MAP_VERSION = 1        # raised whenever a register moves, changes meaning or is removed
ID_MAGIC = 0x41495055           # "AIPU" in ASCII, "A" in the top byte
FETCHER = 0xFF                  # ERROR.UNIT of a requester that is no unit: the command fetcher


class Access(Enum):
    """How the bus reads and writes a register (docs/registers.md, "Access")."""

    RO = "RO"       # read only: a write answers SLVERR and changes nothing
    RW = "RW"       # read and write; bits of no field read 0 and ignore writes
    W1C = "W1C"     # reads the bits; writing 1 to a bit clears it, 0 leaves it
    W1P = "W1P"     # writing 1 to a bit pulses its action; reads 0


class Response(IntEnum):
    """AXI response codes: what the block answers (OKAY, SLVERR) and what ERROR.FIELD records of an AXI error."""

    OKAY = 0
    SLVERR = 2
    DECERR = 3


class ErrorCause(IntEnum):
    """ERROR.CAUSE: why the NPU stopped. What ERROR.UNIT and ERROR.FIELD hold depends on it (CAUSE_DETAILS)."""

    NONE = 0
    ILLEGAL_COMMAND = 1             # a unit refused a command word before executing it
    ENGINE_FAULT = 2                # a unit's engine found a legal command it cannot execute
    DRAM_RANGE = 3                  # an access at or beyond DRAM_BYTES
    AXI_RESPONSE = 4                # SLVERR or DECERR on the NPU's AXI master port
    REGISTER_WRITE_WHILE_BUSY = 5   # the host wrote a register that may not change during a run
    TOKEN_ERROR = 6                 # FINISH executed with a token queue not empty (an unbalanced program)
    PROGRAM_IMAGE = 7               # the command fetcher refused PROGRAM_BASE or the program image's header
    BANK_CONFLICT = 8               # more accesses to one SRAM of a buffer's bank in a cycle than it has ports


CAUSE_DETAILS: dict[ErrorCause, tuple[str, str]] = {      # what (UNIT, FIELD) hold for each cause
    ErrorCause.NONE: ("0", "0"),
    ErrorCause.ILLEGAL_COMMAND: ("the unit (`Unit`)", "index of the refused field in the unit's error names"),
    ErrorCause.ENGINE_FAULT: ("the unit (`Unit`)", "index of the field the engine names in the unit's error names"),
    ErrorCause.DRAM_RANGE: ("the unit (`Unit`) that addressed beyond DRAM_BYTES", "0"),
    ErrorCause.AXI_RESPONSE: (f"the requester: a `Unit`, or {FETCHER} for the command fetcher",
                              f"the response code ({int(Response.SLVERR)}: SLVERR, {int(Response.DECERR)}: DECERR)"),
    ErrorCause.REGISTER_WRITE_WHILE_BUSY: ("0", "byte offset of the register written"),
    ErrorCause.TOKEN_ERROR: ("the unit whose FINISH found a queue not empty", "0"),
    ErrorCause.PROGRAM_IMAGE: (f"{FETCHER} (the command fetcher)",
                               "index of what it refused in the fetcher's error names (\"Program image\")"),
    ErrorCause.BANK_CONFLICT: ("the unit (`Unit`) whose access found the SRAM's ports taken (a program that "
                               "breaks the bank rule, docs/isa.md \"Banks\")", "the buffer (`Buffer`)"),
}


@dataclass(frozen=True)
class BitField:
    """Bits ``lsb`` .. ``lsb + width - 1`` of a register. ``width`` is a number of bits or the name of a width
    in :func:`register_widths` (0 under a configuration: the field is absent there); ``reset`` is a value or
    the name of a value in :func:`constant_values`."""

    name: str
    lsb: int
    width: int | str
    meaning: str
    reset: int | str = 0

    def bits(self, config: HardwareConfig) -> int:
        return self.width if isinstance(self.width, int) else register_widths(config)[self.width]

    def reset_value(self, config: HardwareConfig) -> int:
        return self.reset if isinstance(self.reset, int) else constant_values(config)[self.reset]


@dataclass(frozen=True)
class Register:
    """One 32-bit register. ``constant``: its value is fixed when the RTL is built (its fields' resets);
    ``writable_while_busy``: a write during a run takes effect instead of stopping the NPU."""

    name: str
    offset: int
    access: Access
    meaning: str
    fields: tuple[BitField, ...]
    constant: bool = False
    writable_while_busy: bool = False

    def layout(self, config: HardwareConfig) -> tuple[tuple[BitField, int], ...]:
        """(field, width) of every field present under ``config``."""
        return tuple((fld, fld.bits(config)) for fld in self.fields if fld.bits(config))

    def mask(self, config: HardwareConfig) -> int:
        """The bits the register implements."""
        return sum(((1 << width) - 1) << fld.lsb for fld, width in self.layout(config))

    def reset_value(self, config: HardwareConfig) -> int:
        return sum(fld.reset_value(config) << fld.lsb for fld, _ in self.layout(config))

    @property
    def writable(self) -> bool:
        return self.access is not Access.RO


def register_widths(config: HardwareConfig) -> dict[str, int]:
    """Field widths that follow the configuration: DRAM byte addresses (``dram.address_bits``) and byte counts
    up to the whole address space (one bit more), each cut into the low and the high register of a pair."""
    address, count = config.dram.address_bits, config.dram.address_bits + 1
    return {"address_lo": min(address, DATA_BITS), "address_hi": max(address - DATA_BITS, 0),
            "bytes_lo": min(count, DATA_BITS), "bytes_hi": max(count - DATA_BITS, 0)}


def constant_values(config: HardwareConfig) -> dict[str, int]:
    """The values of the constant registers' fields, by the name their ``reset`` gives."""
    config_hash, isa_hash = int(config.config_hash(), 16), int(ISA_LAYOUT_HASH, 16)
    return {"magic": ID_MAGIC, "map_version": REGISTER_MAP_VERSION, "units": len(Unit),
            "config_hash[31:0]": config_hash & 0xFFFF_FFFF, "config_hash[63:32]": config_hash >> 32,
            "isa_hash[31:0]": isa_hash & 0xFFFF_FFFF, "isa_hash[63:32]": isa_hash >> 32,
            "mac.rows": config.mac.rows, "mac.cols": config.mac.cols,
            "dram.bytes_per_cycle": config.dram.bytes_per_cycle, "dram.address_bits": config.dram.address_bits,
            "clock_mhz": config.clock_mhz}


def _word(name: str, meaning: str, reset: int | str = 0, width: int | str = DATA_BITS) -> tuple[BitField, ...]:
    return (BitField(name, 0, width, meaning, reset),)


def _constant(name: str, offset: int, meaning: str, *fields: BitField) -> Register:
    return Register(name, offset, Access.RO, meaning, fields, constant=True)


@dataclass(frozen=True)
class UnitCounter:
    """A counter every unit has, at ``offset`` in its block; it counts the cycles (or pulses) its core-side
    ``input`` (``unit_<input>``, one bit per unit) is high while the NPU runs."""

    name: str
    offset: int
    input: str
    meaning: str


UNIT_BLOCK_BASE = 0x100
UNIT_BLOCK_STRIDE = 0x10
UNIT_COUNTERS = (
    UnitCounter("RETIRED", 0x0, "retire", "commands the unit retired (FINISH included)"),
    UnitCounter("BUSY", 0x4, "busy", "cycles from each command's start to its retire"),
    UnitCounter("DRAM_STALL", 0x8, "dram_stall", "cycles of BUSY the unit waited on its DRAM port"),
    UnitCounter("WAIT", 0xC, "wait", "cycles a checked command waited for its tokens, for room in a token queue or, "
                "FINISH, for the other queues to drain"),
)
COUNTER_BITS = 32               # unit counters saturate at 2**32 - 1 instead of wrapping


def counter_name(unit: Unit, counter: UnitCounter) -> str:
    return f"{unit.name}_{counter.name}"


def _unit_counters() -> tuple[Register, ...]:
    return tuple(Register(counter_name(unit, counter), UNIT_BLOCK_BASE + UNIT_BLOCK_STRIDE * unit + counter.offset,
                          Access.RO, f"{unit.name}: {counter.meaning}; cleared by START, saturates",
                          _word("COUNT", "the count"))
                 for unit in Unit for counter in UNIT_COUNTERS)


CONTROL_AND_STATUS = (
    _constant("ID", 0x000, "identifies the block", *_word("MAGIC", "\"AIPU\" in ASCII", "magic")),
    _constant("VERSION", 0x004, "what a driver checks before it uses the map",
              BitField("MAP", 0, 16, "register map version (this document)", "map_version"),
              BitField("UNITS", 16, 8, "units, each with a counter block", "units")),
    _constant("CONFIG_HASH_LO", 0x008, "configuration hash a program file records, bits 31..0",
              *_word("HASH", "bits 31..0 of the 64-bit hash", "config_hash[31:0]")),
    _constant("CONFIG_HASH_HI", 0x00C, "configuration hash, bits 63..32",
              *_word("HASH", "bits 63..32", "config_hash[63:32]")),
    _constant("ISA_HASH_LO", 0x010, "ISA layout hash a program file records, bits 31..0",
              *_word("HASH", "bits 31..0 of the 64-bit hash", "isa_hash[31:0]")),
    _constant("ISA_HASH_HI", 0x014, "ISA layout hash, bits 63..32", *_word("HASH", "bits 63..32", "isa_hash[63:32]")),
    _constant("HW_MAC", 0x018, "the MAC array",
              BitField("ROWS", 0, 16, "`mac.rows`: input channels reduced per cycle", "mac.rows"),
              BitField("COLS", 16, 16, "`mac.cols`: output channels per cycle", "mac.cols")),
    _constant("HW_DRAM", 0x01C, "the DRAM port",
              BitField("BYTES_PER_BEAT", 0, 16, "`dram.bytes_per_cycle`: bytes of one data beat",
                       "dram.bytes_per_cycle"),
              BitField("ADDRESS_BITS", 16, 8, "`dram.address_bits`: width of a DRAM byte address",
                       "dram.address_bits")),
    _constant("HW_CLOCK", 0x020, "the clock the cycle counts are in",
              *_word("MHZ", "`clock_mhz`: clock frequency in MHz", "clock_mhz")),
    Register("CONTROL", 0x040, Access.W1P, "starts a program",
             (BitField("START", 0, 1, "1: start the program at PROGRAM_BASE (clears STATUS, ERROR and the "
                       "counters)"),)),
    Register("STATUS", 0x044, Access.RO, "the state of the run",
             (BitField("BUSY", 0, 1, "a program runs: from START until done or an error"),
              BitField("DONE", 1, 1, "the last run completed (FINISH executed); cleared by START"),
              BitField("ERROR", 2, 1, "the last run stopped on an error (ERROR says which); cleared by START"))),
    Register("ERROR", 0x048, Access.RO, "why the last run stopped (the first error only); cleared by START",
             (BitField("CAUSE", 0, 8, "`ErrorCause` (\"Error causes\" below)"),
              BitField("UNIT", 8, 8, "by cause: the unit or requester"),
              BitField("FIELD", 16, 16, "by cause: the field index, response code or register offset"))),
    Register("IRQ_ENABLE", 0x04C, Access.RW, "which events raise `irq`",
             (BitField("DONE", 0, 1, "completion"), BitField("ERROR", 1, 1, "an error")),
             writable_while_busy=True),
    Register("IRQ_STATUS", 0x050, Access.W1C, "events since last cleared; `irq` = any bit set here and in IRQ_ENABLE",
             (BitField("DONE", 0, 1, "a run completed"), BitField("ERROR", 1, 1, "a run stopped on an error")),
             writable_while_busy=True),
    Register("PROGRAM_BASE_LO", 0x060, Access.RW, "DRAM byte address of the program image, bits 31..0",
             _word("ADDRESS", "address bits", width="address_lo")),
    Register("PROGRAM_BASE_HI", 0x064, Access.RW, "DRAM byte address of the program image, the bits above 31",
             _word("ADDRESS", "address bits 32 and up", width="address_hi")),
    Register("DRAM_BYTES_LO", 0x068, Access.RW, "bytes of DRAM the program may address (0 .. DRAM_BYTES - 1), "
             "bits 31..0; an access beyond stops the NPU with DRAM_RANGE", _word("BYTES", "count bits",
                                                                                 width="bytes_lo")),
    Register("DRAM_BYTES_HI", 0x06C, Access.RW, "bytes of DRAM the program may address, the bits above 31",
             _word("BYTES", "count bits 32 and up", width="bytes_hi")),
    Register("CYCLES_LO", 0x070, Access.RO, "cycles of the last run (STATUS.BUSY set), bits 31..0; reading it "
             "latches bits 63..32 into CYCLES_HI", _word("COUNT", "bits 31..0")),
    Register("CYCLES_HI", 0x074, Access.RO, "cycles of the last run, bits 63..32 as latched by the last read of "
             "CYCLES_LO", _word("COUNT", "bits 63..32")),
)
REGISTERS: tuple[Register, ...] = CONTROL_AND_STATUS + _unit_counters()
BY_NAME: dict[str, Register] = {register.name: register for register in REGISTERS}
BY_OFFSET: dict[int, Register] = {register.offset: register for register in REGISTERS}


def field_value(register: str, name: str, word: int) -> int:
    """Field ``name`` of a 32-bit value of ``register`` (a field whose width is a number of bits)."""
    fld = next(f for f in BY_NAME[register].fields if f.name == name)
    return word >> fld.lsb & ((1 << fld.width) - 1)


def _check_table() -> None:
    """Offsets aligned, distinct and inside the window; fields inside 32 bits and disjoint under the widest
    DRAM address (the only widths that move)."""
    if len(BY_OFFSET) != len(REGISTERS) or len(BY_NAME) != len(REGISTERS):
        raise ValueError("two registers share an offset or a name")
    for register in REGISTERS:
        if register.offset % DATA_BYTES or register.offset >= 1 << ADDRESS_BITS:
            raise ValueError(f"{register.name}: offset {register.offset:#x} unaligned or outside the window")
        taken = 0
        for fld, width in register.layout(WIDEST):
            bits = ((1 << width) - 1) << fld.lsb
            if fld.lsb + width > DATA_BITS or bits & taken:
                raise ValueError(f"{register.name}.{fld.name} leaves the word or overlaps another field")
            taken |= bits


_check_table()
