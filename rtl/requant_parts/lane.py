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
LANE_FIELDS = ("mode", "rounding", "leaky", "dual", "out_zero_point", "qmin", "qmax")   # the command's, per lane


class Requantizer(wiring.Component):
    """``value`` = clamp(q + out_zero_point, qmin, qmax), combinationally, with q golden's ``requantize``
    (NATIVE: (acc + bias) * M >> N in ``rounding``, the negative pair where ``leaky`` and the sum < 0; with
    ``dual`` the second plane's ``second`` * negative multiplier added before the shift, golden's
    ``dual_requant``) or ``requantize_float32`` (FLOAT32: float32(acc + bias) * scale, rounded half to even).

    Signature: ``accumulator``, ``second`` (In: int32), ``record`` (In: the channel's PARAM record), the
    command's ``mode``, ``rounding``, ``leaky``, ``dual``, ``out_zero_point``, ``qmin``, ``qmax`` (In),
    ``value`` (Out: int16). Built with ``planes=1`` the lane has no second multiplier and ignores ``dual``
    (the unit's lanes past the first ``lanes / 2`` never take a dual output).
    """

    def __init__(self, config: HardwareConfig, planes: int = 2):
        self.planes = planes
        fields = command(config)
        super().__init__({"accumulator": In(signed(ACC_BITS)), "second": In(signed(ACC_BITS)),
                          "record": In(PARAM_LAYOUT),
                          **{name: In(fields[name].shape) for name in LANE_FIELDS},
                          "value": Out(signed(VALUE_BITS))})

    def elaborate(self, platform) -> Module:
        m = Module()
        net, record = arith.net, self.record
        total = net(m, self.accumulator + record.bias, "sum")          # REQUANT_SUM_BITS: never wraps
        use_negative = self.leaky & (total < 0)
        multiplier = Mux(use_negative, record.negative_multiplier, record.multiplier)
        shift = net(m, Mux(use_negative, record.negative_shift, record.shift)[:SHIFT_BITS], "shift")
        product = total * multiplier
        if self.planes == 2:        # REQUANT_DUAL_BITS: the plane sum, exact (a single product with dual = 0)
            product = product + Mux(self.dual, self.second * record.negative_multiplier, 0)
        product = net(m, product, "product")
        native = arith.rounding_shift_right(product, shift, self.rounding)
        as_float = net(m, arith.int_to_fp32(m, total, "float"), "float")
        scaled = net(m, arith.fp32_multiply(m, as_float, record.scale, "scaled"), "scaled")
        floating = arith.fp32_round_to_int(m, scaled, FLOAT_INT_BITS, "rint")
        value = net(m, Mux(self.mode == RequantMode.FLOAT32, floating, native) + self.out_zero_point, "value")
        m.d.comb += self.value.eq(arith.clamp(value, self.qmin, self.qmax))
        return m
