"""One handler per opcode, grouped by unit family. A handler takes the :class:`~aipu.sim.interpreter.preparer.
Preparer` and the command: it checks the command's fields and declares its accesses, once per program, and
returns the run-time part that reads the operands, calls the golden model and writes the results (optionally
setting the preparer's ``row``, the same work as a row of the compiled run loop, run_loop.py)."""
from __future__ import annotations

from aipu.sim.interpreter.handlers import conv, dma, lut, pool, requant
from aipu.sim.machine.isa import Opcode


def finish(preparer, cmd) -> None:
    """Nothing to execute: the schedule puts FINISH last and checks that the tokens balance."""


HANDLERS = {Opcode.LOAD: dma.load, Opcode.STORE: dma.store, Opcode.CONV: conv.conv, Opcode.REQUANT: requant.requant,
            Opcode.LUT: lut.lut, Opcode.POOL: pool.pool, Opcode.ELTWISE: pool.eltwise, Opcode.WDEC: dma.wdec,
            Opcode.FINISH: finish, Opcode.SOFTMAX: lut.softmax,
            Opcode.DWCONV: conv.dwconv}
