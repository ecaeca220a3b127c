"""CONV's sequencer: the command's setup cycles, then its phases, each streaming one block and loading the next."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.conv_parts.interfaces import PHASE, SETUP_STEPS, geometry, phase_cycles
from aipu.sim.machine.arch import HardwareConfig
from aipu.sim.timing.conv import ConvTiming


class ConvSequencer(wiring.Component):
    """IDLE until ``start``; SETUP_A (``setup.geometry``), SETUP_B (``setup.check``, ``phase.begin``;
    ``refused`` ends the command there); then RUN, in phases. Phase -1 only loads block 0 (``cols`` columns
    of ``weight_beats`` cycles); phase b streams block b's pixels (``pixel_cycles``) from ``phase.bank``
    while the loader fills the other bank with block b + 1, and lasts ``block_cycles``; the last block's
    phase lasts until its last pixel is written back, then ``done``. A DWCONV that passes the checks runs
    from ``depthwise_begin`` (in SETUP_B) until ``depthwise_done`` instead (DEPTHWISE: the tap walk and the
    drain keep its time).

    Signature: ``start`` (In), ``done`` (Out), ``refused`` (In: the setup's fault), ``last`` (In: the block
    being loaded is the last), ``geometry`` (In: the setup's), ``setup`` (Out: the setup cycles), ``phase``
    (Out: to the block walk, the loader and the issue), ``depthwise`` (In: the command is a DWCONV),
    ``depthwise_begin`` (Out: to the tap walk), ``depthwise_done`` (In: from the drain).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        super().__init__({"start": In(1), "done": Out(1), "refused": In(1), "last": In(1),
                          "geometry": In(geometry(config)), "setup": Out(SETUP_STEPS), "phase": Out(PHASE),
                          "depthwise": In(1), "depthwise_begin": Out(1), "depthwise_done": In(1)})

    def elaborate(self, platform) -> Module:
        m = Module()
        phase, geo = self.phase, self.geometry
        load_cycles = self.config.mac.cols * ConvTiming.of(self.config).weight_beats
        phase_cycle = Signal(range(phase_cycles(self.config)))
        loading_phase, last_phase = Signal(), Signal()
        bank = phase.bank
        phase_len = Mux(loading_phase, load_cycles, Mux(last_phase, geo.pixel_cycles + geo.beats + 1, geo.block_cycles))
        phase_ends = phase_cycle == phase_len - 1

        with m.FSM(name="conv_engine") as engine:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.next = "SETUP_A"
            with m.State("SETUP_A"):
                m.d.comb += self.setup.geometry.eq(1)
                m.next = "SETUP_B"
            with m.State("SETUP_B"):
                m.d.comb += [self.setup.check.eq(1), phase.begin.eq(1)]
                m.d.sync += [phase_cycle.eq(0), loading_phase.eq(1), last_phase.eq(0), bank.eq(0)]
                m.next = "RUN"
                with m.If(self.refused):
                    m.next = "IDLE"
                with m.Elif(self.depthwise):
                    m.d.comb += self.depthwise_begin.eq(1)
                    m.next = "DEPTHWISE"
            with m.State("DEPTHWISE"):
                m.d.comb += self.done.eq(self.depthwise_done)
                with m.If(self.depthwise_done):
                    m.next = "IDLE"
            with m.State("RUN"):
                m.d.sync += phase_cycle.eq(phase_cycle + 1)
                with m.If(phase_ends):
                    with m.If(last_phase):
                        m.d.comb += self.done.eq(1)
                        m.next = "IDLE"
        running = engine.ongoing("RUN")
        m.d.comb += [phase.loading.eq(running & ~last_phase & (phase_cycle < load_cycles)),
                     phase.issuing.eq(running & ~loading_phase & (phase_cycle < geo.pixel_cycles)),
                     phase.boundary.eq(running & phase_ends)]
        with m.If(phase.boundary):      # last, so that it wins over RUN's count
            m.d.sync += [phase_cycle.eq(0), loading_phase.eq(0), last_phase.eq(self.last), bank.eq(~bank)]
        return m
