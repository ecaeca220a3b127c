"""REQUANT's INT4 outputs and dual planes (docs/arithmetic.md §4.7, §4.8): golden's definition against exact
integer arithmetic, the packing, the faults in the hardware's order, the interpreter against golden and the
cycle formula's two accumulators an output."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.sim import golden
from aipu.sim.cosim.stimulus.requant import random_accumulators, random_records, random_stimulus
from aipu.sim.golden.requant import dual_requant
from aipu.sim.interpreter import ExecutionError, run
from aipu.sim.machine.arch import (ACC_DTYPE, DEFAULT, INT4_MAX, INT4_MIN, PARAM_DTYPE, REQUANT_DUAL_BITS,
                                   Buffer, DType, unpack_int4)
from aipu.sim.machine.isa import Opcode, RequantMode, Rounding, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing.requant import RequantGeometry, command_cycles
from tests.rtl.configs import CONFIGS

ROUNDINGS = [r.name.lower() for r in Rounding]


def exact_shift(x: int, n: int, rounding: str) -> int:
    """round(x / 2**n) in ``rounding``, on Python integers: floor, or the nearest with ties up, away from zero
    or to even."""
    floor, remainder = divmod(x, 1 << n)
    if rounding == "floor" or n == 0:
        return floor
    twice = 2 * remainder
    if twice != 1 << n:
        return floor + (twice > 1 << n)
    return {"half_up": floor + 1, "half_away_from_zero": floor + (x > 0),
            "half_to_even": floor + (floor % 2)}[rounding]


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_dual_definition_is_one_rounding_of_the_exact_sum(rounding):
    rng = np.random.default_rng(7)
    count = 2000
    a1, a2 = random_accumulators(rng, count).astype(np.int64), random_accumulators(rng, count).astype(np.int64)
    bias = rng.integers(-2 ** 31, 2 ** 31, count)
    m, m2 = rng.integers(0, 2 ** 16, count), rng.integers(0, 2 ** 16, count)
    n = rng.integers(0, 48, count)
    edges = np.array([-2 ** 31, 2 ** 31 - 1])       # the widest sum: every term at its extreme
    a1[:2], a2[:2], bias[:2], m[:2], m2[:2], n[:2] = edges, edges, edges, 2 ** 16 - 1, 2 ** 16 - 1, 0
    got = dual_requant(a1 + bias, a2, m, m2, n, rounding)
    sums = [(int(x) + int(b)) * int(p) + int(y) * int(q) for x, b, p, y, q in zip(a1, bias, m, a2, m2)]
    assert max(abs(s) for s in sums) < 2 ** (REQUANT_DUAL_BITS - 1)
    assert got.tolist() == [exact_shift(s, int(k), rounding) for s, k in zip(sums, n)]


def test_dual_is_the_sum_of_two_real_scales():
    """Dual planes q1, q2 with scales s1 = M/2**N, s2 = M2/2**N give round(s1 * (a1 + b) + s2 * a2)."""
    a1, a2 = np.array([100, -37, 5000]), np.array([-20, 41, 7])
    m, m2, n = np.array([3 << 12, 1 << 14, 5 << 10]), np.array([1 << 13, 3 << 13, 1 << 15]), np.array([16, 16, 20])
    real = (a1 + 3) * m / 2.0 ** n + a2 * m2 / 2.0 ** n
    expected = np.sign(real) * np.floor(np.abs(real) + 0.5)
    assert dual_requant(a1 + 3, a2, m, m2, n, "half_away_from_zero").tolist() == expected.tolist()


def _records(channels: int, rng) -> np.ndarray:
    records = random_records(rng, channels)
    records["negative_shift"] = 0
    return records


def test_dual_records_match_the_definition_and_pack_int4():
    rng = np.random.default_rng(3)
    acc = random_accumulators(rng, 5 * 6 * 2).reshape(5, 6, 2)
    records = _records(6, rng)
    stage = golden.requant_stage(float32_scale=False, rounding="half_to_even", out_zero_point=-2, qmin=-7, qmax=6,
                                 dual=True, int4=True)
    packed, saturated = golden.requantize_records(acc, records, stage)
    u = [[exact_shift((int(acc[p, c, 0]) + int(records["bias"][c])) * int(records["multiplier"][c]) +
                      int(acc[p, c, 1]) * int(records["negative_multiplier"][c]), int(records["shift"][c]),
                      "half_to_even") - 2 for c in range(6)] for p in range(5)]
    expected = np.clip(u, -7, 6)
    assert packed.dtype == np.uint8 and packed.shape == (5, 3)
    assert np.array_equal(packed & 0xF, expected[:, 0::2].astype(np.uint8) & 0xF)     # even channel: low nibble
    assert np.array_equal(unpack_int4(packed), expected)
    assert saturated == int(np.count_nonzero(np.array(u) != expected))


def test_int4_outputs_are_the_int8_values_packed():
    rng = np.random.default_rng(4)
    acc, records = random_accumulators(rng, 7 * 4).reshape(7, 4), random_records(rng, 4)
    for float32_scale in (False, True):
        kwargs = dict(float32_scale=float32_scale, out_zero_point=3, qmin=INT4_MIN, qmax=INT4_MAX)
        values, _ = golden.requantize_records(acc, records, golden.requant_stage(**kwargs))
        packed, _ = golden.requantize_records(acc, records, golden.requant_stage(**kwargs, int4=True))
        assert np.array_equal(unpack_int4(packed), values)


@pytest.mark.parametrize("kwargs, message", [
    (dict(float32_scale=True, dual=True), "dual = 1 is not supported with a float32 scale"),
    (dict(float32_scale=False, leaky=True, dual=True), "dual = 1 is not supported with leaky = 1"),
    (dict(float32_scale=False, int4=True, qmin=-9), "qmin"),
    (dict(float32_scale=False, int4=True, qmax=8), "qmax"),
    (dict(float32_scale=False, int4=True, out_zero_point=8), "out_zero_point"),
])
def test_golden_stage_refusals(kwargs, message):
    with pytest.raises(ValueError, match=message):
        golden.requant_stage(**kwargs)


def test_golden_records_refusals():
    rng = np.random.default_rng(5)
    records = _records(3, rng)
    with pytest.raises(ValueError, match="channels = 3 must be even"):
        golden.requantize_records(random_accumulators(rng, 6).reshape(2, 3), records,
                                  golden.requant_stage(float32_scale=False, int4=True))
    records["negative_shift"][1] = 1
    with pytest.raises(ValueError, match=r"negative_shift=1 is outside \[0, 0\]"):
        golden.requantize_records(random_accumulators(rng, 12).reshape(2, 3, 2), records,
                                  golden.requant_stage(float32_scale=False, dual=True))


# --- the interpreter ----------------------------------------------------------------------------------

LEGAL = dict(acc_addr=0, out_addr=0, pixels=2, channels=4, param_index=0, out_type=DType.INT4, out_zero_point=0,
             qmin=-8, qmax=7, mode=RequantMode.NATIVE, rounding=Rounding.HALF_UP, leaky=0, dual=1)


def _run(memory: Memory, **changes):
    program = Program(DEFAULT)
    program.append(Command.make(Opcode.REQUANT, **{**LEGAL, **changes}))
    program.append(Command.make(Opcode.FINISH, unit=Unit.REQUANT))
    return run(program, memory)


def _memory(rng) -> Memory:
    memory = Memory.create(DEFAULT, 64)
    memory.buffers[Buffer.ACC][:] = random_accumulators(rng, DEFAULT.buffer_units(Buffer.ACC)).view(np.uint8)
    memory.buffers[Buffer.PARAM][:] = _records(DEFAULT.buffer_units(Buffer.PARAM), rng).view(np.uint8)
    return memory


@pytest.mark.parametrize("out_type, dual", [(DType.INT4, 1), (DType.INT8, 1), (DType.INT16, 1), (DType.INT4, 0)])
def test_interpreter_runs_golden(out_type, dual):
    """Dual planes of every output type and single INT4 outputs: what golden writes (the compiled run loop,
    which takes neither, leaves them to golden)."""
    rng = np.random.default_rng(6)
    memory = _memory(rng)
    low, high = (-8, 7) if out_type == DType.INT4 else (-100, 100)
    result = _run(memory, acc_addr=3, out_addr=5, pixels=3, channels=6, param_index=9, out_type=out_type, qmin=low,
                  qmax=high, out_zero_point=1, dual=dual)
    planes = (2,) if dual else ()
    acc = memory.buffers[Buffer.ACC].view(ACC_DTYPE)[3:3 + 18 * (1 + dual)].reshape(3, 6, *planes)
    records = memory.buffers[Buffer.PARAM].view(PARAM_DTYPE)[9:15]
    stage = golden.requant_stage(float32_scale=False, out_zero_point=1, qmin=low, qmax=high, dual=bool(dual),
                                 int4=out_type == DType.INT4,
                                 out_dtype=np.int16 if out_type == DType.INT16 else np.int8)
    expected, _ = golden.requantize_records(acc, records, stage)
    written = result.memory.buffers[Buffer.OUT][5:5 + expected.nbytes]
    assert np.array_equal(written, expected.view(np.uint8).ravel())
    assert not result.memory.buffers[Buffer.OUT][5 + expected.nbytes:].any()


# Two refusals at once: the first in the hardware's order is named.
FAULTS = [
    (dict(acc_addr=DEFAULT.buffer_units(Buffer.ACC) - 15, mode=RequantMode.FLOAT32), "acc_addr"),   # 16 entries
    (dict(mode=RequantMode.FLOAT32, leaky=1), "leaky"),
    (dict(mode=RequantMode.FLOAT32, channels=3), "dual"),
    (dict(leaky=1, channels=3), "dual"),
    (dict(dual=0, channels=3, out_addr=DEFAULT.buffer_units(Buffer.OUT) - 1), "channels"),
    (dict(out_addr=DEFAULT.buffer_units(Buffer.OUT) - 3, qmin=-9), "out_addr"),
    (dict(qmin=-9, out_zero_point=8), "qmin"),
    (dict(dual=0, mode=RequantMode.FLOAT32, out_zero_point=8), "out_zero_point"),
]


@pytest.mark.parametrize("changes, field", FAULTS)
def test_interpreter_faults_in_hardware_order(changes, field):
    with pytest.raises(ExecutionError, match=field):
        _run(_memory(np.random.default_rng(8)), **changes)


def test_interpreter_refuses_a_negative_shift_in_dual():
    memory = _memory(np.random.default_rng(9))
    memory.buffers[Buffer.PARAM].view(PARAM_DTYPE)["negative_shift"][2] = 3
    with pytest.raises(ExecutionError, match="negative_shift=3"):
        _run(memory)
    _run(memory, dual=0)        # without dual, the negative shift is not read


@pytest.mark.parametrize("kind", ["int4", "dual", "mixed"])
def test_random_programs_run(kind):
    for name, config in CONFIGS.items():
        stimulus = random_stimulus(config, np.random.default_rng(10), commands=40, kind=kind)
        assert stimulus.commands >= 20, name
        run(stimulus.program, stimulus.memory)


def test_dual_takes_a_group_for_every_lanes_accumulators():
    for config in CONFIGS.values():
        lanes = RequantGeometry.of(config).lanes
        single = Command.make(Opcode.REQUANT, **{**LEGAL, "dual": 0, "pixels": 16, "channels": 8})
        dual = Command.make(Opcode.REQUANT, **{**LEGAL, "pixels": 16, "channels": 8})
        assert command_cycles(config, dual) - command_cycles(config, single) == 16 * 8 // lanes


def test_w4a4_layers_chain_through_dram():
    """A dual REQUANT's INT4 outputs, stored and loaded again as bytes, are the INT4 inputs of the next CONV:
    its sums are those of the unpacked values (a 1x1 kernel of ones sums a pixel's channels)."""
    rng = np.random.default_rng(11)
    pixels, channels = 4, 6
    memory = _memory(rng)
    out_bytes = pixels * channels // 2
    memory.buffers[Buffer.WEIGHT][:channels // 2] = 0x11           # INT4 weights, all 1
    program = Program(DEFAULT)
    run_bytes = dict(elem_type=DType.UINT8, run=out_bytes, dram_y_stride=out_bytes, dram_x_stride=out_bytes)
    for command in (
            Command.make(Opcode.REQUANT, **{**LEGAL, "pixels": pixels, "channels": channels}, push=[Unit.STORE]),
            Command.make(Opcode.STORE, pop=[Unit.REQUANT], push=[Unit.LOAD], **run_bytes),
            Command.make(Opcode.LOAD, pop=[Unit.STORE], push=[Unit.CONV], buffer=Buffer.ACT, **run_bytes),
            Command.make(Opcode.CONV, pop=[Unit.LOAD], in_h=1, in_w=pixels, in_c=channels, in_type=DType.INT4,
                         w_type=DType.INT4, out_c=1, k_h=1, k_w=1, acc_addr=1000)):
        program.append(command)
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    result = run(program, memory)
    values = unpack_int4(result.memory.buffers[Buffer.OUT][:out_bytes]).reshape(pixels, channels)
    assert np.array_equal(unpack_int4(result.memory.buffers[Buffer.ACT][:out_bytes]).reshape(pixels, channels),
                          values)
    sums = result.memory.buffers[Buffer.ACC].view(ACC_DTYPE)[1000:1000 + pixels]
    assert sums.tolist() == values.astype(np.int64).sum(axis=1).tolist()
    assert np.ptp(values) > 0                  # the values are not all one clamp bound


def test_layer_level_dual_is_the_command():
    """golden.requantize_dual over a layer's [N, C, H, W] planes equals REQUANT's dual records pixel by pixel."""
    rng = np.random.default_rng(11)
    a1, a2 = (random_accumulators(rng, 2 * 6 * 3 * 4).reshape(2, 6, 3, 4) for _ in range(2))
    records = random_records(rng, 6)
    records["negative_shift"] = 0
    layer = golden.requantize_dual(a1, a2, bias=records["bias"], multiplier=records["multiplier"],
                                   second_multiplier=records["negative_multiplier"], shift=records["shift"],
                                   out_zero_point=3, qmin=-100, qmax=90, rounding="half_to_even")
    pixels = np.stack([a1, a2], -1).transpose(0, 2, 3, 1, 4).reshape(-1, 6, 2)
    stage = golden.requant_stage(float32_scale=False, rounding="half_to_even", out_zero_point=3, qmin=-100, qmax=90,
                                 dual=True)
    command, _ = golden.requantize_records(pixels, records, stage)
    assert np.array_equal(layer.transpose(0, 2, 3, 1).reshape(-1, 6), command)
