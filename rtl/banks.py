"""The NPU top's on-chip buffers as memories of two ports each, which a chip team maps to SRAM macros.

ACT, WEIGHT, ACC and OUT (``BANKED_BUFFERS``) are each BANKS banks, the halves of the buffer, and every bank is
SUBBANKS memories of interleaved words ("sub-banks": word w of a bank lies in sub-bank w % SUBBANKS), so that a
unit's read of two consecutive words finds both at once. The program rule (docs/isa.md, "Banks") gives each bank
to one unit at a time, so a sub-bank sees at most the accesses of one unit per cycle:

  port A   a read
  port B   a read, or the write (a read port and a write port on one address: a 1R1W or 2RW macro)

A buffer none of whose units reads more than one pair of words at once needs no second read: its sub-banks are
plain 1R1W (port A reads, the write has an address of its own). Per sub-bank and cycle the write takes port B and
the reads take A, then B, in the order of ``reads``; an access that finds no port free is a conflict the top
reports (ERROR.CAUSE = BANK_CONFLICT), never a silent wrong word. Each unit read port gets its word from the
sub-bank port that served it (a registered select) and, as rtl/ports.py promises, keeps it while ``en`` is low.
"""
from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Module, Mux, Signal, Value, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.utils import exact_log2

from aipu.rtl.ports import word_bytes, word_count
from aipu.sim.machine.arch import BANKED_BUFFERS, BANKS, SUBBANKS, Buffer, HardwareConfig
from aipu.sim.machine.isa import Unit

SUBBANK_BITS = exact_log2(SUBBANKS)
BANK_BITS = exact_log2(BANKS)


@dataclass(frozen=True)
class Access:
    """One unit port into a buffer: the unit (what ERROR.UNIT names on a conflict) and its read or write port."""

    unit: Unit
    name: str
    port: wiring.PureInterface


def subbank_memories(config: HardwareConfig, buffer: Buffer) -> list[Memory]:
    """The BANKS x SUBBANKS memories of ``buffer``, bank-major (index = bank * SUBBANKS + sub-bank)."""
    depth = word_count(config, buffer) // (BANKS * SUBBANKS)
    return [Memory(shape=unsigned(8 * word_bytes(config, buffer)), depth=depth, init=[])
            for _ in range(BANKS * SUBBANKS)]


def memory_names(buffer: Buffer) -> list[str]:
    """Names in the NPU design of ``buffer``'s memories, in :func:`subbank_memories`' order (one if unbanked)."""
    name = f"buffer_{buffer.name.lower()}"
    if buffer not in BANKED_BUFFERS:
        return [name]
    return [f"{name}_bank{index // SUBBANKS}_sub{index % SUBBANKS}" for index in range(BANKS * SUBBANKS)]


def buffer_words(parts: list[list[int]]) -> list[int]:
    """The buffer's words in address order from its memories' words (as :func:`memory_names` orders them)."""
    if len(parts) == 1:
        return list(parts[0])
    words = []
    for bank in range(BANKS):
        subbanks = parts[bank * SUBBANKS:(bank + 1) * SUBBANKS]
        words += [word for row in zip(*subbanks) for word in row]
    return words


def _subbank(addr: Value) -> Value:
    """Index of the memory holding word ``addr`` (bank = top address bits, sub-bank = bottom bits)."""
    return Cat(addr[:SUBBANK_BITS], addr[len(addr) - BANK_BITS:])


def _offset(addr: Value) -> Value:
    """Address of word ``addr`` inside its memory."""
    return addr[SUBBANK_BITS:len(addr) - BANK_BITS]


def _one_hot(choices: list[tuple[Value, Value]], width: int) -> Value:
    """The value among ``choices`` (condition, value) whose condition is set, the conditions one-hot; 0 if none.
    A chain of multiplexers."""
    result = Value.cast(0)
    for condition, value in choices:
        result = Mux(condition, value, result)
    return result[:width] if len(result) > width else result


def needs_second_read(reads: list[Access]) -> bool:
    """Whether a unit reads more than one pair of words of the buffer at once (ELTWISE's two operands): then
    each sub-bank needs a second read port."""
    units = [access.unit for access in reads]
    return any(units.count(unit) > SUBBANKS for unit in set(units))


def attach_banked_buffer(m: Module, memories: dict[str, Memory], reads: list[Access], writes: list[Access]
                         ) -> list[tuple[Access, Value]]:
    """Wire the unit ports ``reads`` and ``writes`` to the sub-bank ``memories`` (by name) of one buffer (module
    docstring). Returns, per access, the level that is 1 in a cycle where it found no port free."""
    second_read = needs_second_read(reads)
    missed: dict[Access, list[Value]] = {access: [] for access in (*reads, *writes)}
    sources: dict[Access, list[tuple[Value, Value]]] = {access: [] for access in reads}
    for index, (name, memory) in enumerate(memories.items()):
        write = memory.write_port(granularity=8)
        writing, write_offset = _grant_write(m, write, index, writes, missed)
        ports = [memory.read_port() for _ in range(2 if second_read else 1)]
        grants = _grant_reads(index, reads, writing, len(ports), missed)
        for slot, port in enumerate(ports):
            m.d.comb += port.en.eq(Cat(*(granted[slot] for granted, _ in grants)).any())
            for granted, access in grants:
                sources[access].append((granted[slot], port.data))
        offsets = [_one_hot([(granted[slot], _offset(access.port.addr)) for granted, access in grants],
                            len(ports[0].addr)) for slot in range(len(ports))]
        m.d.comb += ports[0].addr.eq(offsets[0])
        if second_read:      # port B: the second read or the write, on one address
            shared = Signal.like(write.addr, name=f"{name}_address_b")
            m.d.comb += [shared.eq(offsets[1] | write_offset), ports[1].addr.eq(shared), write.addr.eq(shared)]
        else:
            m.d.comb += write.addr.eq(write_offset)
    for access in reads:
        _deliver(m, access, sources[access])
    return [(access, Cat(*missed[access]).any()) for access in (*reads, *writes)]


def _grant_write(m: Module, write, index: int, writes: list[Access], missed: dict) -> tuple[Value, Value]:
    """Give memory ``index``'s write port to the first of ``writes`` that writes there; a later one misses.
    Drives its data and byte enables; returns (a write is granted, its offset)."""
    taken, chosen = Value.cast(0), []
    for access in writes:
        port = access.port
        hit = port.en & port.mask.any() & (_subbank(port.addr) == index)
        missed[access].append(hit & taken)
        chosen.append((hit & ~taken, port))
        taken = taken | hit
    m.d.comb += [write.data.eq(_one_hot([(granted, port.data) for granted, port in chosen], len(write.data))),
                 write.en.eq(_one_hot([(granted, port.mask) for granted, port in chosen], len(write.en)))]
    return taken, _one_hot([(granted, _offset(port.addr)) for granted, port in chosen], len(write.addr))


def _grant_reads(index: int, reads: list[Access], writing: Value, slots: int, missed: dict
                 ) -> list[tuple[list[Value], Access]]:
    """Per read, its grant of each read port of memory ``index`` (``slots`` of them: A, then B unless the write
    holds it), in the order of ``reads``; a read that finds every port taken misses."""
    grants, none_before, one_before = [], Value.cast(1), Value.cast(0)
    for access in reads:
        hit = access.port.en & (_subbank(access.port.addr) == index)
        granted = [hit & none_before] + ([hit & one_before & ~writing] if slots > 1 else [])
        missed[access].append(hit & ~Cat(*granted).any())
        grants.append((granted, access))
        none_before, one_before = none_before & ~hit, Mux(hit, none_before, one_before)
    return grants


def _deliver(m: Module, access: Access, sources: list[tuple[Value, Value]]) -> None:
    """A unit read port's data: the word of the memory port that served its last read (select registered),
    held while ``en`` is low."""
    port, name = access.port, f"{access.unit.name.lower()}_{access.name}"
    served = Signal(len(sources), name=f"{name}_served")
    held = Signal.like(port.data, name=f"{name}_held")
    m.d.sync += [served.eq(Cat(*(granted for granted, _ in sources))), held.eq(port.data)]
    fresh = _one_hot([(served[i], data) for i, (_, data) in enumerate(sources)], len(port.data))
    m.d.comb += port.data.eq(Mux(served.any(), fresh, held))
