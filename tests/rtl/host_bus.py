"""An AXI4-Lite master for HostRegisters under Amaranth's simulator, and the random traffic that checks it against
:class:`tests.rtl.host_model.HostModel` cycle by cycle.

``write`` and ``read`` run one transaction each, for directed tests. :class:`Traffic` issues many, with random
valid delays and ready stalls on every channel, the next address or data offered while the previous write
still waits for its response, and reads beside writes, while the core reports done and errors at random; the
model applies each write in the cycle it takes effect (its address and data held, no response pending: the
block's documented timing), so every read, response, ``irq``, ``busy``, ``start`` and ``abort`` is checked
cycle by cycle.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from amaranth.sim import Simulator

from aipu.sim.cosim.axil import read, write  # noqa: F401 (the directed tests' transactions)
from tests.rtl.host_model import CoreInputs, HostModel


def run(dut, testbench, *monitors) -> None:
    """One clocked simulation of ``testbench``, with ``monitors`` as background testbenches."""
    sim = Simulator(dut)
    sim.add_clock(1e-9)
    for monitor in monitors:
        sim.add_testbench(monitor, background=True)
    sim.add_testbench(testbench)
    sim.run()


def set_core(ctx, dut, inputs: CoreInputs) -> None:
    ctx.set(dut.done, inputs.done)
    ctx.set(dut.error, inputs.error is not None)
    cause, unit, detail = inputs.error or (0, 0, 0)
    ctx.set(dut.error_cause, cause)
    ctx.set(dut.error_unit, unit)
    ctx.set(dut.error_field, detail)
    for name in ("busy", "dram_stall", "wait", "retire"):
        ctx.set(getattr(dut, f"unit_{name}"), inputs.units.get(name, 0))


@dataclass
class _Channel:
    """One request channel of the master: the items still to send, and whether the head is offered."""

    items: deque
    offered: bool = False

    def drive(self, ctx, rng, stall: float, valid, fields: dict) -> None:
        """Offer the head (and keep offering it until taken: AXI never withdraws a valid)."""
        if not self.offered and self.items and rng.random() >= stall:
            self.offered = True
        ctx.set(valid, self.offered)
        if self.offered:
            for signal, value in zip(fields, self.items[0]):
                ctx.set(signal, value)

    def taken(self, ctx, valid, ready) -> tuple | None:
        if self.offered and ctx.get(valid) and ctx.get(ready):
            self.offered = False
            return self.items.popleft()
        return None


class Traffic:
    """Random AXI-Lite traffic against a model; ``core(cycle)`` gives the core's inputs for each cycle."""

    def __init__(self, dut, model: HostModel, rng, *, stall: float, core):
        self.dut, self.model, self.rng, self.stall, self.core = dut, model, rng, stall, core
        self.responses = {"read": [], "write": []}
        self.mismatches: list[str] = []

    def _check(self, what: str, got, expected) -> None:
        if got != expected and len(self.mismatches) < 20:
            self.mismatches.append(f"{what}: got {got}, expected {expected}")

    async def run(self, ctx, writes: list[tuple[int, int, int]], reads: list[int], max_cycles: int) -> None:
        bus, dut, model = self.dut.s_axil, self.dut, self.model
        aw, w, ar = _Channel(deque((a,) for a, _, _ in writes)), _Channel(deque((d, s) for _, d, s in writes)), \
            _Channel(deque((a,) for a in reads))
        addressed, handed = deque(), deque()       # writes whose address / data the RTL took
        held, answers, reading = deque(), deque(), deque()
        for cycle in range(max_cycles):
            aw.drive(ctx, self.rng, self.stall, bus.awvalid, (bus.awaddr,))
            w.drive(ctx, self.rng, self.stall, bus.wvalid, (bus.wdata, bus.wstrb))
            ar.drive(ctx, self.rng, self.stall, bus.arvalid, (bus.araddr,))
            ctx.set(bus.bready, self.rng.random() >= self.stall)
            ctx.set(bus.rready, self.rng.random() >= self.stall)
            inputs = self.core(cycle)
            set_core(ctx, dut, inputs)
            self._check(f"cycle {cycle} busy", ctx.get(dut.busy), model.running)
            self._check(f"cycle {cycle} irq", ctx.get(dut.irq), model.irq)
            if (taken := ar.taken(ctx, bus.arvalid, bus.arready)) is not None:
                reading.append((taken[0], model.read(taken[0])))
            if ctx.get(bus.rvalid) and ctx.get(bus.rready):
                address, expected = reading.popleft()
                self._check(f"read {address:#x}", (ctx.get(bus.rresp), ctx.get(bus.rdata)), expected)
                self.responses["read"].append(expected[0])
            if ctx.get(bus.bvalid) and ctx.get(bus.bready):
                self._check("write response", ctx.get(bus.bresp), answers[0])
                self.responses["write"].append(answers.popleft())
            # A held write (address and data taken in earlier cycles) takes effect once no response is pending.
            committing = held.popleft() if held and not ctx.get(bus.bvalid) else None
            pulses = len(model.pulses)
            response = model.cycle(inputs, committing)
            if response is not None:
                answers.append(response)
            pulsed = tuple(name for name in ("start", "abort") if ctx.get(getattr(dut, name)))
            self._check(f"cycle {cycle} start/abort", pulsed, tuple(model.pulses[pulses:]))
            if (taken := aw.taken(ctx, bus.awvalid, bus.awready)) is not None:
                addressed.append(taken[0])
            if (taken := w.taken(ctx, bus.wvalid, bus.wready)) is not None:
                handed.append(taken)
            while addressed and handed:
                held.append((addressed.popleft(), *handed.popleft()))
            await ctx.tick()
            if not (aw.items or w.items or ar.items or held or answers or reading or ctx.get(bus.bvalid)):
                return
        raise AssertionError(f"traffic not drained in {max_cycles} cycles")
