"""Round-robin choice, shared by the arbiters of the DRAM bridge and of WDEC's parts."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, Value


def round_robin(m: Module, requests: Value, pointer: Value) -> Signal:
    """The first set bit of ``requests`` from bit ``pointer`` on, wrapping around (0 when none is set)."""
    n = len(requests)
    winner = Signal(range(max(n, 2)))
    for start in range(n):
        with m.If(pointer == start):
            for offset in reversed(range(n)):
                index = (start + offset) % n
                with m.If(requests[index]):
                    m.d.comb += winner.eq(index)
    return winner


def after(winner: Value, n: int) -> Value:
    """The pointer after ``winner`` is granted: the next requester, wrapping around."""
    return Mux(winner == n - 1, 0, winner + 1)
