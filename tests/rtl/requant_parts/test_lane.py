"""The requantizer lane against golden's requantize_records: both modes, every rounding, leaky, every output
type and clamp, on extreme and typical accumulators and records."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from aipu.rtl.requant_parts.lane import Requantizer
from aipu.sim import golden
from aipu.sim.cosim.stimulus.requant import random_accumulators, random_records
from aipu.sim.machine.arch import BYTE_TYPES, DTYPE_NUMPY, DType, DEFAULT
from aipu.sim.machine.isa import RequantMode, Rounding
from tests.rtl.simulate import simulate


def _lane(accumulators, records, fields: dict) -> list[int]:
    dut = Requantizer(DEFAULT)
    values = []

    async def testbench(ctx):
        for name, value in fields.items():
            ctx.set(getattr(dut, name), value)
        for accumulator, record in zip(accumulators, records):
            ctx.set(dut.accumulator, int(accumulator))
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
