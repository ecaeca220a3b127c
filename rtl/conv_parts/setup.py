"""CONV's setup: the command's tile geometry, and the checks that refuse it before anything is written."""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.conv_parts.interfaces import SETUP_STEPS, conv_command, diagonal, dim, geometry, packed_bytes
from aipu.sim.machine.arch import Buffer, DType, HardwareConfig, dtype_bounds
from aipu.sim.machine.isa import COMMANDS, Opcode
from aipu.sim.timing.conv import ConvTiming, wide_input_beats


def zero_point_fits(zero_point: Value, dtype: Value, opcode: Opcode, type_field: str) -> Value:
    """``zero_point`` lies in the range of the operand type ``dtype``, one of the types the command's
    ``type_field`` allows (golden's check)."""
    types = COMMANDS[opcode].field(type_field).legal_values()
    fits = Const(0)
    for member in types:
        low, high = dtype_bounds(member)
        fits = Mux(dtype == member, (zero_point >= low) & (zero_point <= high), fits)
    return fits


def refuse_first(m: Module, checks: list[tuple[str, Value]], fault, fault_field, error_names) -> None:
    """``fault`` with ``fault_field`` naming the first of the (field, legal) ``checks`` that fails."""
    refused = Const(0)
    for name, legal in checks:
        with m.If(~refused & ~legal):
            m.d.comb += [fault.eq(1), fault_field.eq(error_names.index(name))]
        refused = refused | ~legal


class ConvSetup(wiring.Component):
    """Two cycles. ``steps.geometry``: group sizes, the output size, whether the dilated kernel fits the input,
    and the operand types. ``steps.check``: the faults, in the interpreter's order (groups, in_type, in_c,
    in_addr, wgt_addr, k_h, k_w, in_zero_point, w_zero_point, acc_addr), the first raising ``fault`` with
    ``fault_field`` naming it (an index into ``error_names``); and the rest of the geometry the block walk,
    the loader and the issue read, in bytes of the operands' types (docs/arithmetic.md D23), held until the
    next command. A DWCONV is DepthwiseSetup's: this part raises nothing for it.

    Signature: ``command`` (In: the CONV command), ``steps`` (In: the sequencer's setup cycles), ``fault``,
    ``fault_field`` (Out, per UnitComponent.elaborate_engine), ``geometry`` (Out: registered).
    """

    def __init__(self, config: HardwareConfig, error_names: tuple[str, ...]):
        self.config = config
        self.error_names = error_names
        super().__init__({"command": In(conv_command(config)), "steps": In(SETUP_STEPS), "fault": Out(1),
                          "fault_field": Out(range(len(error_names))), "geometry": Out(geometry(config))})

    def elaborate(self, platform) -> Module:
        m = Module()
        config, cmd, geo = self.config, self.command, self.geometry
        rows, cols = config.mac.rows, config.mac.cols
        weight_beats = ConvTiming.of(config).weight_beats
        n = dim(config)
        out_h = Signal(range(n))
        groups_divide, fits_h, fits_w = Signal(), Signal(), Signal()
        span_h = cmd.dilation_h * (cmd.k_h - 1) + 1
        span_w = cmd.dilation_w * (cmd.k_w - 1) + 1
        with m.If(self.steps.geometry):
            m.d.sync += [geo.group_in.eq(cmd.in_c // cmd.groups), geo.group_out.eq(cmd.out_c // cmd.groups),
                         groups_divide.eq((cmd.in_c % cmd.groups == 0) & (cmd.out_c % cmd.groups == 0)),
                         fits_h.eq(cmd.in_h >= span_h), fits_w.eq(cmd.in_w >= span_w),
                         out_h.eq((cmd.in_h - span_h) // cmd.stride_h + 1),
                         geo.out_w.eq((cmd.in_w - span_w) // cmd.stride_w + 1),
                         geo.int4_weights.eq(cmd.w_type == DType.INT4), geo.int4_inputs.eq(cmd.in_type == DType.INT4)]

        int4_w, int4_x = geo.int4_weights, geo.int4_inputs
        weights_per_out = packed_bytes(cmd.k_h * cmd.k_w * geo.group_in, int4_w)
        pixel_bytes = packed_bytes(cmd.in_c, int4_x)
        checks = [  # the interpreter's order: groups, the types, the input, the weights, the output size, the zero
            ("groups", groups_divide),              # points, ACC
            ("in_type", ~int4_x | int4_w),
            ("in_c", ~(int4_w | int4_x) | ~geo.group_in[0]),
            ("in_addr", cmd.in_addr + cmd.in_h * cmd.in_w * pixel_bytes <= config.buffer(Buffer.ACT).bytes),
            ("wgt_addr", cmd.wgt_addr + cmd.out_c * weights_per_out <= config.buffer(Buffer.WEIGHT).bytes),
            ("k_h", fits_h),
            ("k_w", fits_w),
            ("in_zero_point", zero_point_fits(cmd.in_zero_point, cmd.in_type, Opcode.CONV, "in_type")),
            ("w_zero_point", zero_point_fits(cmd.w_zero_point, cmd.w_type, Opcode.CONV, "w_type")),
            ("acc_addr", cmd.acc_addr + out_h * geo.out_w * cmd.out_c <= config.buffer_units(Buffer.ACC)),
        ]
        chunk = Mux(int4_w, 2 * rows, rows)     # the in-channels of a block

        def fitting(value):
            """``value(k)`` for k = groups_per_block(): the most groups whose channels fit a chunk and columns."""
            chosen = value(1)
            for k in range(2, diagonal(config) + 1):
                chosen = Mux((k * geo.group_in <= chunk) & (k * geo.group_out <= cols), value(k), chosen)
            return chosen

        with m.If(self.steps.check):
            with m.If(cmd.opcode == Opcode.CONV):
                refuse_first(m, checks, self.fault, self.fault_field, self.error_names)
            beats = Mux(int4_w & ~int4_x, wide_input_beats(config), ConvTiming.of(config).beats)
            row_bytes = cmd.in_w * pixel_bytes
            pixel_cycles = out_h * geo.out_w * beats
            shortest = Mux(cols * weight_beats > 2 * beats + 1, cols * weight_beats, 2 * beats + 1)  # the loader's
            m.d.sync += [                                                                   # and the write-back's
                geo.beats.eq(beats), geo.weights_per_out_channel.eq(weights_per_out), geo.pixel_cycles.eq(pixel_cycles),
                geo.block_cycles.eq(Mux(pixel_cycles > shortest, pixel_cycles, shortest)),
                geo.step_x.eq(cmd.stride_w * pixel_bytes), geo.step_y.eq(cmd.stride_h * row_bytes),
                geo.tap_x.eq(cmd.dilation_w * pixel_bytes), geo.tap_y.eq(cmd.dilation_h * row_bytes),
                geo.in_chunks_last.eq(Mux(int4_w, (geo.group_in - 1) // (2 * rows), (geo.group_in - 1) // rows)),
                geo.out_chunks_last.eq((geo.group_out - 1) // cols),
                geo.groups_per_block.eq(fitting(lambda k: k)),
                geo.block_group_cols.eq(fitting(lambda k: k * geo.group_out))]
        return m
