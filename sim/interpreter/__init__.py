"""Functional interpreter: executes a command program on a memory image, unit queue by unit queue.

Each unit runs its queue in order; a command may run once every token it pops is available and every
token queue it pushes into has room (``queues.token_depth``). Which ready unit runs next is chosen by a
schedule (in unit order, or at random from a seed): a correctly synchronised program gives the same
memory for every schedule. The interpreter detects deadlock (no unit can run), unbalanced tokens at
FINISH, out-of-bounds accesses, and -- with vector clocks -- data races: two accesses to overlapping
bytes, at least one a write, by commands that no token chain orders.
The result logs every write (command, space, byte range or strided pattern, element type) so that a byte
another executor gets wrong can be traced to the command that should have written it.

Everything that does not depend on the data -- field combinations, bounds, store patterns, races, deadlock --
is checked once per program by :func:`prepare`; a :class:`PreparedProgram` then runs on any number of memory
images doing only the data work, which is what makes many runs of one program (accuracy over a data set,
randomised tests) cost little more than the golden model on the same layers.

All arithmetic is delegated to the golden model (:mod:`aipu.sim.golden`); this package only moves bytes. The
compiled run loop (run_loop.py) does the same through tiles.py: the golden kernels on one tile, and for dense
convs the golden GEMM path's windows-times-weights in one exact float32 BLAS call.

Modules: prepared.py (``prepare``, ``PreparedProgram`` and its run, ``run``), preparer.py (the checks once per
program, and the accesses every handler declares), handlers/ (one handler per opcode, by unit family),
state.py (one run's memory as the handlers' run-time parts see it), results.py (what a run gives back).
"""
from aipu.sim.interpreter.handlers.dma import decode_weight_stream
from aipu.sim.interpreter.prepared import PreparedProgram, prepare, run
from aipu.sim.interpreter.results import DRAM, Result, Stats, Write
from aipu.sim.machine.errors import DeadlockError, ExecutionError, HazardError

__all__ = ["DRAM", "DeadlockError", "ExecutionError", "HazardError", "PreparedProgram", "Result", "Stats", "Write",
           "decode_weight_stream", "prepare", "run"]
