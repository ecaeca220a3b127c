"""LUT's phases: the sequence of one LUT or SOFTMAX command from its table load to its last write."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class LutControl(wiring.Component):
    """At ``start``: ``begin`` (every part takes the command), then LOAD (``load``; ``prime`` and
    ``prime_hold`` in the table's ``prologue``) until the table is ``loaded``; then RUN (LUT) or SOFTMAX.
    The first cycle of either decides the faults (``refused``: ``fault`` naming ``field``, back to IDLE,
    nothing written); RUN then ``advance``s a group a cycle through the ``last_group`` and DRAINs,
    SOFTMAX pulses ``softmax_begin``; both end with the packer's ``done``.

    Signature: ``start``, ``is_softmax``, ``refused``, ``field``, ``prologue``, ``prologue_last``, ``loaded``,
    ``last_group``, ``done`` (In), ``begin``, ``load``, ``prime``, ``prime_hold``, ``advance``,
    ``softmax_begin``, ``fault``, ``fault_field`` (Out).
    """

    def __init__(self, error_names: tuple[str, ...]):
        field = range(len(error_names))
        super().__init__({
            **{name: In(1) for name in ("start", "is_softmax", "refused", "prologue", "prologue_last", "loaded",
                                        "last_group", "done")}, "field": In(field),
            **{name: Out(1) for name in ("begin", "load", "prime", "prime_hold", "advance", "softmax_begin",
                                         "fault")}, "fault_field": Out(field)})

    def elaborate(self, platform) -> Module:
        m = Module()
        first = Signal()          # the first cycle after the load
        with m.FSM(name="lut_engine"):
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.comb += self.begin.eq(1)
                    m.d.sync += first.eq(1)
                    m.next = "LOAD"
            with m.State("LOAD"):
                m.d.comb += self.load.eq(1)
                with m.If(self.prologue):   # the first two words of the table and of the source
                    m.d.comb += [self.prime.eq(1), self.prime_hold.eq(self.prologue_last)]
                with m.Elif(self.loaded & self.is_softmax):
                    m.next = "SOFTMAX"
                with m.Elif(self.loaded):
                    m.next = "RUN"
            with m.State("RUN"):
                m.d.sync += first.eq(0)
                with m.If(first & self.refused):
                    self._refuse(m)
                with m.Else():
                    m.d.comb += self.advance.eq(1)
                    with m.If(self.last_group):
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                with m.If(self.done):
                    m.next = "IDLE"
            with m.State("SOFTMAX"):   # the faults in the first cycle, then the rows until the last result
                m.d.sync += first.eq(0)
                with m.If(first & self.refused):
                    self._refuse(m)
                with m.Elif(first):
                    m.d.comb += self.softmax_begin.eq(1)
                with m.If(self.done):
                    m.next = "IDLE"
        return m

    def _refuse(self, m: Module) -> None:
        m.d.comb += [self.fault.eq(1), self.fault_field.eq(self.field)]
        m.next = "IDLE"
