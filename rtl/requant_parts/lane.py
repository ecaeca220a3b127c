"""REQUANT's lane: one accumulator and its channel's record to one output value (sim/golden/requant.py)."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from aipu.rtl import arith
from aipu.rtl.requant_parts.interfaces import PARAM_LAYOUT, command
from aipu.sim.machine.arch import ACC_BITS, SHIFT_BITS, HardwareConfig
from aipu.sim.machine.isa import ZERO_POINT_BITS, RequantMode

# FLOAT32 results are saturated at 2**FLOAT_INT_BITS before + zero point and the clamp: beyond any zero point
# plus any clamp bound, so the clamp decides exactly as golden's does on the unsaturated value.
FLOAT_INT_BITS = ZERO_POINT_BITS + 1
VALUE_BITS = 16     # the widest output type's; the clamp keeps every value inside [qmin, qmax]


class Requantizer(wiring.Component):
    """``value`` = clamp(q + out_zero_point, qmin, qmax), combinationally, with q golden's ``requantize``
    (NATIVE: (acc + bias) * M >> N in ``rounding``, the negative pair where ``leaky`` and the sum < 0) or
    ``requantize_float32`` (FLOAT32: float32(acc + bias) * scale, rounded half to even).

    Signature: ``accumulator`` (In: int32), ``record`` (In: the channel's PARAM record), the command's
    ``mode``, ``rounding``, ``leaky``, ``out_zero_point``, ``qmin``, ``qmax`` (In), ``value`` (Out: int16).
    """

    def __init__(self, config: HardwareConfig):
        fields = command(config)
        super().__init__({"accumulator": In(signed(ACC_BITS)), "record": In(PARAM_LAYOUT),
                          **{name: In(fields[name].shape)
                             for name in ("mode", "rounding", "leaky", "out_zero_point", "qmin", "qmax")},
                          "value": Out(signed(VALUE_BITS))})

    def elaborate(self, platform) -> Module:
        m = Module()
        net, record = arith.net, self.record
        total = net(m, self.accumulator + record.bias, "sum")          # REQUANT_SUM_BITS: never wraps
        use_negative = self.leaky & (total < 0)
        multiplier = Mux(use_negative, record.negative_multiplier, record.multiplier)
        shift = net(m, Mux(use_negative, record.negative_shift, record.shift)[:SHIFT_BITS], "shift")
        product = net(m, total * multiplier, "product")
        native = arith.rounding_shift_right(product, shift, self.rounding)
        as_float = net(m, arith.int_to_fp32(m, total, "float"), "float")
        scaled = net(m, arith.fp32_multiply(m, as_float, record.scale, "scaled"), "scaled")
        floating = arith.fp32_round_to_int(m, scaled, FLOAT_INT_BITS, "rint")
        value = net(m, Mux(self.mode == RequantMode.FLOAT32, floating, native) + self.out_zero_point, "value")
        m.d.comb += self.value.eq(arith.clamp(value, self.qmin, self.qmax))
        return m
