"""DWCONV in the interpreter: for random legal commands over random buffers, the accumulators are golden's
depthwise conv2d of the operands read where docs/isa.md puts them (input by column phase in WEIGHT, kernel
tap-major in ACT); an illegal command faults naming its field, before anything is written."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.sim import golden
from aipu.sim.cosim.stimulus.conv import random_dwconv, random_memory
from aipu.sim.interpreter import ExecutionError, run
from aipu.sim.machine.arch import ACC_DTYPE, DTYPE_NUMPY, Buffer, DType
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing.conv import conv_output_size
from tests.rtl.configs import EVERY_CONFIG, SMALL


def _program(config, *commands: Command) -> Program:
    program = Program(config)
    for command in commands:
        program.append(command)
    program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
    return program


def _expected_accumulators(memory: Memory, command: Command) -> tuple[slice, np.ndarray]:
    """The ACC entries the command writes and their values, from the ISA's definition read independently."""
    c = command.args
    channels, row_phases, column_phases = c["channels"], c["stride_h"], c["stride_w"]
    plane_h, plane_w = -(-c["in_h"] // row_phases), -(-c["in_w"] // column_phases)
    dtype = DTYPE_NUMPY[DType(c["in_type"])]
    stored = memory.buffers[Buffer.WEIGHT][c["in_addr"]:]
    x = np.empty((channels, c["in_h"], c["in_w"]), dtype)
    for y in range(c["in_h"]):
        for column in range(c["in_w"]):
            plane = (y % row_phases) * column_phases + column % column_phases
            start = ((plane * plane_h + y // row_phases) * plane_w + column // column_phases) * channels
            x[:, y, column] = stored[start:start + channels].view(dtype)
    taps = memory.buffers[Buffer.ACT][c["wgt_addr"]:c["wgt_addr"] + c["k_h"] * c["k_w"] * channels].view(np.int8)
    w = taps.reshape(c["k_h"], c["k_w"], channels).transpose(2, 0, 1)[:, None]
    sums = golden.conv2d(x[None], np.ascontiguousarray(w), x_zero_point=c["in_zero_point"],
                         w_zero_point=c["w_zero_point"], stride=(c["stride_h"], c["stride_w"]),
                         dilation=(c["dilation_h"], c["dilation_w"]), groups=channels, wide=True)
    result = sums[0].transpose(1, 2, 0).astype(np.int64).ravel()      # [out_h][out_w][channels]
    entries = slice(c["acc_addr"], c["acc_addr"] + result.size)
    if c["accumulate"]:
        result = result + memory.buffers[Buffer.ACC].view(ACC_DTYPE)[entries]
    return entries, result.astype(ACC_DTYPE)          # the register keeps the low 32 bits (docs/arithmetic.md D6)


@EVERY_CONFIG
def test_random_dwconvs_equal_golden_depthwise_convolutions(config):
    rng = np.random.default_rng(config.mac.rows * 100 + config.mac.cols)
    strides = set()
    for _ in range(40):
        command, memory = random_dwconv(config, rng), random_memory(config, rng)
        entries, expected = _expected_accumulators(memory, command)
        got = run(_program(config, command), memory).memory.buffers[Buffer.ACC].view(ACC_DTYPE)
        assert np.array_equal(got[entries], expected), command
        others = np.ones(got.size, bool)
        others[entries] = False
        assert np.array_equal(got[others], memory.buffers[Buffer.ACC].view(ACC_DTYPE)[others]), command
        strides.add(command.stride_w)
    assert strides == {1, 2, 3}


def _dwconv(**fields) -> Command:
    base = dict(in_addr=0, in_h=3, in_w=3, channels=4, in_type=DType.INT8, in_zero_point=0, wgt_addr=0,
                w_zero_point=0, k_h=3, k_w=3, stride_h=1, stride_w=1, dilation_h=1, dilation_w=1, acc_addr=0,
                accumulate=0)
    return Command.make(Opcode.DWCONV, **{**base, **fields})


WEIGHT_BYTES, ACT_BYTES, ACC_ENTRIES = (SMALL.buffer_units(b) for b in (Buffer.WEIGHT, Buffer.ACT, Buffer.ACC))
FAULTS = {   # field named -> a command of SMALL (a 4x4 array) refused for it
    "channels": _dwconv(channels=5),
    "in_addr": _dwconv(in_addr=WEIGHT_BYTES - 35),
    "wgt_addr": _dwconv(wgt_addr=ACT_BYTES - 35),
    "k_h": _dwconv(in_h=4, dilation_h=2),
    "k_w": _dwconv(in_w=2),
    "in_zero_point": _dwconv(in_type=DType.UINT8, in_zero_point=-1),
    "acc_addr": _dwconv(acc_addr=ACC_ENTRIES - 3),
}


@pytest.mark.parametrize("field", list(FAULTS))
def test_an_illegal_dwconv_faults_naming_its_field(field):
    memory = random_memory(SMALL, np.random.default_rng(5))
    with pytest.raises(ExecutionError, match=rf"CONV\[0\] DWCONV: field {field} = "):
        run(_program(SMALL, FAULTS[field]), memory)


def test_a_stride_2_tile_reads_each_phase_plane():
    """The DWCONV input of stride 2 both ways: plane (row mod 2, column mod 2) after plane, each ceil(5 / 2) =
    3 x 3 slots. A 3x3 kernel 1 .. 9 over a 5x5 tile holding 10 * row + column."""
    command = _dwconv(in_h=5, in_w=5, channels=1, stride_h=2, stride_w=2)
    assert conv_output_size(command) == (2, 2)
    memory = Memory.create(SMALL, 16)
    tile = np.array([[10 * y + x for x in range(5)] for y in range(5)])
    stored = []
    for p, q in [(0, 0), (0, 1), (1, 0), (1, 1)]:
        plane = np.zeros((3, 3), np.int64)
        phase = tile[p::2, q::2]
        plane[:phase.shape[0], :phase.shape[1]] = phase
        stored += list(plane.ravel())
    memory.buffers[Buffer.WEIGHT][:36] = stored
    weights = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9], np.int8)
    memory.buffers[Buffer.ACT][:9] = weights.view(np.uint8)
    got = run(_program(SMALL, command), memory).memory.buffers[Buffer.ACC].view(ACC_DTYPE)[:4]
    want = [sum(int(weights[3 * ky + kx]) * tile[2 * oy + ky, 2 * ox + kx] for ky in range(3) for kx in range(3))
            for oy in range(2) for ox in range(2)]
    assert list(got) == want
