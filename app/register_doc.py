"""Generate docs/registers.md from the register table in :mod:`aipu.sim.machine.registers` (``aipu register-doc``).

The prose says how a driver uses the block; every offset, access, reset value, field and cause comes from the
table (the program image's header from :mod:`aipu.sim.machine.program_image`), so the document cannot drift
from the RTL built on the same tables (a test regenerates it and compares).
"""
from __future__ import annotations

from aipu.sim.cosim.verilog import available_units
from aipu.sim.machine.arch import DEFAULT, HardwareConfig
from aipu.sim.machine.isa import COMMAND_BYTES, Unit
from aipu.sim.machine.program_image import (FETCH_ERRORS, HEADER_BYTES, HEADER_FIELDS, IMAGE_VERSION, alignment,
                                            constant_values)
from aipu.sim.machine.registers import (ADDRESS_BITS, CAUSE_DETAILS, COUNTER_BITS, DATA_BITS, FETCHER, REGISTERS,
                                        UNIT_BLOCK_BASE, UNIT_BLOCK_STRIDE, UNIT_COUNTERS, ErrorCause, Response,
                                        counter_name, register_widths)

BUS = f"""\
## Bus

The block is an AXI4-Lite slave with a {DATA_BITS}-bit data bus and a {ADDRESS_BITS}-bit byte address
({1 << ADDRESS_BITS} bytes). Every register is {DATA_BITS} bits at a 4-byte aligned offset; the two lowest
address bits are ignored, and `WSTRB` selects the bytes a write changes (a write with no strobe bit set is
still a write: it answers, and is refused while busy, like any other). `AWPROT` and `ARPROT` are ignored.
The block takes one write (address and data in either order) and one read at a time, a read beside a
write: a write takes effect in the cycle after both its handshakes and is answered in the next, a read is
answered in the cycle after its handshake (at the earliest: an earlier response still waiting holds them). In
the Verilog the channels are the ports `s_axil_awaddr`, `s_axil_awvalid`, ... (cocotbext-axi's
`AxiLiteBus.from_prefix(dut, "s_axil")`).

| access | read | write |
|---|---|---|
| RO | the value | SLVERR ({int(Response.SLVERR)}), nothing changes |
| RW | the value; bits of no field read 0 | the strobed bits of the fields |
| W1C | the value | each 1 clears its bit, 0 leaves it |
| W1P | 0 | each 1 triggers its bit's action |

A read of an unmapped offset answers SLVERR with data 0, a write to one SLVERR and changes nothing.

**Writes while busy.** While STATUS.BUSY is set, only the registers marked *while busy* below may be
written. A write to any other writable register is refused: it changes nothing, answers SLVERR, and stops the
NPU with ERROR.CAUSE = REGISTER_WRITE_WHILE_BUSY and ERROR.FIELD = the register's offset (the core gets the
`abort` pulse), so a driver bug never changes the program's inputs under a running program silently. A write
to a read-only register or an unmapped offset while busy answers SLVERR and does not stop the NPU: it changes
nothing.
"""

DRIVER = """\
## Running a program

1. Check ID and VERSION.MAP, and compare CONFIG_HASH and ISA_HASH with the hashes in the program file's
   header (docs/isa.md, "Program container"): a program for another configuration or command layout must
   not be started.
2. Write PROGRAM_BASE_LO/HI (where the program image lies in DRAM: "Program image" below) and DRAM_BYTES_LO/HI
   (how much DRAM it may address: every access at or beyond is stopped with DRAM_RANGE; it resets to 0, so it
   must be set).
3. Write IRQ_ENABLE (DONE, ERROR) and clear IRQ_STATUS by writing its bits back.
4. Write CONTROL.START = 1: STATUS.BUSY is set from the next cycle, STATUS.DONE/ERROR, ERROR, CYCLES and
   every unit counter are cleared.
5. On the interrupt (or polling STATUS): DONE, or ERROR with ERROR's cause, unit and field. Only the first
   error of a run is kept. Clear IRQ_STATUS by writing 1s to the bits that are set.
6. Read the counters: CYCLES_LO then CYCLES_HI (reading LO latches HI, so the two halves are one 64-bit
   value read in that order), and each unit's block.

START begins a new run after a done or an error as after reset: the NPU restarts its units on it.
"""


def _bits(lsb: int, width: int) -> str:
    return str(lsb) if width == 1 else f"{lsb + width - 1}:{lsb}"


def _field_table(register, config: HardwareConfig) -> list[str]:
    layout = register.layout(config)
    if not layout:
        return ["No bits under this configuration (reads 0, writes are ignored).", ""]
    rows = ["| field | bits | reset | meaning |", "|---|---|---|---|"]
    for fld, width in layout:
        reset = fld.reset_value(config)
        source = "" if isinstance(fld.reset, int) else f" (`{fld.reset}`)"
        rows.append(f"| `{fld.name}` | {_bits(fld.lsb, width)} | {reset:#x}{source} | {fld.meaning} |")
    return rows + [""]


def _summary(config: HardwareConfig) -> list[str]:
    rows = ["| offset | register | access | reset | while busy | meaning |", "|---|---|---|---|---|---|"]
    for register in REGISTERS:
        if register.offset >= UNIT_BLOCK_BASE:
            break
        busy = "yes" if register.writable_while_busy else "refused" if register.writable else ""
        rows.append(f"| {register.offset:#05x} | {register.name} | {register.access.value} | "
                    f"{register.reset_value(config):#x} | {busy} | {register.meaning} |")
    last = UNIT_BLOCK_BASE + UNIT_BLOCK_STRIDE * len(Unit) - 4
    rows.append(f"| {UNIT_BLOCK_BASE:#05x} .. {last:#05x} | per unit | RO | 0 | | the counters of each unit, below |")
    return rows + [""]


def _unit_blocks() -> list[str]:
    counters = ["| offset in block | register | meaning |", "|---|---|---|"]
    counters += [f"| {c.offset:#x} | `<UNIT>_{c.name}` | {c.meaning} (core input `unit_{c.input}`) |"
                 for c in UNIT_COUNTERS]
    bases = ["| unit | block | registers |", "|---|---|---|"]
    bases += [f"| {unit.name} ({int(unit)}) | {UNIT_BLOCK_BASE + UNIT_BLOCK_STRIDE * unit:#05x} | "
              + ", ".join(counter_name(unit, c) for c in UNIT_COUNTERS) + " |" for unit in Unit]
    return ["## Unit counters", "",
            f"Each unit (`Unit` in sim/machine/isa.py) has a block of {len(UNIT_COUNTERS)} read-only "
            f"{COUNTER_BITS}-bit counters at {UNIT_BLOCK_BASE:#x} + {UNIT_BLOCK_STRIDE:#x} x unit. They count while "
            "STATUS.BUSY is set, are cleared by START and saturate at all ones instead of wrapping. Over a run "
            "they measure what `aipu report` predicts per unit with the cycle model: its busy_cycles are BUSY - "
            "DRAM_STALL, its dram_stall_cycles DRAM_STALL, its stall_cycles WAIT.", "", *counters, "", *bases, ""]


def _error_names() -> list[str]:
    """The names ERROR.FIELD indexes for ILLEGAL_COMMAND and ENGINE_FAULT, per unit, as the RTL's units report."""
    rows = ["| unit | FIELD: name |", "|---|---|"]
    rows += [f"| {unit.name} | " + ", ".join(f"{i} `{name}`" for i, name in enumerate(cls.unit_error_names())) + " |"
             for unit, cls in available_units().items()]
    return ["### Error names by unit", "", *rows, ""]


def _causes() -> list[str]:
    rows = ["| code | cause | ERROR.UNIT | ERROR.FIELD |", "|---|---|---|---|"]
    rows += [f"| {int(cause)} | {cause.name} | {CAUSE_DETAILS[cause][0]} | {CAUSE_DETAILS[cause][1]} |"
             for cause in ErrorCause]
    return ["## Error causes", "", "ERROR.CAUSE (`ErrorCause` in sim/machine/registers.py) and what the other "
            "two fields of ERROR hold for it. A unit's error names (below) are the fields of its commands, then "
            "its engine's own errors (`UnitComponent.error_names`, docs/rtl.md).", "", *rows, ""]


def _program_image(config: HardwareConfig) -> list[str]:
    """The image PROGRAM_BASE points at, from the table in sim/machine/program_image.py."""
    constants = constant_values(config)
    rows = ["| offset | bytes | field | value | meaning |", "|---|---|---|---|---|"]
    rows += [f"| {f.offset} | {f.size} | `{f.name}` | {f'{constants[f.name]:#x}' if f.name in constants else ''} | "
             f"{f.meaning} |" for f in HEADER_FIELDS]
    names = ", ".join(f"{index} `{name}`" for index, name in enumerate(FETCH_ERRORS))
    return ["## Program image", "",
            "PROGRAM_BASE points at the program image (`sim/machine/program_image.py`: `build_image`, `parse_image`): "
            f"a header of {HEADER_BYTES} bytes, then each unit's queue of {COMMAND_BYTES}-byte command words, "
            "little-endian like every number in it. Every queue lies at a byte offset from PROGRAM_BASE that is a "
            f"multiple of the alignment, a command and a DRAM word ({alignment(config)} bytes here: the larger of "
            f"{COMMAND_BYTES} and `dram.bytes_per_cycle`), and so must PROGRAM_BASE. A compiled program's image goes "
            "right after its DRAM image, at the next aligned address (`image_base`), and DRAM_BYTES must cover it. "
            f"Format version {IMAGE_VERSION}; values for the default configuration:", "", *rows, "",
            "On START the command fetcher (docs/rtl.md, \"Command fetch\") reads the header and stops with "
            f"ERROR.CAUSE = {ErrorCause.PROGRAM_IMAGE.name}, ERROR.UNIT = {FETCHER} and ERROR.FIELD = the index of "
            "the first of these it refuses: PROGRAM_BASE not aligned or the header reaching beyond DRAM_BYTES, a "
            "constant field that differs from the build's (CONFIG_HASH and ISA_HASH read the build's hashes), a queue "
            "offset not aligned or beyond DRAM_BYTES, a queue that ends beyond DRAM_BYTES (its count). The "
            "software reader also refuses queues that overlap each other or the header.", "",
            f"Fetcher error names (ERROR.FIELD): {names}.", ""]


def generate(config: HardwareConfig = DEFAULT) -> str:
    widths = register_widths(config)
    out = ["# AIPU host registers", "",
           "<!-- GENERATED by `aipu register-doc -o docs/registers.md` from sim/machine/registers.py; "
           "do not edit by hand. -->", "",
           "The registers a host CPU programs and watches the NPU through. Source of truth: the table in",
           "`sim/machine/registers.py`; the RTL is `rtl/host.py` (docs/rtl.md, \"Host registers\"). Reset values",
           "and widths below are for the default configuration; those that follow the configuration name their",
           f"source (DRAM addresses: `dram.address_bits` = {config.dram.address_bits} bits, so PROGRAM_BASE has "
           f"{widths['address_lo']} + {widths['address_hi']} bits",
           f"and DRAM_BYTES {widths['bytes_lo']} + {widths['bytes_hi']}, up to the whole address space).", "",
           BUS, DRIVER, "## Register map", "", *_summary(config)]
    for register in REGISTERS:
        if register.offset >= UNIT_BLOCK_BASE:
            break
        out += [f"### {register.name} ({register.offset:#05x}, {register.access.value})", "",
                register.meaning[0].upper() + register.meaning[1:] + ".", "", *_field_table(register, config)]
    out += _unit_blocks() + _causes() + _error_names() + _program_image(config)
    return "\n".join(out).rstrip("\n") + "\n"
