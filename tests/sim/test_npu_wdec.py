"""The NPU cycle model's WDEC (sim/timing/npu_wdec.py) steps lazily, whole stretches in numba: driven one cycle
at a time or from request to request it is granted and retires in the same cycles, and alone on the bridge it
takes WDEC's formula (tests/sim/test_cycle_npu.py holds it to the RTL)."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.codec.reference.geometry import CTU_SIZES
from aipu.sim.cosim.stimulus.wdec import layer_stream
from aipu.sim.machine.arch import DEFAULT, hardware_config_from_dict
from aipu.sim.machine.isa import Opcode
from aipu.sim.machine.program import Command
from aipu.sim.timing import wdec
from aipu.sim.timing.npu_wdec import NEVER, WdecStream

START = 7
CONFIGS = {"default": DEFAULT, "narrow": hardware_config_from_dict({"dram": {"bytes_per_cycle": 8, "latency_cycles": 5}})}


def _command(seed: int) -> tuple[Command, bytes]:
    """A layer of ten to forty thousand weights (a stream of hundreds of DRAM words) at an odd DRAM address."""
    rng = np.random.default_rng(seed)
    shape = (int(rng.integers(40, 70)), int(rng.integers(30, 70)), 3, 3)
    levels = np.where(rng.random(shape) < 0.3, 0, np.clip(np.round(rng.laplace(0, 8, shape)), -128, 127))
    stream = layer_stream(levels.astype(np.int8), int(rng.choice(CTU_SIZES)))
    out_c, in_c, k_h, k_w = shape
    return Command.make(Opcode.WDEC, dram_addr=int(rng.integers(0, 40)), length=len(stream), wgt_addr=0,
                        out_c=out_c, in_c=in_c, k_h=k_h, k_w=k_w), stream


def _refused(cycle: int) -> bool:
    """Whether another reader takes the grant in ``cycle`` (about 40 % of the cycles, in no simple pattern)."""
    return (cycle * 2654435761) % 97 < 40


def _each_cycle(stream: WdecStream) -> tuple[list[int], int]:
    grants, cycle = [], START
    while not stream.requested:
        granted = stream.requesting(cycle) and not _refused(cycle)
        stream.step(cycle, granted)
        grants += [cycle] * granted
        cycle += 1
    return grants, stream.finish()


def _request_to_request(stream: WdecStream) -> tuple[list[int], int]:
    grants, cycle = [], START
    while not stream.requested:
        cycle = stream.next_request(cycle)
        assert stream.requesting(cycle)
        granted = not _refused(cycle)
        stream.step(cycle, granted)
        grants += [cycle] * granted
        cycle += 1
    return grants, stream.finish()


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS)
@pytest.mark.parametrize("seed", range(4))
def test_lazy_stepping_grants_and_retires_as_stepping_each_cycle(config, seed):
    command, stream = _command(seed)
    each = _each_cycle(WdecStream(config, command, stream, START))
    assert len(each[0]) > 2 * (config.dram.latency_cycles + 4)       # the FIFO filled, then refilled as it drained
    assert _request_to_request(WdecStream(config, command, stream, START)) == each


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS)
@pytest.mark.parametrize("seed", range(4))
def test_alone_on_the_bridge_wdec_takes_its_formula(config, seed):
    command, stream = _command(seed)
    alone = WdecStream(config, command, stream, START)
    assert alone.alone(NEVER) and alone.requested
    assert alone.finish() - START == wdec.command_cycles(config, command, stream)
