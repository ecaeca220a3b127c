"""Moving bytes and words between lanes: shifters by a variable number of units, built in log2 stages.

A variable ``value >> amount`` or ``word_select`` is one cell whose every output bit depends on every input
bit: a few thousand bits wide (a WEIGHT port window, an ACC write-back window) that is millions of edges, and
Amaranth's combinational-loop check walks each of them, so a unit took longer than ten minutes to convert.
These shifters are what a synthesis tool would build anyway: one 2:1 multiplexer stage per bit of the amount,
each kept only as wide as the output still needs, so the hardware is smaller and every output bit depends on
three nets per stage.
"""
from __future__ import annotations

from amaranth.hdl import C, Cat, Module, Mux, Signal, Value

from aipu.rtl.arith import net


def _units(value: Value, unit_bits: int, count: int) -> Value:
    """The first ``count`` units of ``value``, zero-extended when it is shorter."""
    bits = count * unit_bits
    value = Value.cast(value)
    return value[:bits] if len(value) >= bits else Cat(value, C(0, bits - len(value)))


def _split_amount(m: Module, name: str, amount, reach: int):
    """``amount`` as (the bits that can move something within ``reach`` units, whether it is beyond them).
    The amount is a named net: every stage slices it, and a slice of an expression repeats the expression."""
    amount = net(m, amount, f"{name}_amount")
    useful = (reach - 1).bit_length()        # 2**useful >= reach: any higher bit moves everything out
    beyond = amount[useful:].any() if len(amount) > useful else C(0, 1)
    return amount[:useful], beyond


def shift_down(m: Module, name: str, value, amount, unit_bits: int, out_units: int) -> Value:
    """``(value >> amount * unit_bits)[:out_units * unit_bits]``; units beyond ``value`` read as zero.

    Each stage is a named signal (``<name>_<k>``): used twice by the next stage, an unnamed expression would
    be walked twice, and so on down, exponentially."""
    value = Value.cast(value)
    value_units = -(-len(value) // unit_bits)
    amount, beyond = _split_amount(m, name, amount, value_units)
    stage = net(m, value, f"{name}_in")
    for k in reversed(range(len(amount))):
        step = (1 << k) * unit_bits
        keep = min(out_units + (1 << k) - 1, value_units)     # the units the smaller stages can still reach
        moved = stage[step:] if step < len(stage) else C(0, 1)
        stage = net(m, _units(Mux(amount[k], moved, stage), unit_bits, keep), f"{name}_{k}")
    return Mux(beyond, 0, _units(stage, unit_bits, out_units))


def shift_up(m: Module, name: str, value, amount, unit_bits: int, out_units: int) -> Value:
    """``(value << amount * unit_bits)[:out_units * unit_bits]``. Stage k (a move by 2**k units) is only as wide as
    what the moves so far can reach, ``value`` plus 2**(k+1) - 1 units: a DRAM beat placed into a WEIGHT window
    takes a quarter of the multiplexers of stages all as wide as the window."""
    value = Value.cast(value)
    amount, beyond = _split_amount(m, name, amount, out_units)
    width = min(-(-len(value) // unit_bits), out_units)
    stage = net(m, _units(value, unit_bits, width), f"{name}_in")
    for k in range(len(amount)):
        width = min(width + (1 << k), out_units)
        moved = _units(Cat(C(0, (1 << k) * unit_bits), stage), unit_bits, width)
        stage = net(m, Mux(amount[k], moved, _units(stage, unit_bits, width)), f"{name}_{k}")
    return Mux(beyond, 0, _units(stage, unit_bits, out_units))


def counter(limit: int, **kwargs) -> Signal:
    """A count of 0 .. ``limit`` - 1, one bit wide at least: a count of one value would be a zero-width net,
    which Verilog writes as ``[-1:0]``."""
    return Signal(range(max(limit, 2)), **kwargs)


def select_word(m: Module, name: str, value, index, width: int) -> Value:
    """Word ``index`` of ``value`` (``width`` bits; zero beyond its end)."""
    return shift_down(m, name, value, index, width, 1)


def byte_mask(m: Module, name: str, low, high, nbytes: int) -> Value:
    """``nbytes`` mask bits, bit i set for low <= i < high: a named net, since callers slice it bit by bit
    (a slice of an expression repeats the whole expression)."""
    low, high = net(m, low, f"{name}_low"), net(m, high, f"{name}_high")
    return net(m, Cat(*(_at_most(low, i) & ~_at_most(high, i) for i in range(nbytes))), name)


def _at_most(value: Value, bound: int) -> Value:
    """``value <= bound``, or the constant 1 where ``value``'s width cannot exceed ``bound`` (a comparison that a
    linter flags as constant)."""
    return C(1, 1) if bound >= (1 << len(value)) - 1 else value <= bound


def bytes_to_bits(mask) -> Value:
    """Each mask bit repeated for the 8 bits of its byte."""
    return Cat(*(bit.replicate(8) for bit in mask))
