"""DWCONV's setup: the phase planes' and the blocks' geometry, and the checks that refuse the command before
anything is written."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.conv_parts.interfaces import SETUP_STEPS, depthwise_command, depthwise_geometry, dim
from aipu.rtl.conv_parts.setup import refuse_first, zero_point_fits
from aipu.sim.machine.arch import BUFFER_UNIT_BYTES, Buffer, HardwareConfig
from aipu.sim.machine.isa import Opcode
from aipu.sim.timing.conv import ENTRY_BYTES


def port_beats(config: HardwareConfig, buffer: Buffer, length):
    """Cycles a run of ``length`` bytes of ``buffer`` takes at the worst alignment, two port words a cycle
    (``aipu.sim.timing.conv``'s ``_beats(_words_spanned(...))``; port words are a power of two bytes)."""
    port = config.buffer(buffer).port_bytes
    worst_offset = port - min(port, BUFFER_UNIT_BYTES[buffer])
    words = (length + worst_offset + port - 1) >> (port.bit_length() - 1)
    return (words + 1) >> 1


def larger(a, b):
    return Mux(a > b, a, b)


class DepthwiseSetup(wiring.Component):
    """Two cycles, as ConvSetup's. ``steps.geometry``: the planes' size (ceil(in_h / stride_h) x
    ceil(in_w / stride_w)), the output size and whether the dilated kernel fits the tile. ``steps.check``:
    the faults of a DWCONV in the interpreter's order (channels, in_addr, wgt_addr, k_h, k_w, in_zero_point,
    acc_addr), the first raising ``fault`` naming it; and ``geometry``'s step counts (docs/rtl-conv.md,
    "Cycles" of DWCONV), held until the next command.

    Signature: ``command`` (In: the DWCONV command), ``steps`` (In: the sequencer's setup cycles), ``fault``,
    ``fault_field`` (Out: nothing for a CONV), ``geometry`` (Out: registered).
    """

    def __init__(self, config: HardwareConfig, error_names: tuple[str, ...]):
        self.config = config
        self.error_names = error_names
        super().__init__({"command": In(depthwise_command(config)), "steps": In(SETUP_STEPS), "fault": Out(1),
                          "fault_field": Out(range(len(error_names))), "geometry": Out(depthwise_geometry(config))})

    def elaborate(self, platform) -> Module:
        m = Module()
        config, cmd, geo = self.config, self.command, self.geometry
        n, channels = dim(config), cmd.channels
        plane_h, out_h = Signal(range(n)), Signal(range(n))
        fits_h, fits_w = Signal(), Signal()
        span_h = cmd.dilation_h * (cmd.k_h - 1) + 1
        span_w = cmd.dilation_w * (cmd.k_w - 1) + 1
        with m.If(self.steps.geometry):
            m.d.sync += [plane_h.eq((cmd.in_h + cmd.stride_h - 1) // cmd.stride_h),
                         geo.plane_w.eq((cmd.in_w + cmd.stride_w - 1) // cmd.stride_w),
                         fits_h.eq(cmd.in_h >= span_h), fits_w.eq(cmd.in_w >= span_w),
                         out_h.eq((cmd.in_h - span_h) // cmd.stride_h + 1),
                         geo.out_w.eq((cmd.in_w - span_w) // cmd.stride_w + 1)]

        plane_bytes = plane_h * geo.plane_w * channels
        taps = cmd.k_h * cmd.k_w
        checks = [
            ("channels", channels <= config.mac.rows),
            ("in_addr", cmd.in_addr + cmd.stride_h * cmd.stride_w * plane_bytes <= config.buffer(Buffer.WEIGHT).bytes),
            ("wgt_addr", cmd.wgt_addr + taps * channels <= config.buffer(Buffer.ACT).bytes),
            ("k_h", fits_h),
            ("k_w", fits_w),
            ("in_zero_point", zero_point_fits(cmd.in_zero_point, cmd.in_type, Opcode.DWCONV, "in_type")),
            ("acc_addr", cmd.acc_addr + out_h * geo.out_w * channels <= config.buffer_units(Buffer.ACC)),
        ]
        with m.If(self.steps.check):
            with m.If(cmd.opcode == Opcode.DWCONV):
                refuse_first(m, checks, self.fault, self.fault_field, self.error_names)
            positions = (out_h - 1) * geo.plane_w + geo.out_w
            width = Mux(positions < config.mac.cols, positions, config.mac.cols)
            tap_beats = larger(port_beats(config, Buffer.WEIGHT, width * channels),
                               port_beats(config, Buffer.ACT, channels))
            drain_beats = port_beats(config, Buffer.ACC, width * channels * ENTRY_BYTES)
            m.d.sync += [geo.plane_bytes.eq(plane_bytes), geo.outputs.eq(out_h * geo.out_w),
                         geo.positions.eq(positions), geo.cols_mod_w.eq(config.mac.cols % geo.plane_w),
                         geo.tap_beats.eq(tap_beats), geo.tap_cycles.eq(taps * tap_beats),
                         geo.drain_beats.eq(drain_beats), geo.period.eq(larger(taps * tap_beats, drain_beats))]
        return m
