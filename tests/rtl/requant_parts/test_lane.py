"""The requantizer lane against golden's requantize_records: both modes, every rounding, leaky, dual planes,
every output type and clamp, on extreme and typical accumulators and records."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from aipu.rtl.requant_parts.lane import Requantizer
from aipu.sim import golden
from aipu.sim.cosim.stimulus.requant import random_accumulators, random_records
from aipu.sim.machine.arch import BYTE_TYPES, DTYPE_NUMPY, DType, DEFAULT, dtype_bounds
from aipu.sim.machine.isa import RequantMode, Rounding
from tests.rtl.simulate import simulate


def _lane(accumulators, records, fields: dict, seconds=None) -> list[int]:
    dut = Requantizer(DEFAULT)
    values = []
    seconds = np.zeros_like(accumulators) if seconds is None else seconds

    async def testbench(ctx):
        for name, value in fields.items():
            ctx.set(getattr(dut, name), value)
        for accumulator, second, record in zip(accumulators, seconds, records):
            ctx.set(dut.accumulator, int(accumulator))
            ctx.set(dut.second, int(second))
            ctx.set(dut.record.as_value(), int.from_bytes(record.tobytes(), "little"))
            values.append(ctx.get(dut.value))

    simulate(dut, testbench)
    return values


def _check(seed: int, mode: RequantMode, rounding: Rounding, leaky: bool, out_type: DType, bounds) -> None:
    rng = np.random.default_rng(seed)
    accumulators, records = random_accumulators(rng, 24), random_records(rng, 24)
    info = np.iinfo(DTYPE_NUMPY[out_type])
    zero_point, qmin, qmax = (int(info.min + (info.max - info.min) * b) for b in bounds)
    qmin, qmax = min(qmin, qmax), max(qmin, qmax)
    stage = golden.requant_stage(float32_scale=mode == RequantMode.FLOAT32, leaky=leaky,
                                 rounding=rounding.name.lower(), out_zero_point=zero_point, qmin=qmin, qmax=qmax,
                                 out_dtype=DTYPE_NUMPY[out_type])
    expected, _ = golden.requantize_records(accumulators[None, :], records, stage)
    got = _lane(accumulators, records, dict(mode=mode, rounding=rounding, leaky=int(leaky),
                                            out_zero_point=zero_point, qmin=qmin, qmax=qmax))
    assert got == expected[0].astype(np.int64).tolist()


def test_every_mode_rounding_and_type():
    for case, (mode, rounding, out_type) in enumerate(
            (mode, rounding, out_type) for mode in RequantMode
            for rounding in Rounding for out_type in BYTE_TYPES):
        _check(case, mode, rounding, mode == RequantMode.NATIVE and case % 2 == 1, out_type, (0.5, 0.0, 1.0))


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), floating=st.booleans(), rounding=st.sampled_from(list(Rounding)),
       leaky=st.booleans(), out_type=st.sampled_from(BYTE_TYPES),
       bounds=st.tuples(*(st.floats(0, 1) for _ in range(3))))
def test_matches_golden(seed, floating, rounding, leaky, out_type, bounds):
    _check(seed, RequantMode.FLOAT32 if floating else RequantMode.NATIVE, rounding, leaky and not floating, out_type,
           bounds)


@pytest.mark.parametrize("rounding", list(Rounding), ids=[r.name for r in Rounding])
@pytest.mark.parametrize("out_type", (DType.INT8, DType.INT4), ids=["INT8", "INT4"])
def test_dual_planes_match_golden(rounding, out_type):
    """dual: the second accumulator times the negative multiplier joins the product before the one shift;
    INT4's values are int8's within -8 .. 7."""
    rng = np.random.default_rng(int(rounding))
    acc, records = random_accumulators(rng, 2 * 24).reshape(1, 24, 2), random_records(rng, 24)
    records["negative_shift"] = 0
    low, high = dtype_bounds(out_type)
    stage = golden.requant_stage(float32_scale=False, rounding=rounding.name.lower(), out_zero_point=low // 2,
                                 qmin=low + 1, qmax=high, dual=True)
    expected, _ = golden.requantize_records(acc, records, stage)
    got = _lane(acc[0, :, 0], records, dict(mode=RequantMode.NATIVE, rounding=rounding, leaky=0, dual=1,
                                            out_zero_point=low // 2, qmin=low + 1, qmax=high), acc[0, :, 1])
    assert got == expected[0].astype(np.int64).tolist()
