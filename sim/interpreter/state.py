"""The memory of one run as the commands' run-time parts see it: the spaces, typed views of them, and the ACC
register's bookkeeping of sums that did not fit it (docs/arithmetic.md D6)."""
from __future__ import annotations

import numpy as np

from aipu.sim.interpreter.results import DRAM, Stats
from aipu.sim.machine.arch import ACC_BITS, ACC_DTYPE, PARAM_DTYPE, Buffer, bit_range
from aipu.sim.machine.memory import Memory

_ACC_MIN, _ACC_MAX = bit_range(ACC_BITS, signed=True)
_BUFFERS = tuple(Buffer)
View = tuple   # (space, first byte, end byte, numpy type, shape): a typed view of one run's memory


class RunState:
    """The memory of one run, as the steps see it."""

    __slots__ = ("spaces", "acc", "_exact_acc", "wrapped", "any_wrapped", "stats", "loop_spaces", "records")

    def __init__(self, memory: Memory, stats: Stats) -> None:
        self.spaces = {DRAM: memory.dram, **memory.buffers}
        self.loop_spaces = (*map(memory.buffers.__getitem__, _BUFFERS), memory.dram)   # as run_loop takes them
        self.records = memory.buffers[Buffer.PARAM].view(PARAM_DTYPE)
        self.acc = memory.buffers[Buffer.ACC].view(ACC_DTYPE)
        # The wrapping ACC register (D6) holds the exact sum of every entry whose sum fits it; where a sum did
        # not fit, ``wrapped`` marks the entry and ``exact_acc`` holds its exact sum, checked where it is
        # consumed. Preloaded ACC content is exact.
        self._exact_acc: np.ndarray | None = None      # made when a sum first does not fit (most runs: never)
        self.wrapped = np.zeros(self.acc.shape, np.bool_)
        self.any_wrapped = False       # whether an entry was ever marked: the run loop reads no marks until then
        self.stats = stats

    @property
    def exact_acc(self) -> np.ndarray:
        if self._exact_acc is None:
            self._exact_acc = np.zeros(self.acc.shape, np.int64)
        return self._exact_acc

    def accumulate(self, first: int, sums: np.ndarray, add: bool) -> None:
        """ACC entries [first, first + sums.size) = sums (+ what they hold, when ``add``), in sums' shape.
        Sums of type int32 fit the register by type; wider ones are checked."""
        entries = slice(first, first + sums.size)
        if add:
            prior = np.where(self.wrapped[entries], self.exact_acc[entries], self.acc[entries])
            sums = prior.reshape(sums.shape) + sums
        self.acc[entries].reshape(sums.shape)[...] = sums     # int64 -> int32 keeps the low 32 bits: it wraps
        fits = sums.dtype.itemsize <= ACC_DTYPE.itemsize or (_ACC_MIN <= sums.min() and sums.max() <= _ACC_MAX)
        if not fits:
            self.exact_acc[entries].reshape(sums.shape)[...] = sums
            self.any_wrapped = True
        self.wrapped[entries] = not fits

    def unfit_sum(self, first: int, last: int) -> int | None:
        """The exact sum of largest magnitude among ACC entries [first, last) that does not fit the register."""
        marked = np.flatnonzero(self.wrapped[first:last])
        if not marked.size:
            return None
        exact = self.exact_acc[first + marked]
        unfit = exact[(exact < _ACC_MIN) | (exact > _ACC_MAX)]
        return int(unfit[np.argmax(np.abs(unfit))]) if unfit.size else None


def view(state: RunState, region: View) -> np.ndarray:
    """The typed array ``region`` names in this run's memory."""
    space, start, stop, dtype, shape = region
    return state.spaces[space][start:stop].view(dtype).reshape(shape)


def strided_view(state: RunState, pattern: tuple) -> np.ndarray:
    """DRAM through a DMA pattern (base, shape [y][x][run bytes], byte strides)."""
    base, shape, strides = pattern
    return np.ndarray(shape, np.uint8, state.spaces[DRAM], base, strides)


def space_name(space) -> str:
    """DRAM's name, or a buffer's."""
    return space if isinstance(space, str) else space.name
