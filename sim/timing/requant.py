"""REQUANT's cycles (docs/rtl-requant.md, "Cycles"), and the geometry the REQUANT unit (``aipu.rtl.requant``)
is built around: after the check, the command's parameter records load (``reads_per_record`` PARAM reads
each), then the accumulators stream ``lanes`` a cycle.
"""
from __future__ import annotations

from dataclasses import dataclass

from aipu.sim.machine.arch import ACC_DTYPE, DTYPE_BYTES, PARAM_RECORD_BYTES, Buffer, HardwareConfig
from aipu.sim.machine.isa import COMMANDS, Opcode
from aipu.sim.machine.program import Command

WIDEST_ELEMENT_BYTES = max(DTYPE_BYTES.values())


@dataclass(frozen=True)
class RequantGeometry:
    """What the configuration fixes: lanes, and how words of ACC, OUT and PARAM hold entries and records."""

    lanes: int                  # accumulators per cycle
    acc_entries: int            # int32 entries per ACC word
    out_bytes: int              # bytes per OUT word
    param_chunk_bytes: int      # bytes of a record one PARAM read delivers
    reads_per_record: int
    records: int                # records the record store holds: the most channels a legal command has

    @classmethod
    def of(cls, config: HardwareConfig) -> RequantGeometry:
        acc_port, out_bytes = config.buffer(Buffer.ACC).port_bytes, config.buffer(Buffer.OUT).port_bytes
        acc_entries = acc_port // ACC_DTYPE.itemsize
        if acc_entries < 1 or out_bytes < WIDEST_ELEMENT_BYTES:
            raise ValueError(f"REQUANT needs an ACC port of at least {ACC_DTYPE.itemsize} bytes and an OUT port of "
                             f"at least {WIDEST_ELEMENT_BYTES} (got {acc_port} and {out_bytes})")
        # One lane group lies in one ACC word, and its widest output fits one OUT word.
        lanes = min(acc_entries, out_bytes // WIDEST_ELEMENT_BYTES)
        chunk = min(config.buffer(Buffer.PARAM).port_bytes, PARAM_RECORD_BYTES)
        channels = next(fld for fld in COMMANDS[Opcode.REQUANT].fields if fld.name == "channels")
        records = min(channels.legal_range(config)[1], config.buffer_units(Buffer.PARAM))
        return cls(lanes, acc_entries, out_bytes, chunk, PARAM_RECORD_BYTES // chunk, records)


#: Cycles outside the stream: CHECK, the load's last read landing, VERDICT, the pipeline's stage B of the last
#: group, FLUSH.
FIXED_CYCLES = 5


def command_cycles(config: HardwareConfig, command: Command) -> int:
    """Cycles from start to retire of a REQUANT that executes (docs/rtl-requant.md, "Cycles"): the stream
    takes ``lanes`` accumulators a cycle, so dual (two a channel) takes twice the groups of its outputs."""
    geometry = RequantGeometry.of(config)
    entries = command.pixels * command.channels * (2 if command.dual else 1)
    groups = (command.acc_addr + entries - 1) // geometry.lanes - command.acc_addr // geometry.lanes + 1
    return FIXED_CYCLES + command.channels * geometry.reads_per_record + groups
