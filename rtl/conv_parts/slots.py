"""DWCONV's slot operands: a tap's input run squeezed into the block's accumulator slots, and each slot's
kernel weight."""
from __future__ import annotations

from amaranth.hdl import C, Cat, Module, Mux, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.arith import net
from aipu.rtl.conv_parts.interfaces import depthwise_command, slot_operands, slots, tap_operands
from aipu.sim.machine.arch import HardwareConfig


def by_channels(counts: list[Value], choose) -> Value:
    """``choose(k)`` for the channel count k whose ``counts[k - 1]`` is set (1 .. rows): a multiplexer over the
    counts a DWCONV may have, each ``choose(k)`` a fixed wiring (divisions by ``k`` are done at elaboration)."""
    value = choose(1)
    for k in range(2, len(counts) + 1):
        value = Mux(counts[k - 1], choose(k), value)
    return value


class SlotOperands(wiring.Component):
    """Combinational. Byte p of ``tap.run`` is channel p mod channels of position p div channels; when that
    position is an output, its byte moves down by the ``skip`` bytes of dropped positions before it, so that
    slot e holds the byte of accumulator e (channel e mod channels of the block's output e div channels).
    The move is a compaction in log2(slots) stages of fixed shifts, lowest first: the kept bytes' moves never
    decrease along the run and grow by at most the dropped bytes between two, so no two ever meet. Slot e's
    weight is kernel byte e mod channels minus ``w_zero_point``.

    Signature: ``command`` (In: the DWCONV command), ``tap`` (In: from the tap walk), ``operands`` (Out: to
    the MAC array).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({"command": In(depthwise_command(config)), "tap": In(tap_operands(config)),
                          "operands": Out(slot_operands(config))})

    def elaborate(self, platform) -> Module:
        m = Module()
        rows, cols, tap, channels = self.config.mac.rows, self.config.mac.cols, self.tap, self.command.channels
        total = slots(self.config)
        stages = (total - 1).bit_length()

        def control(p: int, k: int) -> Value:
            """(moves by, kept) of byte p when there are k channels."""
            position = p // k
            return Cat(tap.skip[position], tap.kept[position]) if position < cols else C(0, stages + 1)

        counts = [net(m, channels == k, f"channels_{k}") for k in range(1, rows + 1)]
        elements = [net(m, Cat(tap.run[8 * p:8 * p + 8], by_channels(counts, lambda k: control(p, k))),
                        f"squeeze_in{p}") for p in range(total)]
        for stage in range(stages):
            elements = [net(m, self.squeezed(elements, e, stage), f"squeeze{stage}_slot{e}") for e in range(total)]
        m.d.comb += self.operands.x.eq(Cat(*(element[:8] for element in elements)))

        weights = [net(m, tap.kernel[8 * r:8 * r + 8].as_signed() - self.command.w_zero_point, f"kernel{r}")
                   for r in range(rows)]
        for e in range(total):
            m.d.comb += self.operands.w[e].eq(by_channels(counts, lambda k: weights[e % k]))
        return m

    @staticmethod
    def squeezed(elements: list, e: int, stage: int) -> Value:
        """Slot ``e`` after ``stage``: the element ``2**stage`` above if it moves by that much, else its own if
        it stays, else nothing (``elements``: byte, the rest of its move, kept as the top bit)."""
        def kept(element):
            return element[-1]

        def moves(element):
            return element[8 + stage]
        here = elements[e]
        stays = kept(here) & ~moves(here)
        if e + (1 << stage) >= len(elements):
            return Mux(stays, here, 0)
        above = elements[e + (1 << stage)]
        return Mux(kept(above) & moves(above), above, Mux(stays, here, 0))
