"""What the parts of LUT (aipu.rtl.lut_parts) and REQUANT (aipu.rtl.requant_parts) share.

* :class:`FirstFault`: an engine lists its checks as (condition, error name) pairs in the interpreter's
  order; the first that holds is the field the unit's sequencer stops naming (docs/rtl.md, "Units").
* :func:`by_type`: a per-type constant (element size, range) of a command's type field.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out


class FirstFault(wiring.Component):
    """``fault`` is 1 when any bit of ``conditions`` is; ``field`` is then the index in ``error_names`` of
    ``names[i]`` for the lowest such bit ``i`` (0 when none is), so the earliest check listed is the one named.

    Signature: ``conditions`` (In: one bit per check, the first check in bit 0), ``fault`` (Out: 1 bit),
    ``field`` (Out: an index into ``error_names``, the unit's ``error_field``).
    """

    def __init__(self, names: list[str], error_names: tuple[str, ...]):
        self.fields = [error_names.index(name) for name in names]
        super().__init__({"conditions": In(len(self.fields)), "fault": Out(1), "field": Out(range(len(error_names)))})

    def elaborate(self, platform) -> Module:
        m = Module()
        chosen = Const(0)
        for position in reversed(range(len(self.fields))):
            chosen = Mux(self.conditions[position], self.fields[position], chosen)
        m.d.comb += [self.fault.eq(self.conditions.any()), self.field.eq(chosen)]
        return m


def first_fault(m: Module, name: str, checks: list, error_names: tuple[str, ...]) -> FirstFault:
    """A :class:`FirstFault` over ``checks`` ((condition, error name) pairs), added to ``m`` as submodule
    ``name`` with its conditions driven."""
    m.submodules[name] = first = FirstFault([field for _, field in checks], error_names)
    m.d.comb += first.conditions.eq(Cat(condition for condition, _ in checks))
    return first


def by_type(type_field, values: dict) -> Value:
    """``values[type_field]`` for ``values`` mapping each DType to an int (0 for a code no DType has)."""
    result = Const(0)
    for dtype, value in values.items():
        result = Mux(type_field == dtype, value, result)
    return result
