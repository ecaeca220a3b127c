"""Generate docs/isa.md from :mod:`aipu.sim.machine.arch` and the command tables in :mod:`aipu.sim.machine.isa`
(``aipu isa-doc``).

The prose explains the execution model; every number, field and table comes from the source of
truth, so the document cannot drift from the code (a test regenerates it and compares).
"""
from __future__ import annotations

from dataclasses import fields, is_dataclass
from enum import IntEnum

from aipu.sim.machine.arch import (ACC_BITS, BUFFER_UNIT_BYTES, CONFIG_FILE_BYTES_MAX, DEFAULT, MAC_OPERAND_BITS,
                                PARAM_RECORD, PARAM_RECORD_BYTES,
                                Buffer, DType, HardwareConfig)
from aipu.sim.machine.isa import (COMMAND_BITS, COMMAND_BYTES, COMMANDS, ISA_LAYOUT_HASH, OPCODE_BITS, TOKEN_MASK_BITS,
                               EltwiseOp, LutMode, PoolMode, RequantMode, Rounding, Unit)
from aipu.sim.machine.program import FORMAT_VERSION, MAGIC

EXECUTION_MODEL = f"""\
## Execution model

The AIPU is a decoupled access-execute machine in the style of VTA: {len(Unit)} units run concurrently, each
from its own in-order command queue, and synchronise only through **dependency tokens**.

| unit | does |
|---|---|
| LOAD | strided DMA DRAM -> ACT / WEIGHT / LUT / PARAM, writing padding (e.g. the input zero point) on the fly |
| WDEC | decodes one layer's compressed weight stream (T/AI 115.1 chapter 10, npu profile) from DRAM into WEIGHT |
| CONV | a conv or matmul tile on the MAC array, ACT x WEIGHT -> ACC; DWCONV: a depthwise tile, WEIGHT x ACT -> ACC |
| REQUANT | ACC -> OUT with per-channel bias / multiplier / shift records from PARAM |
| LUT | table-lookup activations (8-bit direct, 16-bit interpolated) into OUT |
| POOL | max / average pooling, element-wise add/sub/max/min/mul and concat rescale into OUT |
| STORE | strided DMA OUT -> DRAM |

**Tokens.** Between every ordered pair of distinct units there is a token queue (a counter of depth
`queues.token_depth`). A command's `pop` mask names the producers it must receive one token from
before it starts; its `push` mask names the consumers that get one token when it has finished. Tokens
carry no data: they order the commands that touch the same buffer region (read-after-write: the
producer pushes after writing; write-after-read: the consumer pushes back when a region may be
overwritten). A command stalls while a token it pops is missing or a queue it pushes into is full.
A full crossbar of token queues costs a few counters and lets the compiler chain any units (VTA has
four queues for a fixed load-compute-store chain; AIPU's units form longer, configurable chains).

**Correctness rule.** A program is correct when every pair of commands that access overlapping bytes,
one of them writing, is ordered by a chain of tokens (or sits in the same queue). The interpreter
checks this with vector clocks on every access, independent of the schedule, and executes random
legal schedules in the tests: a correct program produces the same memory in all of them.

**Banks.** ACT, WEIGHT, ACC and OUT, the buffers several units use, are each built of two banks, the
buffer's halves (bank = address / (bytes / 2)); LUT and PARAM are not banked: PARAM has one reader and
one writer, LUT memory the LUT unit's reads on one port and LOAD's writes and codebook reads on the other.
A bank serves one unit at a time: two commands of different units that both touch a bank, even both to
read, must be ordered by a chain of tokens. Inside a bank, even and odd words lie in two SRAMs of
two ports each, so that a unit's read of an unaligned run (two consecutive words) and its write in the same
cycle, or an ELTWISE's two operands, each find a port. The interpreter checks this rule with the race check
(`BankError`, naming both commands and the bank). It is the price of memories a chip team maps to two-port
SRAM macros: with it no unit ever waits for a buffer port, so the cycle formulas hold unchanged, and it costs
a compiled network nothing, since the compiler already places every tile in one half and orders the units
per half (docs/compiler.md §4). The alternative, ports arbitrated access by access, would stall units on
each other's traffic and make every command's cycles depend on the others'.

**FINISH.** Every program ends with exactly one FINISH, the last command of one queue. It runs once
every other queue has drained and its own pops are satisfied; all token queues must then be empty
(balanced program). The device then reports completion.

**Encoding.** Every command is one {COMMAND_BITS}-bit word ({COMMAND_BYTES} bytes, little-endian).
Fields are packed from bit 0 upwards in the order of the tables below: `opcode` ({OPCODE_BITS} bits), `pop`
and `push` ({TOKEN_MASK_BITS} bits each, bit u for unit u: room for more units, so adding one moves no
field), then the command's fields; the remaining high bits are reserved and must be zero. Opcode 0 is
reserved so an erased word never decodes. Address fields are as wide as the configured buffer needs, so
the layout depends on the hardware configuration (the offsets below are for the default configuration);
every command fits its word under every legal configuration. A word is rejected (`ValueError` naming the
field and value) if the opcode is unknown, a reserved bit is set, a field is outside its legal range, or
a token mask names the command's own unit or no unit. The ISA layout hash (`{ISA_LAYOUT_HASH}`)
fingerprints the word size, the units and every command's opcode, unit and fields (name, width or the
width parameter it names, sign, range, enumeration members), the buffers' address units and the
parameter record; a program file records it. {COMMAND_BITS} bits
rather than VTA's 128: AIPU commands carry their complete parameters (an element-wise command has two
multipliers, two shifts, three zero points and clamp bounds) instead of relying on hidden
configuration registers, which keeps every command self-contained and freely reorderable.

**Buffers and layouts.** Addresses in ACC count int{ACC_BITS} entries, in PARAM {PARAM_RECORD_BYTES}-byte
records (REQUANT `param_index`); all other on-chip addresses, and LOAD's `sram_addr` into any buffer,
count bytes. Tensors are channel-innermost: activations `[rows][cols][channels]`, weights
`[out_c][k_h][k_w][in_c/groups]` (int8), accumulators and outputs `[pixels][channels]`.

**MAC array dataflow.** The array has `mac.rows x mac.cols` int8 multipliers. Each cycle it takes
`rows` input channels of one input pixel for one kernel tap, multiplies them with the matching
`rows x cols` weights and adds the `cols` dot products into the accumulators of `cols` output channels
of one output pixel (output-stationary in ACC, weights streamed from WEIGHT). A CONV tile therefore
takes about `out_h * out_w * k_h * k_w * ceil(groups / G) * ceil(in_c/groups / rows) * ceil(out_c/groups / cols)`
cycles, where `G = max(1, min(rows // (in_c/groups), cols // (out_c/groups)))` groups share the array on its
diagonal (a depthwise layer runs `min(rows, cols)` channels at once; docs/rtl-conv.md has the exact count).
Matmul / fully connected is CONV with a 1x1 kernel.
DWCONV runs a depthwise tile (channel multiplier 1, at most `rows` channels) output-stationary instead: PE
`(r, j)` accumulates channel `r` of output position `j` of a block of `cols` positions, one kernel tap a
cycle. The input lies in WEIGHT (the wide port) by phase (row mod `stride_h`, column mod `stride_w`), so a
tap's operands for `cols` consecutive positions are one contiguous run of `cols x channels` bytes; the tap's
`channels` weights come from ACT. A block takes `k_h * k_w` cycles while the previous one drains into ACC
(docs/rtl-conv.md, "Depthwise dataflow", has the exact count, which the RTL keeps).
Operands enter as `value - zero_point` (signed {MAC_OPERAND_BITS} bit) and products accumulate in int{ACC_BITS}; the
arithmetic of every unit is defined by the golden model (`sim/golden`, docs/arithmetic.md).

**Typical layer.** `compiler/lowering/` (`conv_plan.py`, `conv_emit.py`) lowers conv + requant: LOAD
params, weights and an input row tile (padded) -> CONV (input-channel chunks accumulate) -> REQUANT -> STORE, with every buffer split in
two halves (double buffering) and the token pattern LOAD->CONV, CONV->LOAD (half free), CONV->REQUANT,
REQUANT->CONV, REQUANT->LOAD (params free), REQUANT->STORE, STORE->REQUANT (with a LUT:
REQUANT->LUT->STORE). The compiler derives every token from the commands' accesses (docs/compiler.md §4):
a token is pushed only if a later command pops it, and none is added where a chain of tokens already orders
the two commands. Consecutive layers overlap: a layer's first LOAD of a buffer half pops a token from the
previous layer's last user of that half, and a LOAD of rows the previous layer stored pops a STORE->LOAD token
from the STORE that wrote them.
"""

DECISIONS = """\
## Decisions recorded here

- Rounding of right shifts is a per-command field with the four golden-model modes; FLOOR is the
  plain shift of the shift-quantization patent (S640, A2-2) and HALF_UP adds 2^(N-1) first, the
  Zhouyi whitepaper giving its `M/2^N` no rounding rule (§3.3.2, A3-1); docs/arithmetic.md D2.
- Padding is written by LOAD with the command's `pad_value`; the compiler passes the input zero point
  so padded taps contribute 0 (Zhouyi whitepaper §2.2, §4.50, A3-9; docs/arithmetic.md D5).
- Average pooling divides exactly by the window size or by the taps inside the image, chosen per
  command (`count_include_pad`; Zhouyi whitepaper §4.4, A3-8; docs/arithmetic.md D17).
- LUT tables hold signed 16-bit entries; 8-bit inputs index 256-entry tables directly, 16-bit inputs
  use 2^k + 1 entries with interpolation (Zhouyi whitepaper §3.3.2.2, A3-5; docs/arithmetic.md D15, D16).
- Requant parameters are per output channel (the weights are quantized per output channel, Zhouyi
  whitepaper §2.2.3, §3.3.1), stored as records in PARAM and shared by all tiles of a layer.
"""


def _key_rows(obj, prefix: str = "") -> list[str]:
    rows = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        if is_dataclass(value):
            doc = f.metadata.get("doc")
            if doc:
                rows.append(f"| `{prefix}{f.name}` | | | {doc} |")
            rows.extend(_key_rows(value, f"{prefix}{f.name}."))
        else:
            rule = (f"{f.metadata['minimum']} .. {f.metadata['maximum']}"
                    + (", power of two" if f.metadata["power_of_two"] else ""))
            rows.append(f"| `{prefix}{f.name}` | {value} | {rule} | {f.metadata.get('doc', '')} |")
    return rows


def _enum_section(enum: type[IntEnum]) -> str:
    return f"- `{enum.__name__}`: " + ", ".join(f"{member.name} = {int(member)}" for member in enum)


def _field_rows(spec, config: HardwareConfig) -> list[str]:
    rows = []
    for fld, offset, width in spec.layout(config):
        width_text = str(width) if isinstance(fld.bits, int) else f"{width} (`{fld.bits}`)"
        legal = fld.legal_values()
        if legal is not None:
            legal_text = ", ".join(v.name for v in legal)
        else:
            low, high = fld.legal_range(config)
            legal_text = f"{low} .. {high}"
        rows.append(f"| `{fld.name}` | {offset} | {width_text} | {'signed' if fld.signed else 'unsigned'} | "
                    f"{legal_text} | {fld.meaning} |")
    return rows


def generate(config: HardwareConfig = DEFAULT) -> str:
    out = ["# AIPU command set (ISA)", "",
           "<!-- GENERATED by `aipu isa-doc -o docs/isa.md` from sim/machine/arch.py and sim/machine/isa.py; "
           "do not edit by hand. -->", "",
           "Source of truth: `sim/machine/arch.py` (widths, types, hardware configuration) and `sim/machine/isa.py`",
           "(command tables and their packing); machinery in",
           "`sim/machine/program.py` (encoding, container, disassembler); semantics executed by `sim/interpreter/`.",
           "", EXECUTION_MODEL, "## Hardware configuration", "",
           "Loaded from TOML or JSON (`sim/machine/default.toml` is the default below) by",
           "`aipu.sim.machine.arch.load_hardware_config`; unknown keys, non-integers, values outside the rule's range,",
           f"non-powers-of-two where required, files over {CONFIG_FILE_BYTES_MAX} bytes and deeply nested",
           "documents raise `InputError` (a `ValueError`) naming the file, the key, the value and what is",
           "allowed.", "",
           "| key | default | rule | meaning |", "|---|---|---|---|", *_key_rows(config), "",
           "Derived widths (computed from the configuration, never restated):", "",
           "| name | default | rule |", "|---|---|---|"]
    for name, value in config.width_parameters.items():
        rule = ("max over byte-addressed buffers" if name == "sram_addr_bits" else
                "dram.address_bits" if name == "dram_addr_bits" else
                "log2(bytes / unit), unit = " + str(BUFFER_UNIT_BYTES[Buffer[name[:-10].upper()]]) + " byte(s)")
        out.append(f"| `{name}` | {value} | {rule} |")
    out += ["", "## Enumerations", ""]
    out += [_enum_section(e) for e in (Unit, Buffer, DType, Rounding, RequantMode, LutMode, PoolMode, EltwiseOp)]
    out += ["", f"## Parameter record ({PARAM_RECORD_BYTES} bytes per output channel, little-endian)", "",
            "| field | type | meaning |", "|---|---|---|"]
    out += [f"| `{name}` | {numpy_type.name} | {meaning} |" for name, numpy_type, meaning in PARAM_RECORD]
    out += ["", "## Commands", ""]
    for spec in COMMANDS.values():
        layout = spec.layout(config)
        used = layout[-1][1] + layout[-1][2]
        unit = spec.unit.name if spec.unit is not None else "any (the `unit` field)"
        out += [f"### {spec.opcode.name} (opcode {int(spec.opcode)}, queue {unit})", "", spec.summary + ".", "",
                "```", spec.semantics, "```", "",
                "| field | bit | width | sign | legal | meaning |", "|---|---|---|---|---|---|",
                *_field_rows(spec, config), "",
                f"Bits {used} .. {COMMAND_BITS - 1} are reserved (zero).", ""]
    out += ["## Program container", "",
            f"A program file holds: magic `{MAGIC.decode()}`, u16 format version ({FORMAT_VERSION}), u16 number",
            "of queues, the 16-character configuration hash, the 16-character ISA layout hash, u32 length of",
            "the embedded configuration (JSON), the configuration, one u32 command count per queue in unit",
            "order, the commands of each queue, and a CRC-32 of everything before it. Reading checks every item",
            "and names the problem (not a program, truncated, wrong version, another ISA layout (re-assemble",
            "or recompile), hash mismatch, checksum mismatch, bad command).",
            "`aipu disasm prog.bin` prints one command per line with every field named, e.g.", "",
            "```", "CONV[0]      CONV     pop[LOAD] push[REQUANT]      in_addr=0x0 in_h=5 ... accumulate=0", "```",
            "", "and `aipu asm listing.txt -o prog.bin` assembles such a listing back (comments start with `;`).",
            "", DECISIONS]
    return "\n".join(out).rstrip("\n") + "\n"
