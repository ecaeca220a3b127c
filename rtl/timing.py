"""The documented cycles of every command, one dispatch over the units' formulas (docs/rtl-*.md).

Each unit's module states its formula next to the engine it describes (``command_cycles``); the RTL tests
check every command against it, and the cycle model (``aipu.sim.cycle``) and the co-simulation's comparison
read it from here.
"""
from __future__ import annotations

from aipu.rtl import conv, dma, lut, pool, requant, wdec
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command

_FORMULAS = {Opcode.LOAD: dma, Opcode.STORE: dma, Opcode.CONV: conv, Opcode.REQUANT: requant, Opcode.LUT: lut,
             Opcode.SOFTMAX: lut, Opcode.POOL: pool, Opcode.ELTWISE: pool}


def command_cycles(config: HardwareConfig, command: Command, memory: Memory) -> int:
    """The documented cycles of ``command`` from its start to its retire (docs/rtl-*.md); WDEC's depend on the
    stream it decodes, read from ``memory``'s DRAM. FINISH retires as it starts."""
    opcode = command.opcode
    if opcode == Opcode.FINISH:
        return 0
    if opcode == Opcode.WDEC:
        stream = memory.dram[command.dram_addr:command.dram_addr + command.length].tobytes()
        return wdec.command_cycles(config, command, stream)
    return _FORMULAS[opcode].command_cycles(config, command)
