"""The cycle formulas (sim/timing/) sit below the RTL: the cycle model runs without Amaranth, and CONV's formula
takes a tile plan's numbers as well as a command. The RTL tests (tests/rtl/) check every command against the
formulas; tests/sim/test_cycle.py checks the cycle model built on them against the RTL."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from aipu.sim.cosim.stimulus.conv import random_dwconv
from aipu.sim.cosim.stimulus.dma import random_load, random_store
from aipu.sim.machine.arch import DEFAULT, Buffer, DType, hardware_config_from_dict
from aipu.sim.machine.errors import ExecutionError, InputError
from aipu.sim.machine.isa import Opcode, PoolMode
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command
from aipu.sim.timing import command_cycles
from aipu.sim.timing.conv import conv_cycles, conv_output_size, depthwise_cycles, useful_macs
from aipu.sim.timing.dma import dram_phases, least_cycles, load_dense, run_shape, walk_words
from aipu.sim.timing.pool import lanes, pool_lanes
from tests.rtl.configs import CONFIGS, SMALL

CYCLE_MODEL_ALONE = """
import sys
from aipu.sim.cycle import simulate
from aipu.sim.machine.arch import DEFAULT, Buffer, DType, hardware_config_from_dict
from aipu.sim.machine.errors import InputError
from aipu.sim.machine.isa import Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program

program = Program(DEFAULT)
program.append(Command.make(Opcode.LOAD, buffer=Buffer.ACT, sram_addr=0, dram_addr=0, elem_type=DType.INT8,
                            y_size=4, x_size=1, run=64, dram_y_stride=64, dram_x_stride=64, push={Unit.CONV}))
program.append(Command.make(Opcode.CONV, in_h=4, in_w=4, in_c=4, out_c=8, k_h=3, k_w=3, stride_h=1, stride_w=1,
                            dilation_h=1, dilation_w=1, groups=1, in_type=DType.INT8, pop={Unit.LOAD}))
program.append(Command.make(Opcode.FINISH, unit=Unit.CONV))
assert simulate(program, Memory.create(DEFAULT, 256)).total_cycles > 0
print(sorted(name for name in sys.modules if name.split(".")[0] in ("amaranth", "numba")))
"""


def test_the_cycle_model_imports_and_runs_without_amaranth_or_numba():
    """A program without WDEC is timed with neither Amaranth (the RTL) nor numba (WDEC's stream counts)."""
    run = subprocess.run([sys.executable, "-c", CYCLE_MODEL_ALONE], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", f"loaded by the cycle model: {run.stdout.strip()}"


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("groups, in_c, out_c, k, stride, size", [
    (1, 64, 64, 3, 1, 30), (1, 3, 16, 7, 2, 23), (4, 32, 64, 3, 1, 12), (32, 32, 32, 3, 2, 15), (1, 300, 20, 1, 1, 9)])
def test_a_tile_plan_s_numbers_give_the_conv_command_s_cycles(config, groups, in_c, out_c, k, stride, size):
    """What a tiler knows of a CONV (groups, channels per group, taps, output pixels) is all its cycles need."""
    conv = Command.make(Opcode.CONV, in_h=size, in_w=size + 3, in_c=in_c, out_c=out_c, k_h=k, k_w=k,
                        stride_h=stride, stride_w=stride, dilation_h=1, dilation_w=1, groups=groups,
                        in_type=DType.INT8)
    out_h, out_w = conv_output_size(conv)
    assert (out_h, out_w) == ((size - k) // stride + 1, (size + 3 - k) // stride + 1)
    planned = conv_cycles(config, groups=groups, group_in=in_c // groups, group_out=out_c // groups, taps=k * k,
                          pixels=out_h * out_w)
    assert planned == command_cycles(config, conv, Memory.create(config, 64))


def test_conv_cycles_gives_the_documented_count():
    """docs/rtl-conv.md, "Utilisation": a 3x3 conv of 16 to 16 channels over 16x16 output pixels on DEFAULT."""
    assert conv_cycles(DEFAULT, groups=1, group_in=16, group_out=16, taps=9, pixels=256) == 2324


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("channels, k, stride, size", [(16, 3, 1, 30), (5, 5, 2, 23), (3, 3, 3, 40), (8, 1, 1, 7)])
def test_a_depthwise_tile_s_numbers_give_the_dwconv_command_s_cycles(config, channels, k, stride, size):
    channels = min(channels, config.mac.rows)
    dwconv = Command.make(Opcode.DWCONV, in_h=size, in_w=size + 3, channels=channels, k_h=k, k_w=k,
                          stride_h=stride, stride_w=stride, dilation_h=1, dilation_w=1, in_type=DType.INT8)
    out_h, out_w = conv_output_size(dwconv)
    planned = depthwise_cycles(config, channels=channels, taps=k * k, out_h=out_h, out_w=out_w,
                               plane_w=-(-(size + 3) // stride))
    assert planned == command_cycles(config, dwconv, Memory.create(config, 64))
    assert useful_macs(dwconv) == out_h * out_w * channels * k * k


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
def test_no_dwconv_does_more_than_the_array_can(config):
    """Random DWCONVs: the useful MACs fit the array's cycles, and each block gets at least its taps' cycles."""
    rng = np.random.default_rng(2)
    for _ in range(300):
        command = random_dwconv(config, rng)
        cycles = command_cycles(config, command, Memory.create(config, 64))
        assert useful_macs(command) <= config.mac.rows * config.mac.cols * cycles, command
        out_h, out_w = conv_output_size(command)
        positions = (out_h - 1) * -(-command.in_w // command.stride_w) + out_w
        assert cycles >= -(-positions // config.mac.cols) * command.k_h * command.k_w, command


def test_depthwise_cycles_give_the_documented_count():
    """docs/rtl-conv.md, "Depthwise dataflow": 16 channels, 3x3, stride 1, 16x16 output pixels (18 input
    columns) on DEFAULT: 15 * 18 + 16 = 286 positions, 18 blocks of 9 taps (the drain of 1024 ACC bytes, 17
    words at the worst alignment, takes 9 cycles too)."""
    assert depthwise_cycles(DEFAULT, channels=16, taps=9, out_h=16, out_w=16, plane_w=18) \
        == 2 + 17 * 9 + 9 + 1 + 9 + 1 == 175


@pytest.mark.parametrize("config", list(CONFIGS.values()), ids=list(CONFIGS))
def test_a_plan_s_dram_words_are_the_walk_s_and_its_fixed_cycles_a_floor(config):
    """``walk_words`` counts the steps the DMA's walk takes, row by row, and every LOAD or STORE takes at least
    ``least_cycles`` besides them: the tiler weighs its plans with these two."""
    rng = np.random.default_rng(11)
    for i in range(400):
        command = (random_load if i % 2 else random_store)(config, rng, size=8)
        phases = dram_phases(config, command)
        gap = load_dense(command)[3] if command.opcode == Opcode.LOAD else 0
        rows, runs, run = run_shape(command, gap)
        words = sum(walk_words(config.dram.bytes_per_cycle, runs, run, command.dram_x_stride,
                               command.dram_addr + row * command.dram_y_stride) for row in range(rows))
        assert words == phases.words, command
        assert phases.cycles >= least_cycles(config, command.opcode) + words, command


def test_an_aligned_dense_load_takes_its_fixed_cycles_and_a_slot_per_word():
    """A LOAD of whole DRAM words into whole port words: nothing but the fixed cycles and the walk."""
    word = DEFAULT.dram.bytes_per_cycle
    load = Command.make(Opcode.LOAD, buffer=Buffer.ACT, sram_addr=0, dram_addr=4 * word, elem_type=DType.INT8,
                        y_size=6, x_size=10, run=word, dram_y_stride=10 * word, dram_x_stride=word)
    words = walk_words(word, 60, word, word, 4 * word)
    assert words == 60
    assert command_cycles(DEFAULT, load, Memory.create(DEFAULT, 64)) == least_cycles(DEFAULT, Opcode.LOAD) + words


def test_pool_takes_a_tap_of_a_group_of_channels_per_cycle():
    """docs/rtl-pool.md, "Cycles": ResNet-18's 3x3/2 max-pool of 112x112x64 on DEFAULT (8 lanes: 56 x 56
    outputs x 9 taps x 8 groups), and a partly filled last group costs as much as a full one."""
    fields = dict(in_h=112, in_w=112, dtype=DType.INT8, mode=PoolMode.MAX, k_h=3, k_w=3, stride_h=2, stride_w=2,
                  pad_top=1, pad_left=1, pad_bottom=1, pad_right=1)
    memory = Memory.create(DEFAULT, 64)
    for channels, groups in ((64, 8), (65, 9), (1, 1), (8, 1)):
        pool = Command.make(Opcode.POOL, channels=channels, **fields)
        assert command_cycles(DEFAULT, pool, memory) == 2 + 56 * 56 * 9 * groups + 3 + 1


def test_pool_lanes_fit_an_int16_group_into_one_word_of_every_port():
    narrow_act = hardware_config_from_dict({"buffers": {"act": {"port_bytes": 4}, "out": {"port_bytes": 16}}})
    one_byte_act = hardware_config_from_dict({"buffers": {"act": {"port_bytes": 1}}})
    assert [pool_lanes(config) for config in (DEFAULT, SMALL, narrow_act, one_byte_act)] == [8, 2, 2, 1]
    assert [lanes(config) for config in (DEFAULT, SMALL, narrow_act, one_byte_act)] == [8, 2, 4, 1]


def _wdec_cycles(config, stream: bytes, dram_addr: int, shape, parts: int) -> int:
    command = Command.make(Opcode.WDEC, dram_addr=dram_addr, length=len(stream), wgt_addr=0, out_c=shape[0],
                           in_c=shape[1], k_h=shape[2], k_w=shape[3], parts=parts)
    memory = Memory.create(config, dram_addr + len(stream))
    memory.dram[dram_addr:] = np.frombuffer(stream, np.uint8)
    return command_cycles(config, command, memory)


def test_wdec_parts_on_lanes_cost_the_header_then_at_least_the_slowest_part():
    """Hand-computed (docs/rtl-wdec.md, "Cycles"; the lanes' rules in sim/timing/npu_wdec.py): a part alone
    costs latency + 2 + its first words + bins + Morton skips + zero-run steps + 1, and the padding check's
    cycle; two parts on two lanes the header (requested from the third cycle, answered ``latency`` later),
    then the slower part as if alone from there, delayed by the faster's reads and writes by less than the
    faster part takes; idle lanes change nothing; a one-part stream the engine's formula, then its cube stager's
    flush of the last cube (docs/rtl-wdec.md, "Stager"). More parts than lanes are refused."""
    from aipu.codec.npu_profile import decode_profile_stream, encode_parts_stream, encode_profile_stream

    weights = np.random.default_rng(8).integers(-30, 31, size=(6, 20, 3, 3)).astype(np.int8)
    weights[3:] //= 8                                   # the second part has fewer bins
    stream, dram_addr = encode_parts_stream(weights, 2), 0x1005        # 5 bytes into a 16-byte DRAM word
    first, second = encode_profile_stream(weights[:3]), encode_profile_stream(weights[3:], continuation=True)
    assert stream == np.uint32(len(first)).tobytes() + np.uint32(len(second)).tobytes() + first + second

    def part(offset: int, part_stream: bytes, shape, continuation: bool = False) -> int:
        counts = decode_profile_stream(part_stream, shape, continuation=continuation)
        start = dram_addr + offset
        words = min((start + len(part_stream) - 1) // 16 - start // 16 + 1, -(-(8 * (start % 16) + 26) // 128))
        return 100 + 2 + words + counts.bins + counts.morton_skips + counts.zero_run_cycles + 1

    shape = (3, 20, 3, 3)
    slow, fast = part(8, first, shape), part(8 + len(first), second, shape, continuation=True)
    assert slow > fast
    header = 2 + 100                                     # bytes 0x1005 .. 0x100c: one DRAM word
    two = hardware_config_from_dict({"wdec": {"engines": 2}})
    cycles = _wdec_cycles(two, stream, dram_addr, weights.shape, 2)
    assert header + slow + 1 <= cycles < header + slow + 1 + fast
    assert _wdec_cycles(hardware_config_from_dict({"wdec": {"engines": 4}}), stream, dram_addr, weights.shape,
                        2) == cycles
    with pytest.raises(ExecutionError, match="parts = 2"):
        _wdec_cycles(DEFAULT, stream, dram_addr, weights.shape, 2)
    whole = encode_profile_stream(weights)
    # the last cube in Morton order: kernels 0..5, tap 8, channels 16..19, six rows of 4 bytes at wgt_addr
    # (k * 9 + 8) * 20 + 16, none across a 256-byte WEIGHT word: flushed the cycle after the padding check, six
    # writes, DONE after them (no cube here closes while its predecessor drains: no hold)
    assert _wdec_cycles(two, whole, dram_addr, weights.shape, 1) == part(0, whole, weights.shape) + 1 + 2 + 6


def test_wdec_bins_per_cycle_takes_each_leaf_in_cascades_of_b_bins():
    """Hand-counted (docs/rtl-wdec.md, "Cycles"): levels 0, 3 and -20 of a 1x1x1x3 tensor take 1 bin
    (uni_map_nzflag), 6 (nzflag, sign, three unary ones and a zero) and 23 (nzflag, sign, 16 unary ones, then
    the Exp-Golomb 0 code of 4: '110' and suffix '01'), so B = 2 needs 1 + 3 + 12 cycles for them and B = 4
    1 + 2 + 6 (no zero-run step falls inside them: each leaf is one run); every other bin (header, flags,
    end flag, stuffing) stays one a cycle, as do Morton skips and zero-run steps, and the engine waits for
    B·26 bits before its start. The one cube (3 rows of one byte) is flushed after the padding check: 2 + 3."""
    from aipu.codec.npu_profile import decode_profile_stream, encode_profile_stream

    weights = np.array([0, 3, -20], np.int8).reshape(1, 1, 1, 3)
    stream = encode_profile_stream(weights)
    counts = decode_profile_stream(stream, weights.shape)
    assert {int(n): int(counts.leaf_runs[n]) for n in np.nonzero(counts.leaf_runs)[0]} == {1: 1, 6: 1, 23: 1}
    dram_addr = 0x40 + 11                                                   # 11 bytes into a 16-byte word
    other = counts.bins - (1 + 6 + 23)
    for bins_per_cycle, leaves in ((1, 30), (2, 1 + 3 + 12), (4, 1 + 2 + 6)):
        config = hardware_config_from_dict({"wdec": {"bins_per_cycle": bins_per_cycle}})
        words = min(-(-(dram_addr + len(stream)) // 16) - dram_addr // 16, -(-(88 + 26 * bins_per_cycle) // 128))
        expected = 1 + 100 + 2 + words + other + leaves + counts.morton_skips + counts.zero_run_cycles + 1 + 2 + 3
        assert _wdec_cycles(config, stream, dram_addr, weights.shape, 1) == expected


@pytest.mark.parametrize("bins_per_cycle", [0, 3, 8])
def test_wdec_bins_per_cycle_is_1_2_or_4(bins_per_cycle):
    with pytest.raises(InputError, match="wdec.bins_per_cycle"):
        hardware_config_from_dict({"wdec": {"bins_per_cycle": bins_per_cycle}})
