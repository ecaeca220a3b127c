"""Arithmetic building blocks the units share, as combinational Amaranth expressions.

Each function takes Amaranth values (or plain integers / enum members) and returns a value; none creates
state, so a caller puts its pipeline registers where its timing needs them. The larger networks (the
float32 ones) also take the Module and name their reused intermediate results as combinational signals
(:func:`net`); the small ones expect their operands as signals when they are large expressions. The semantics are the golden
model's (docs/arithmetic.md): :func:`rounding_shift_right` is ``sim/golden/rounding.py``'s
``rounding_shift_right`` for every :class:`Rounding`, the float32 pieces reproduce numpy's float32
arithmetic (IEEE-754 binary32, round to nearest even, subnormals kept, overflow to infinity).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value

from aipu.sim.machine.isa import Rounding

FP32_FRACTION_BITS = 23
FP32_EXPONENT_BITS = 8
FP32_BIAS = (1 << (FP32_EXPONENT_BITS - 1)) - 1
FP32_MANTISSA_BITS = FP32_FRACTION_BITS + 1            # with the hidden bit
FP32_INFINITY = ((1 << FP32_EXPONENT_BITS) - 1) << FP32_FRACTION_BITS   # exponent all ones, fraction 0


def rounding_shift_right(value, shift, rounding) -> Value:
    """round(value / 2**shift) in ``rounding`` (a :class:`Rounding` member or a value holding one).

    Hardware form of the golden model: q = value >> shift (arithmetic), r = the bits shifted out, compared
    with the half 2**(shift - 1); shift = 0 returns ``value`` in every mode. The result is one bit wider
    than ``value`` (q + 1 of the largest q)."""
    value, shift, rounding = Value.cast(value), Value.cast(shift), Value.cast(rounding)
    quotient = value >> shift
    width = len(value)
    remainder = value.as_unsigned() & ((Const(1, 1) << shift) - 1)[:width]
    half = (Const(1, 1) << shift) >> 1
    above = remainder > half
    tie = (remainder == half) & (shift != 0)
    round_up_when = {
        Rounding.FLOOR: Const(0),
        Rounding.HALF_UP: above | tie,
        Rounding.HALF_TO_EVEN: above | (tie & quotient[0]),
        Rounding.HALF_AWAY_FROM_ZERO: above | (tie & ~value[-1]),   # a negative tie stays at the floor
    }
    round_up = Const(0)
    for mode, condition in round_up_when.items():
        round_up = round_up | ((rounding == mode) & condition)
    return quotient + round_up


def clamp(value, low, high) -> Value:
    """``value`` limited to [low, high] (low <= high is the caller's promise)."""
    value, low, high = Value.cast(value), Value.cast(low), Value.cast(high)
    return Mux(value < low, low, Mux(value > high, high, value))


def leading_zeros(value) -> Value:
    """Zero bits above the highest one of an unsigned ``value``; its width when ``value`` is 0.

    A tree over halves (logarithmic depth): the high half's count if it holds a one, else its width plus
    the low half's count."""
    value = Value.cast(value)
    if len(value) == 1:
        return ~value[0]
    split = len(value) // 2
    high, low = value[split:], value[:split]
    return Mux(high != 0, leading_zeros(high), len(high) + leading_zeros(low))


def bit_length(m: Module, value, width: int) -> Signal:
    """The bit length of the unsigned ``width``-bit ``value`` (0 for 0) as a combinational signal: the
    position above its highest one, found by a priority chain from the lowest bit up."""
    result = Signal(range(width + 1))
    for bit in range(width):
        with m.If(value[bit]):
            m.d.comb += result.eq(bit + 1)
    return result


def net(m: Module, value, name: str) -> Signal:
    """``value`` as a combinational signal. A network that uses one expression several times refers to the
    signal: Amaranth walks an expression as a tree, once per use, so unnamed reuse grows exponentially."""
    value = Value.cast(value)
    signal = Signal(value.shape(), name=name)
    m.d.comb += signal.eq(value)
    return signal


def _round_to_nearest_even(kept, dropped_half, dropped_rest) -> Value:
    """``kept`` + 1 if the dropped bits are above the half, or exactly the half and ``kept`` is odd."""
    return kept + (dropped_half & (dropped_rest | kept[0]))


def _pack_fp32(m: Module, sign, biased_exponent, mantissa, name: str) -> Value:
    """Bits of a float32 from a rounded mantissa (up to 2**24, hidden bit included when normal).

    ``biased_exponent`` <= 0 means subnormal (``mantissa`` then already holds the denormalised value).
    Adding the mantissa to (exponent - 1) << 23 lets a hidden bit, and a rounding carry into 2**24 or into
    the smallest normal, step the exponent field for free; at or beyond the infinity pattern: infinity."""
    exponent_field = Mux(biased_exponent > 0, biased_exponent - 1, 0)
    magnitude = net(m, (exponent_field << FP32_FRACTION_BITS) + mantissa, f"{name}_magnitude")
    return Cat(Mux(magnitude >= FP32_INFINITY, FP32_INFINITY, magnitude)[:31], sign)


def _rounded_mantissa(m: Module, value, count, name: str) -> Signal:
    """The top bits of ``value`` above its ``count`` (>= 1) lowest, rounded to nearest even on those."""
    value, count = Value.cast(value), Value.cast(count)
    below = (count - 1).as_unsigned()[:len(count)]
    kept = net(m, (value >> count)[:FP32_MANTISSA_BITS], f"{name}_kept")
    half = (value >> below)[0]
    rest = (value & ((Const(1, 1) << below) - 1)[:len(value)]) != 0
    return net(m, _round_to_nearest_even(kept, half, rest), f"{name}_mantissa")


def int_to_fp32(m: Module, value, name: str = "to_fp32") -> Value:
    """float32 bits of the signed integer ``value``, rounded to nearest even (numpy's int -> float32 cast)."""
    value = Value.cast(value)
    width = len(value) + 1
    magnitude = net(m, Mux(value < 0, -value, value).as_unsigned()[:width], f"{name}_abs")
    zeros = net(m, leading_zeros(magnitude), f"{name}_zeros")
    # Normalised: the top one at bit width - 1; at least two bits below the mantissa for guard and sticky.
    padding = max(0, FP32_MANTISSA_BITS + 2 - width)
    normalised = net(m, Cat(Const(0, padding), (magnitude << zeros)[:width]), f"{name}_normalised")
    mantissa = _rounded_mantissa(m, normalised, len(normalised) - FP32_MANTISSA_BITS, name)
    exponent = net(m, FP32_BIAS + width - 1 - zeros, f"{name}_exponent")
    return Mux(magnitude == 0, 0, _pack_fp32(m, value < 0, exponent, mantissa, name))


def _small_unsigned(value, maximum: int) -> Value:
    """A non-negative ``value`` known to be at most ``maximum``, as an unsigned shift amount of just enough bits."""
    return Value.cast(value).as_unsigned()[:maximum.bit_length()]


def _unpack_fp32(m: Module, bits, name: str):
    """(sign, effective exponent (1 for subnormals), 24-bit mantissa with its hidden bit when normal)."""
    bits = Value.cast(bits)
    exponent = bits[FP32_FRACTION_BITS:31]
    normal = exponent != 0
    return (bits[31], net(m, Mux(normal, exponent, 1), f"{name}_exponent"),
            net(m, Cat(bits[:FP32_FRACTION_BITS], normal), f"{name}_mantissa"))


def fp32_multiply(m: Module, a, b, name: str = "fp32_mul") -> Value:
    """float32 bits of a * b for finite float32 ``a``, ``b`` (normal, subnormal or zero): IEEE-754 round to
    nearest even, subnormal results, overflow to a signed infinity, a zero signed by the operands' signs.

    24 x 24 -> 48-bit mantissa product, normalised so its top one is bit 47; the biased exponent of that
    normalised product is ea + eb - bias + 1 - leading zeros. Below the smallest normal the mantissa is
    shifted further right (one bit per step of exponent below 1) before the single rounding.
    Infinite or NaN operands are outside the contract (REQUANT refuses such scales)."""
    sign_a, exponent_a, mantissa_a = _unpack_fp32(m, a, f"{name}_a")
    sign_b, exponent_b, mantissa_b = _unpack_fp32(m, b, f"{name}_b")
    product_width = 2 * FP32_MANTISSA_BITS
    product = net(m, mantissa_a * mantissa_b, f"{name}_product")
    zeros = net(m, leading_zeros(product), f"{name}_zeros")
    normalised = net(m, (product << zeros)[:product_width], f"{name}_normalised")
    exponent = net(m, exponent_a + exponent_b - (FP32_BIAS - 1) - zeros, f"{name}_exponent")  # <= 0: subnormal
    below_normal = net(m, Mux(exponent < 1, 1 - exponent, 0), f"{name}_below_normal")
    # Beyond product_width + 1 every bit is sticky: the same rounding as any larger shift.
    drop = FP32_MANTISSA_BITS + Mux(below_normal > FP32_MANTISSA_BITS + 2, FP32_MANTISSA_BITS + 2, below_normal)
    mantissa = _rounded_mantissa(m, normalised, net(m, _small_unsigned(drop, product_width + 2), f"{name}_drop"),
                                 name)
    sign = sign_a ^ sign_b
    return Mux(product == 0, Cat(Const(0, 31), sign), _pack_fp32(m, sign, exponent, mantissa, name))


def fp32_round_to_int(m: Module, bits, magnitude_bits: int, name: str = "fp32_rint") -> Value:
    """The float32 ``bits`` rounded half to even to a signed integer (numpy.rint), its magnitude saturated at
    2**magnitude_bits (a caller that clamps to a narrower range afterwards loses nothing). Finite inputs."""
    sign, exponent, mantissa = _unpack_fp32(m, bits, name)
    limit = 1 << magnitude_bits
    # value = mantissa * 2**(exponent - bias - 23)
    left = net(m, exponent - (FP32_BIAS + FP32_FRACTION_BITS), f"{name}_left")
    right = (FP32_BIAS + FP32_FRACTION_BITS) - exponent
    # A right shift beyond the mantissa width + 1 rounds to 0 like any larger one.
    right = net(m, _small_unsigned(Mux(right > FP32_MANTISSA_BITS + 1, FP32_MANTISSA_BITS + 1, right),
                                   FP32_MANTISSA_BITS + 1), f"{name}_right")
    fraction_rounded = rounding_shift_right(Cat(mantissa, Const(0, 1)).as_signed(), right, Rounding.HALF_TO_EVEN)
    saturated = left >= magnitude_bits - FP32_FRACTION_BITS         # mantissa >= 2**23 when that large
    whole = Mux(saturated, limit, Mux(left >= 0, (mantissa << _small_unsigned(left, magnitude_bits))[:magnitude_bits + 1],
                                        fraction_rounded))
    magnitude = net(m, whole.as_unsigned()[:magnitude_bits + 1], f"{name}_magnitude")
    return Mux(sign, -magnitude, magnitude)
