"""Every command's documented cycles, written once in plain Python below the RTL (docs/rtl-*.md).

One module per unit family holds its formula (``command_cycles``) and the numbers the RTL builds that
unit's schedule around; ``sequencer`` names the take, check and start steps every unit shares. The RTL tests
check every command against these formulas, the cycle model (``aipu.sim.cycle``) times programs with them
through the dispatch here, and the co-simulation compares the RTL's cycles with them. The DMA units'
formulas also come split around their DRAM transfer (``dram_phases``), for the cycle model's DRAM shared
between them.

Nothing here imports Amaranth. WDEC's formula counts its stream with the codec's compiled profile decoder
(numba), so ``wdec`` is imported only when a WDEC command is timed.
"""
from __future__ import annotations

from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command
from aipu.sim.timing import conv, dma, lut, pool, requant
from aipu.sim.timing.dma import DramPhases

_FORMULAS = {Opcode.CONV: conv, Opcode.DWCONV: conv, Opcode.REQUANT: requant, Opcode.LUT: lut,
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
        from aipu.sim.timing import wdec      # loads the numba decoder: only when a WDEC is timed

        stream = memory.dram[command.dram_addr:command.dram_addr + command.length].tobytes()
        return wdec.dram_phases(config, command, stream)
    return dma.dram_phases(config, command)
