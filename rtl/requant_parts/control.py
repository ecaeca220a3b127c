"""REQUANT's phases: the sequence of one command through CHECK, LOAD, VERDICT and STREAM."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class RequantControl(wiring.Component):
    """From ``start`` (the cycle after it): CHECK (``begin``; the region checks), LOAD (``load`` until
    ``last_read``), LAND (the last read lands), VERDICT (the other checks), STREAM (``issue`` a group a
    cycle through ``last_group``), TAIL (stage B of the last group), FLUSH (``flush``, ``done``). A check
    that holds raises ``fault`` naming its ``field`` and ends the command before anything is written.

    Signature: ``start`` (In), ``region_fault``, ``region_field``, ``verdict_fault``, ``verdict_field``,
    ``last_read``, ``last_group`` (In), ``begin``, ``load``, ``issue``, ``flush``, ``done``, ``fault``,
    ``fault_field`` (Out).
    """

    def __init__(self, error_names: tuple[str, ...]):
        field = range(len(error_names))
        super().__init__({"start": In(1), "region_fault": In(1), "region_field": In(field), "verdict_fault": In(1),
                          "verdict_field": In(field), "last_read": In(1), "last_group": In(1),
                          "begin": Out(1), "load": Out(1), "issue": Out(1), "flush": Out(1), "done": Out(1),
                          "fault": Out(1), "fault_field": Out(field)})

    def elaborate(self, platform) -> Module:
        m = Module()
        with m.FSM(name="requant"):
            with m.State("IDLE"):
                with m.If(self.start):
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.comb += self.begin.eq(1)
                self._refuse(m, self.region_fault, self.region_field, otherwise="LOAD")
            with m.State("LOAD"):
                m.d.comb += self.load.eq(1)
                with m.If(self.last_read):
                    m.next = "LAND"
            with m.State("LAND"):
                m.next = "VERDICT"
            with m.State("VERDICT"):
                self._refuse(m, self.verdict_fault, self.verdict_field, otherwise="STREAM")
            with m.State("STREAM"):
                m.d.comb += self.issue.eq(1)
                with m.If(self.last_group):
                    m.next = "TAIL"
            with m.State("TAIL"):
                m.next = "FLUSH"
            with m.State("FLUSH"):
                m.d.comb += [self.flush.eq(1), self.done.eq(1)]
                m.next = "IDLE"
        return m

    def _refuse(self, m, fault, field, *, otherwise: str) -> None:
        with m.If(fault):
            m.d.comb += [self.fault.eq(1), self.fault_field.eq(field)]
            m.next = "IDLE"
        with m.Else():
            m.next = otherwise
