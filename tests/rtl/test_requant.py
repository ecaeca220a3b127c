"""REQUANT in RTL: the shared arithmetic of rtl/arith.py against the golden model and numpy, and the unit
against the interpreter byte for byte and cycle for cycle (docs/rtl-requant.md)."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.back import verilog
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.sim import Simulator

from aipu.rtl import arith
from aipu.rtl.requant import RequantUnit
from aipu.sim import interpreter
from aipu.sim.cosim.amaranth_run import run_amaranth
from aipu.sim.cosim.result import RtlError, first_difference
from aipu.sim.cosim.stimulus import Stimulus
from aipu.sim.cosim.stimulus.requant import random_accumulators, random_records, random_stimulus
from aipu.sim.golden.rounding import rounding_shift_right
from aipu.sim.machine.arch import (PARAM_DTYPE, REQUANT_PRODUCT_BITS, SHIFT_BITS, SHIFT_MAX, Buffer, DType,
                                   DEFAULT)
from aipu.sim.machine.isa import Opcode, RequantMode, Rounding, Unit
from aipu.sim.interpreter import ExecutionError
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from tests.rtl.checks import assert_matches
from tests.rtl.configs import EVERY_CONFIG, NON_SQUARE, SMALL

RNG_SEED = 2026


def evaluate(build, shapes, rows) -> list[int]:
    """build(m, *inputs) for every row of input values, in Amaranth's simulator (outputs as Python ints)."""
    inputs = [Signal(shape) for shape in shapes]
    m = Module()
    expression = build(m, *inputs)
    output = Signal(expression.shape())
    m.d.comb += output.eq(expression)
    results = []

    async def testbench(ctx):
        for row in rows:
            for signal, value in zip(inputs, row):
                ctx.set(signal, int(value))
            results.append(ctx.get(output))

    sim = Simulator(m)
    sim.add_testbench(testbench)
    sim.run()
    return results


def _edge_and_random(rng, bits: int, count: int) -> np.ndarray:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    edges = [low, low + 1, -1, 0, 1, high - 1, high]
    return np.concatenate([edges, rng.integers(low, high, count, endpoint=True, dtype=np.int64)])


@pytest.mark.parametrize("rounding", list(Rounding), ids=[r.name for r in Rounding])
def test_rounding_shift_right_matches_golden(rounding):
    rng = np.random.default_rng(RNG_SEED + rounding)
    values = _edge_and_random(rng, REQUANT_PRODUCT_BITS, 300)
    shifts = rng.integers(0, SHIFT_MAX, values.size, endpoint=True)
    # Exact ties and one either side of them: the cases that tell the modes apart.
    tie_shifts = rng.integers(1, SHIFT_MAX, 60, endpoint=True)
    room = np.int64(1) << (REQUANT_PRODUCT_BITS - 2 - tie_shifts)   # keeps every tie inside the product width
    tie_values = (rng.integers(-room, room) << tie_shifts) + (np.int64(1) << (tie_shifts - 1))
    tie_values = np.concatenate([tie_values + delta for delta in (-1, 0, 1)])
    values = np.concatenate([values, tie_values])
    shifts = np.concatenate([shifts, np.tile(tie_shifts, 3)])
    got = evaluate(lambda m, v, n: arith.rounding_shift_right(v, n, rounding),
                   [signed(REQUANT_PRODUCT_BITS), unsigned(SHIFT_BITS)], zip(values, shifts))
    expected = rounding_shift_right(values.astype(np.int64), shifts, rounding.name.lower())
    assert got == expected.tolist()


def test_rounding_shift_right_takes_the_mode_as_a_signal():
    rows = [(v, 1, mode) for v in (-3, -1, 1, 3) for mode in Rounding]
    got = evaluate(lambda m, v, n, mode: arith.rounding_shift_right(v, n, mode), [signed(4), unsigned(2), unsigned(2)], rows)
    expected = [int(rounding_shift_right(np.int64(v), n, Rounding(mode).name.lower())) for v, n, mode in rows]
    assert got == expected


def test_clamp():
    rows = [(v, lo, hi) for v in range(-5, 6) for lo, hi in ((-2, 3), (0, 0), (-5, -5))]
    got = evaluate(lambda m, v, lo, hi: arith.clamp(v, lo, hi), [signed(5), signed(5), signed(5)], rows)
    assert got == [min(max(v, lo), hi) for v, lo, hi in rows]


def test_leading_zeros():
    rows = [(0,)] + [(1 << bit,) for bit in range(12)] + [((1 << bit) | 1,) for bit in range(12)]
    got = evaluate(lambda m, v: arith.leading_zeros(v), [unsigned(12)], rows)
    assert got == [12] + [11 - bit for bit in range(12)] * 2


def _f32(bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def _bits(values: np.ndarray) -> list[int]:
    return np.asarray(values, dtype=np.float32).view(np.uint32).tolist()


def _finite_fp32_bits(rng, count: int) -> np.ndarray:
    """Random finite float32 patterns weighted towards the hard ones: subnormals, zeros, extreme exponents."""
    signs = rng.integers(0, 2, count, dtype=np.uint32) << 31
    fractions = rng.integers(0, 1 << 23, count, dtype=np.uint32)
    exponents = rng.choice(np.array([0, 0, 1, 2, 100, 127, 150, 200, 253, 254], dtype=np.uint32), count)
    exponents = np.where(rng.random(count) < 0.5, rng.integers(0, 255, count, dtype=np.uint32), exponents)
    fractions = np.where(rng.random(count) < 0.1, 0, fractions)
    return signs | (exponents << 23) | fractions


def _fp32_multiply_cases(rng) -> tuple[np.ndarray, np.ndarray]:
    a, b = _finite_fp32_bits(rng, 1500), _finite_fp32_bits(rng, 1500)
    # Products on a rounding tie: a = 1 + 2**-23 * k, b = 1 + 2**-1 etc. give exact halves of the last place.
    tie_a = _bits(np.float32(1) + np.float32(2.0 ** -23) * rng.integers(1, 1 << 10, 100).astype(np.float32))
    tie_b = _bits(np.full(100, 1.5, dtype=np.float32))
    # Results near the subnormal and overflow boundaries.
    tiny = _bits(np.float32(2.0 ** -75) * (1 + rng.random(100)).astype(np.float32))
    huge = _bits(np.float32(2.0 ** 64) * (1 + rng.random(100)).astype(np.float32))
    a = np.concatenate([a, tie_a, tiny, huge, [0x00000001, 0x007FFFFF, 0x7F7FFFFF, 0x3F800000, 0x80000000]])
    b = np.concatenate([b, tie_b, tiny, huge, [0x3F000000, 0x3F800001, 0x3F800001, 0x00000001, 0x3F800000]])
    return a.astype(np.uint32), b.astype(np.uint32)


def test_fp32_multiply_matches_numpy():
    a, b = _fp32_multiply_cases(np.random.default_rng(RNG_SEED))
    got = evaluate(arith.fp32_multiply, [unsigned(32), unsigned(32)], zip(a, b))
    with np.errstate(over="ignore", under="ignore"):
        expected = _bits(_f32(a) * _f32(b))
    mismatches = [(hex(x), hex(y), hex(g), hex(e)) for x, y, g, e in zip(a, b, got, expected) if g != e]
    assert not mismatches, mismatches[:5]


def test_int_to_fp32_matches_numpy():
    rng = np.random.default_rng(RNG_SEED)
    bits = REQUANT_PRODUCT_BITS - 16      # the REQUANT sum width
    values = _edge_and_random(rng, bits, 500)
    # Integers on float32 rounding ties: odd multiples of 2**(k - 1) above 2**24 * 2**(k - 1).
    ties = ((rng.integers(1 << 23, 1 << 24, 100) * 2 + 1) << rng.integers(0, 8, 100))
    values = np.concatenate([values, ties, -ties])
    got = evaluate(arith.int_to_fp32, [signed(bits)], ((v,) for v in values))
    assert got == _bits(values.astype(np.int64).astype(np.float32))


def test_fp32_round_to_int_matches_rint():
    rng = np.random.default_rng(RNG_SEED)
    magnitude_bits = 17
    bits = _finite_fp32_bits(rng, 800)
    halves = _bits(rng.integers(-(1 << 18), 1 << 18, 200) + np.float32(0.5))
    bits = np.concatenate([bits, halves]).astype(np.uint32)
    got = evaluate(lambda m, x: arith.fp32_round_to_int(m, x, magnitude_bits), [unsigned(32)], ((b,) for b in bits))
    limit = 2.0 ** magnitude_bits
    expected = np.rint(np.clip(_f32(bits).astype(np.float64), -limit, limit)).astype(np.int64)
    assert got == expected.tolist()


# --- the unit against the interpreter ------------------------------------------------------------------

def compare_with_interpreter(stimulus: Stimulus) -> int:
    """Run on the interpreter and the RTL; assert equal buffers and per-command cycles. Returns the command count."""
    assert_matches(stimulus)
    return stimulus.commands


def mixed_stimulus(config) -> Stimulus:
    """The default suite's random REQUANTs (tests/rtl/test_mutants.py runs its mutants on them too)."""
    return random_stimulus(config, np.random.default_rng(RNG_SEED), commands=12, max_elements=40)


@EVERY_CONFIG
def test_random_requants_match_the_interpreter(config):
    assert compare_with_interpreter(mixed_stimulus(config)) >= 8


@pytest.mark.parametrize("config", [SMALL, NON_SQUARE], ids=["small", "mac8x16"])
def test_many_requants_on_long_tiles(config):
    """Tiles long enough for the lanes' steady state, and records loaded in several reads (SMALL's 4-byte port)."""
    rng = np.random.default_rng(RNG_SEED + 1)
    assert compare_with_interpreter(random_stimulus(config, rng, commands=20, max_elements=200)) >= 4


NEW_KINDS = pytest.mark.parametrize("kind", ["int4", "dual"])


def kind_stimulus(config, kind: str) -> Stimulus:
    """The default suite's random REQUANTs of ``kind``: INT4 outputs (every mode) or dual planes (every output
    type, INT4 among them), unaligned."""
    return random_stimulus(config, np.random.default_rng(RNG_SEED + 2), commands=12, max_elements=40, kind=kind)


def dual_stimulus(config) -> Stimulus:
    """The default suite's random dual REQUANTs (tests/rtl/test_mutants.py runs its dual mutants on them)."""
    return kind_stimulus(config, "dual")


@EVERY_CONFIG
@NEW_KINDS
def test_int4_and_dual_requants_match_the_interpreter(config, kind):
    assert compare_with_interpreter(kind_stimulus(config, kind)) >= 8


def _compare_at_length(config, commands: int, kind: str, seed: int) -> int:
    """At least ``commands`` random REQUANTs of ``kind``, in as many programs as OUT needs; returns the count."""
    compared, program = 0, 0
    while compared < commands:
        rng = np.random.default_rng(seed + program)
        compared += compare_with_interpreter(random_stimulus(config, rng, commands=commands - compared,
                                                             max_elements=24, kind=kind))
        program += 1
    return compared


@pytest.mark.slow
@EVERY_CONFIG
def test_random_requants_at_length(config):
    """At least 1000 random REQUANT commands: 400 per configuration, in as many programs as OUT needs."""
    _compare_at_length(config, 400, "plain", RNG_SEED + 100)


@pytest.mark.slow
@EVERY_CONFIG
@NEW_KINDS
def test_int4_and_dual_requants_at_length(config, kind):
    """1000 random REQUANTs of each new kind per configuration."""
    assert _compare_at_length(config, 1000, kind, RNG_SEED + 1000) >= 1000


# --- faults: every refusal of the interpreter, named, before anything is written ----------------------

LEGAL = dict(acc_addr=0, out_addr=0, pixels=2, channels=3, param_index=0, out_type=DType.INT8, out_zero_point=0,
             qmin=-128, qmax=127, mode=RequantMode.NATIVE, rounding=Rounding.HALF_UP, leaky=0, dual=0)
FAULTY_PARAM_INDEX = 4      # the faulting command's records: 4, 5, 6
FAULTY_OUT_ADDR = 32


def _record_change(field: str, value):
    def change(records):
        records[FAULTY_PARAM_INDEX + 1][field] = value
    return change


FAULTS = {   # id: (command changes, record change, expected name)
    "acc_beyond": (dict(acc_addr=SMALL.buffer_units(Buffer.ACC) - 5), None, "acc_addr"),
    "param_beyond": (dict(param_index=SMALL.buffer_units(Buffer.PARAM) - 2), None, "param_index"),
    "reserved_bits": ({}, _record_change("reserved", 1), "param_reserved"),
    "reserved_before_out": (dict(out_addr=SMALL.buffer_units(Buffer.OUT) - 2), _record_change("reserved", 4),
                            "param_reserved"),
    "leaky_float": (dict(mode=RequantMode.FLOAT32, leaky=1), None, "leaky"),
    "shift": ({}, _record_change("shift", SHIFT_MAX + 1), "param_shift"),
    "negative_shift": (dict(leaky=1), _record_change("negative_shift", 63), "param_negative_shift"),
    "scale_zero": (dict(mode=RequantMode.FLOAT32), _record_change("scale", 0.0), "param_scale"),
    "scale_negative": (dict(mode=RequantMode.FLOAT32), _record_change("scale", -0.5), "param_scale"),
    "scale_infinite": (dict(mode=RequantMode.FLOAT32), _record_change("scale", np.inf), "param_scale"),
    "scale_nan": (dict(mode=RequantMode.FLOAT32), _record_change("scale", np.nan), "param_scale"),
    "qmin_type": (dict(qmin=-129), None, "qmin"),
    "qmax_type": (dict(out_type=DType.UINT8, qmin=0, qmax=256), None, "qmax"),
    "qmin_above_qmax": (dict(qmin=5, qmax=4), None, "qmin"),
    "zero_point_type": (dict(out_type=DType.UINT8, qmin=0, qmax=255, out_zero_point=-1), None, "out_zero_point"),
    "native_clamp_before_zero_point": (dict(qmin=-200, out_zero_point=300), None, "qmin"),
    "float_zero_point_before_clamp": (dict(mode=RequantMode.FLOAT32, qmin=-200, out_zero_point=300), None,
                                      "out_zero_point"),
    "out_beyond": (dict(out_addr=SMALL.buffer_units(Buffer.OUT) - 5), None, "out_addr"),
    "dual_acc_beyond": (dict(dual=1, acc_addr=SMALL.buffer_units(Buffer.ACC) - 11), None, "acc_addr"),
    "dual_float": (dict(dual=1, mode=RequantMode.FLOAT32), None, "dual"),
    "dual_leaky": (dict(dual=1, leaky=1), None, "dual"),
    "dual_negative_shift": (dict(dual=1), _record_change("negative_shift", 1), "param_negative_shift"),
    "int4_odd_channels": (dict(out_type=DType.INT4, qmin=-8, qmax=7), None, "channels"),
    "int4_channels_before_clamp": (dict(out_type=DType.INT4, qmin=-9, qmax=7), None, "channels"),
    "int4_qmax": (dict(out_type=DType.INT4, channels=4, qmin=-8, qmax=8), None, "qmax"),
    "int4_zero_point": (dict(out_type=DType.INT4, channels=4, qmin=-8, qmax=7, out_zero_point=-9), None,
                        "out_zero_point"),
    "int4_out_beyond": (dict(out_type=DType.INT4, channels=4, qmin=-8, qmax=7,
                             out_addr=SMALL.buffer_units(Buffer.OUT) - 3), None, "out_addr"),
}


@pytest.mark.parametrize("case", list(FAULTS))
def test_faults_are_named_before_writing(case):
    changes, record_change, name = FAULTS[case]
    config = SMALL
    rng = np.random.default_rng(RNG_SEED)
    memory = Memory.create(config, 64)
    memory.buffers[Buffer.ACC][:] = random_accumulators(rng, config.buffer_units(Buffer.ACC)).view(np.uint8)
    records = random_records(rng, config.buffer_units(Buffer.PARAM))
    records["negative_shift"] = 0           # what dual reads: only a record change refuses it
    if record_change:
        record_change(records)
    memory.buffers[Buffer.PARAM][:] = records.view(np.uint8)
    legal = Command.make(Opcode.REQUANT, **LEGAL)
    faulty = Command.make(Opcode.REQUANT, **{**LEGAL, "param_index": FAULTY_PARAM_INDEX,
                                             "out_addr": FAULTY_OUT_ADDR, **changes})
    programs = []
    for commands in ([legal, faulty], [legal]):
        program = Program(config)
        for command in commands + [Command.make(Opcode.FINISH, unit=Unit.REQUANT)]:
            program.append(command)
        programs.append(program)
    with pytest.raises(ExecutionError):
        interpreter.run(programs[0], memory)
    expected = interpreter.run(programs[1], memory).memory      # the legal command's bytes, nothing more
    result = run_amaranth(programs[0], memory, [RequantUnit], max_cycles=400)
    assert result.errors == [RtlError(Unit.REQUANT, 1, name)]
    assert first_difference(expected, result.memory) is None


def test_negative_shift_is_free_without_leaky():
    """golden checks the negative side only when it is used: a record with an illegal negative_shift runs."""
    rng = np.random.default_rng(RNG_SEED)
    drawn = random_stimulus(rng=rng, config=SMALL, commands=3, max_elements=12)
    memory = drawn.memory
    memory.buffers[Buffer.PARAM].view(PARAM_DTYPE)["negative_shift"] = SHIFT_MAX + 1
    program = Program(SMALL)
    for command in drawn.program.queues[Unit.REQUANT]:
        program.append(Command.make(command.opcode, **{**command.args, "leaky": 0})
                       if command.opcode == Opcode.REQUANT else command)
    assert compare_with_interpreter(Stimulus(program, memory, (RequantUnit,))) == 3


def test_converts_to_verilog():
    assert "module requant" in verilog.convert(RequantUnit(DEFAULT), name="requant")
