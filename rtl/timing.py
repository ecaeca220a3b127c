"""The documented cycles of every command, one dispatch over the units' formulas (docs/rtl-*.md).

Each unit's module states its formula next to the engine it describes (``command_cycles``); the RTL tests
check every command against it, and the cycle model (``aipu.sim.cycle``) and the co-simulation's comparison
read it from here. The DMA units' formulas also come split around their DRAM transfer (``dram_phases``), for
the cycle model's DRAM shared between them.
"""
from __future__ import annotations

from aipu.rtl import conv, dma, lut, pool, requant, wdec
from aipu.rtl.ports import DramPhases
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command

_FORMULAS = {Opcode.CONV: conv, Opcode.REQUANT: requant, Opcode.LUT: lut,
             Opcode.SOFTMAX: lut, Opcode.POOL: pool, Opcode.ELTWISE: pool}
DMA_OPCODES = (Opcode.LOAD, Opcode.STORE, Opcode.WDEC)


def command_cycles(config: HardwareConfig, command: Command, memory: Memory) -> int:
    """The documented cycles of ``command`` from its start to its retire (docs/rtl-*.md); WDEC's depend on the
    stream it decodes, read from ``memory``'s DRAM. FINISH retires as it starts."""
    opcode = command.opcode
    if opcode == Opcode.FINISH:
        return 0
    if opcode in DMA_OPCODES:
        return dram_phases(config, command, memory).cycles
    return _FORMULAS[opcode].command_cycles(config, command)


def dram_phases(config: HardwareConfig, command: Command, memory: Memory) -> DramPhases:
    """A LOAD's, STORE's or WDEC's cycles around its DRAM transfer (their sum is ``command_cycles``)."""
    if command.opcode == Opcode.WDEC:
        stream = memory.dram[command.dram_addr:command.dram_addr + command.length].tobytes()
        return wdec.dram_phases(config, command, stream)
    return dma.dram_phases(config, command)
