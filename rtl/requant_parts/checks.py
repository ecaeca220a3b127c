"""REQUANT's checks: the ACC and PARAM regions, then every other refusal of the interpreter, in its order."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl.parts import first_fault
from aipu.rtl.requant_parts.interfaces import RECORD_FLAGS, command, element_nibbles, entries, type_range
from aipu.sim.machine.arch import Buffer, DType, HardwareConfig
from aipu.sim.machine.isa import RequantMode


class RequantChecks(wiring.Component):
    """Decides, combinationally, whether the command in ``command`` is refused, in two steps as the unit
    runs them: ``region_*`` (CHECK: ``acc_addr`` and ``param_index`` regions inside their buffers) and
    ``verdict_*`` (VERDICT, after the load: the records' ``flags``, leaky in FLOAT32, dual in FLOAT32 or with
    leaky, odd channels for INT4, golden's checks of each mode in its own order, ``out_addr``). Each
    ``*_fault`` raises the first check that holds, its ``*_field`` an index into ``error_names``.

    Signature: ``command`` (In: the REQUANT word), ``flags`` (In: the record checks, sticky over the load),
    ``region_fault``, ``region_field``, ``verdict_fault``, ``verdict_field`` (Out).
    """

    def __init__(self, config: HardwareConfig, error_names: tuple[str, ...]):
        self.config, self.error_names = config, error_names
        field = range(len(error_names))
        super().__init__({"command": In(command(config)), "flags": In(RECORD_FLAGS), "region_fault": Out(1),
                          "region_field": Out(field), "verdict_fault": Out(1), "verdict_field": Out(field)})

    def elaborate(self, platform) -> Module:
        m = Module()
        cmd, config = self.command, self.config
        regions = [(cmd.acc_addr + entries(cmd) > config.buffer_units(Buffer.ACC), "acc_addr"),
                   (cmd.param_index + cmd.channels > config.buffer_units(Buffer.PARAM), "param_index")]
        region = first_fault(m, "regions", regions, self.error_names)
        verdict = first_fault(m, "refusals", self._refusals(cmd.pixels * cmd.channels), self.error_names)
        m.d.comb += [self.region_fault.eq(region.fault), self.region_field.eq(region.field),
                     self.verdict_fault.eq(verdict.fault), self.verdict_field.eq(verdict.field)]
        return m

    def _refusals(self, elements) -> list:
        """The interpreter's ExecutionErrors after the regions, in its order: records (_params), leaky in FLOAT32,
        dual in FLOAT32 or with leaky, odd channels for INT4, golden's checks (requantize / requantize_float32
        check different things in different orders; dual refuses any non-zero negative shift), out_addr."""
        cmd, flags = self.command, self.flags
        type_min, type_max = type_range(cmd)
        clamp_bounds = [((cmd.qmin < type_min) | (cmd.qmin > type_max), "qmin"),
                        ((cmd.qmax < type_min) | (cmd.qmax > type_max), "qmax"),
                        (cmd.qmin > cmd.qmax, "qmin")]
        zero_point = [((cmd.out_zero_point < type_min) | (cmd.out_zero_point > type_max), "out_zero_point")]
        floating = cmd.mode == RequantMode.FLOAT32
        negative_shift = (cmd.leaky & flags.negative_shift) | (cmd.dual & flags.negative_shift_set)
        native_checks = [(flags.shift, "param_shift"), (negative_shift, "param_negative_shift"),
                         *clamp_bounds, *zero_point]
        float_checks = [(flags.scale, "param_scale"), *zero_point, *clamp_bounds]
        out_bytes = (elements * element_nibbles(cmd) + 1) >> 1
        out_region = cmd.out_addr + out_bytes > self.config.buffer_units(Buffer.OUT)
        int4 = cmd.out_type == DType.INT4
        return [(flags.reserved, "param_reserved"), (floating & cmd.leaky, "leaky"),
                (cmd.dual & (floating | cmd.leaky), "dual"), (int4 & cmd.channels[0], "channels"),
                *((~floating & refused, name) for refused, name in native_checks),
                *((floating & refused, name) for refused, name in float_checks),
                (out_region, "out_addr")]
