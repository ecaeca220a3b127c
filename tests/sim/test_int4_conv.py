"""INT4 operands of CONV (docs/arithmetic.md D23): the packing, the interpreter against the golden definition on
the unpacked values, the faults, and the cycle formula's two products per MAC cell."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from aipu.sim.cosim.stimulus.base import unit_program
from aipu.sim.cosim.stimulus.conv import random_conv, random_memory
from aipu.sim.golden.conv import convolution
from aipu.sim.interpreter import ExecutionError, run
from aipu.sim.machine.arch import (ACC_DTYPE, DEFAULT, DTYPE_NUMPY, INT4_MAX, INT4_MIN, Buffer, DType, pack_int4,
                                   unpack_int4)
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.program import Command
from aipu.sim.timing.conv import command_cycles, conv_cycles
from tests.rtl.configs import CONFIGS


@given(hnp.arrays(np.int8, st.tuples(st.integers(1, 3), st.integers(1, 4).map(lambda n: 2 * n)),
                  elements=st.integers(INT4_MIN, INT4_MAX)))
def test_int4_packs_two_a_byte_low_nibble_first(values):
    packed = pack_int4(values)
    assert packed.shape == (values.shape[0], values.shape[1] // 2)
    assert np.array_equal(packed & 0xF, values[:, 0::2].astype(np.uint8) & 0xF)
    assert np.array_equal(unpack_int4(packed), values)


def test_pack_int4_refuses_values_outside_and_odd_counts():
    with pytest.raises(ValueError, match="value 8 is outside INT4's -8 .. 7"):
        pack_int4(np.array([1, 8]))
    with pytest.raises(ValueError, match="odd count"):
        pack_int4(np.array([1, 2, 3]))


def _operand(memory, buffer: Buffer, address: int, shape: tuple, dtype: DType) -> np.ndarray:
    """An operand's elements as int64, read the way D23 lays it out."""
    count = int(np.prod(shape))
    if dtype == DType.INT4:
        return unpack_int4(memory.buffers[buffer][address:address + count // 2]).astype(np.int64).reshape(shape)
    width = DTYPE_NUMPY[dtype].itemsize
    raw = memory.buffers[buffer][address:address + count * width]
    return raw.view(DTYPE_NUMPY[dtype]).astype(np.int64).reshape(shape)


def _expected_sums(command: Command, memory) -> np.ndarray:
    """The command's sums from the definition (golden's ``convolution``) on operands read independently of the
    interpreter: [out_h * out_w * out_c] int64, before the register's wrap."""
    c = command.args
    group_c = c["in_c"] // c["groups"]
    x = _operand(memory, Buffer.ACT, c["in_addr"], (c["in_h"], c["in_w"], c["in_c"]), DType(c["in_type"]))
    w = _operand(memory, Buffer.WEIGHT, c["wgt_addr"], (c["out_c"], c["k_h"], c["k_w"], group_c), DType(c["w_type"]))
    sums = convolution(x.transpose(2, 0, 1)[None], w.transpose(0, 3, 1, 2), c["in_zero_point"], c["w_zero_point"],
                       (c["stride_h"], c["stride_w"]), (0, 0, 0, 0), (c["dilation_h"], c["dilation_w"]), c["groups"])
    return sums[0].transpose(1, 2, 0).ravel()


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
def test_int4_convs_equal_the_definition_on_unpacked_operands(config):
    rng = np.random.default_rng(48)
    types = set()
    for _ in range(40):
        command = random_conv(config, rng, w_type=DType.INT4)
        types.add(DType(command.in_type))
        memory = random_memory(config, rng)
        before = memory.buffers[Buffer.ACC].view(ACC_DTYPE).astype(np.int64)
        sums = _expected_sums(command, memory)
        result = run(unit_program(config, [command], Unit.CONV), memory)
        first = command.acc_addr
        start = before[first:first + sums.size] if command.accumulate else 0
        expected = ((start + sums + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(ACC_DTYPE)
        got = result.memory.buffers[Buffer.ACC].view(ACC_DTYPE)[first:first + sums.size]
        assert np.array_equal(got, expected), command
    assert types == {DType.INT8, DType.UINT8, DType.INT4}


def _conv(**fields) -> Command:
    base = dict(in_h=3, in_w=3, in_c=4, in_type=DType.INT4, out_c=4, k_h=3, k_w=3, stride_h=1, stride_w=1,
                dilation_h=1, dilation_w=1, groups=1, w_type=DType.INT4)
    return Command.make(Opcode.CONV, **{**base, **fields})


@pytest.mark.parametrize("fields, message", [
    (dict(w_type=DType.INT8), "field in_type = INT4 needs w_type = INT4, not INT8"),
    (dict(in_c=6, groups=2), "field in_c: 3 channels a group; INT4 operands need an even count"),
    (dict(in_type=DType.INT8, in_c=3), "field in_c: 3 channels a group"),
    (dict(in_zero_point=8), "field in_zero_point = 8: outside INT4's -8..7"),
    (dict(in_type=DType.UINT8, in_zero_point=255, w_zero_point=-9), "field w_zero_point = -9: outside INT4's -8..7"),
    (dict(in_addr=DEFAULT.buffers.act.bytes - 17), "in_addr"),
])
def test_int4_faults_name_their_field(fields, message):
    with pytest.raises(ExecutionError, match=message):
        run(unit_program(DEFAULT, [_conv(**fields)], Unit.CONV), random_memory(DEFAULT, np.random.default_rng(0)))


def test_an_int4_tile_fits_where_its_int8_form_would_not():
    """An INT4 input of in_c channels takes in_c / 2 bytes a pixel: the last byte of ACT is its last."""
    act = DEFAULT.buffers.act.bytes
    command = _conv(in_addr=act - 3 * 3 * 4 // 2)
    run(unit_program(DEFAULT, [command], Unit.CONV), random_memory(DEFAULT, np.random.default_rng(0)))


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
def test_an_int4_layer_takes_about_half_the_cycles_of_its_int8_form(config):
    """A MAC-bound layer (3x3, 4 chunks of input channels, 16x16 pixels): INT4 weights and activations halve the
    blocks and keep the pixel rate, so the layer takes at most 0.55 of its int8 cycles."""
    shape = dict(groups=1, group_in=4 * 2 * config.mac.rows, group_out=2 * config.mac.cols, taps=9, pixels=256)
    int8 = conv_cycles(config, **shape)
    int4 = conv_cycles(config, **shape, w_type=DType.INT4, in_type=DType.INT4)
    assert int4 <= 0.55 * int8


def test_the_formula_reads_the_types_of_the_command():
    command = _conv(in_c=64, out_c=16, in_h=10, in_w=10)
    int8 = Command.make(Opcode.CONV, **{**command.args, "in_type": DType.INT8, "w_type": DType.INT8})
    assert command_cycles(DEFAULT, command) < command_cycles(DEFAULT, int8)
    assert command_cycles(DEFAULT, command) == conv_cycles(DEFAULT, groups=1, group_in=64, group_out=16, taps=9,
                                                           pixels=64, w_type=DType.INT4, in_type=DType.INT4)
