"""LOAD of codebook indices (index_bits > 0): the golden expansion, the interpreter against it, its faults in
the hardware's order, the race check of the codebook read, the cycle formula and the DRAM bytes counted."""
from __future__ import annotations

import numpy as np
import pytest

from aipu.sim import golden
from aipu.sim.cycle import simulate
from aipu.sim.interpreter import ExecutionError, prepare, run
from aipu.sim.machine.arch import DEFAULT, Buffer, DType, pack_indices, unpack_indices
from aipu.sim.machine.isa import CODEBOOK_SLOT_BYTES, IndexBits, Opcode, Unit
from aipu.sim.machine.memory import Memory
from aipu.sim.machine.program import Command, Program
from aipu.sim.timing.dma import command_cycles
from tests.rtl.configs import SMALL

RNG = np.random.default_rng(115)


@pytest.mark.parametrize("bits", [1, 2, 4])
def test_indices_pack_low_bits_first_and_round_trip(bits):
    indices = RNG.integers(0, 1 << bits, (3, 8 * 4))
    packed = pack_indices(indices, bits)
    assert packed.shape == (3, 8 * 4 * bits // 8)
    assert np.array_equal(unpack_indices(packed, bits), indices)
    first = np.array([1] + [0] * (8 // bits - 1))
    assert pack_indices(first, bits).tolist() == [1]       # index 0 of a byte is its lowest bits


def test_golden_expansion_maps_each_index_to_its_entry():
    codebook = np.array([-128, -1, 5, 127], np.int8)
    assert golden.expand_codebook(np.array([0b11100100, 0b00011011], np.uint8), codebook, 2).tolist() == \
        [-128, -1, 5, 127, 127, 5, -1, -128]
    with pytest.raises(ValueError, match="codebook entries"):
        golden.expand_codebook(np.zeros(1, np.uint8), codebook[:3], 2)
    with pytest.raises(ValueError, match="index bits 3"):
        golden.expand_codebook(np.zeros(1, np.uint8), np.zeros(8, np.int8), 3)


def _program(*commands: Command, config=DEFAULT) -> Program:
    program = Program(config)
    for command in commands:
        program.append(command)
    program.append(Command.make(Opcode.FINISH, unit=Unit.LOAD))
    return program


def _codebook_load(**fields) -> Command:
    return Command.make(Opcode.LOAD, **{**dict(buffer=Buffer.WEIGHT, elem_type=DType.INT8, index_bits=IndexBits.TWO,
                                               codebook_addr=3, run=8), **fields})


def test_load_expands_a_padded_strided_tile_as_the_golden_model():
    bits, rows, cols, run_ = 4, 3, 2, 6
    dram = RNG.integers(0, 256, 4096, dtype=np.uint8)
    codebook = RNG.integers(-128, 128, 1 << bits, dtype=np.int8)
    memory = Memory.create(DEFAULT, dram.tobytes())
    memory.buffers[Buffer.LUT][5 * CODEBOOK_SLOT_BYTES:][:codebook.size] = codebook.view(np.uint8)
    load = _codebook_load(index_bits=IndexBits.FOUR, codebook_addr=5, sram_addr=7, dram_addr=101, y_size=rows,
                          x_size=cols, run=run_, dram_y_stride=40, dram_x_stride=5, pad_top=1, pad_left=2,
                          pad_right=1, pad_value=-3)
    result = run(_program(load), memory)
    packed = np.stack([np.stack([dram[101 + y * 40 + x * 5:][:run_ // 2] for x in range(cols)]) for y in range(rows)])
    expected = np.full((rows + 1, cols + 3, run_), -3, np.int8)
    expected[1:, 2:2 + cols] = golden.expand_codebook(packed, codebook, bits)
    tile = result.memory.buffers[Buffer.WEIGHT][7:7 + expected.size].view(np.int8)
    assert np.array_equal(tile, expected.reshape(-1))
    assert result.stats.bytes_moved["DRAM->WEIGHT"] == rows * cols * run_ // 2


FAULTS = {   # each also breaks every check after its own: the first in the hardware's order is named
    "buffer": dict(buffer=Buffer.ACT, elem_type=DType.INT16, run=7, codebook_addr=0xFFFF),
    "elem_type": dict(elem_type=DType.INT16, run=7, codebook_addr=0xFFFF),
    "run": dict(run=7, codebook_addr=0xFFFF, dram_addr=1 << 20),
    "codebook_addr": dict(codebook_addr=DEFAULT.buffers.lut.bytes // CODEBOOK_SLOT_BYTES, dram_addr=1 << 20),
    "dram_addr": dict(dram_addr=4096 - 1, pad_value=300, pad_top=1),
    "pad_value": dict(pad_value=-129, pad_top=1, sram_addr=DEFAULT.buffers.weight.bytes - 4),
    "sram_addr": dict(sram_addr=DEFAULT.buffers.weight.bytes - 4),
}


@pytest.mark.parametrize("field", list(FAULTS))
def test_faults_name_the_first_field_in_the_hardware_order(field):
    with pytest.raises(ExecutionError, match=rf"field {field} = "):
        run(_program(_codebook_load(**FAULTS[field])), Memory.create(DEFAULT, bytes(4096)))


def test_the_last_codebook_slot_that_fits_is_legal():
    last = (DEFAULT.buffers.lut.bytes - 16) // CODEBOOK_SLOT_BYTES
    run(_program(_codebook_load(index_bits=IndexBits.FOUR, codebook_addr=last)), Memory.create(DEFAULT, bytes(64)))


def test_the_codebook_is_a_read_of_lut_memory_and_the_dram_traffic_is_packed():
    """What the race check and the report see: the codebook's bytes read from LUT memory (only LOAD writes
    there, in its own queue, so that read is ordered after the table's LOAD by the queue itself)."""
    table = Command.make(Opcode.LOAD, buffer=Buffer.LUT, sram_addr=3 * CODEBOOK_SLOT_BYTES, elem_type=DType.INT8,
                         run=4)
    prepared = prepare(_program(table, _codebook_load(run=16)), 64)
    assert prepared.steps[Unit.LOAD, 1].traffic == (("LUT", False, 4), ("DRAM", False, 4), ("WEIGHT", True, 16))


@pytest.mark.parametrize("config, bits, tile, expected, plain", [
    (DEFAULT, IndexBits.FOUR, 256, 1 + 4 + 8 + 100 + 1, 1 + 16 + 100 + 1),   # 8 DRAM words, codebook 4 LUT words
    (SMALL, IndexBits.ONE, 64, 1 + 1 + 16 + 7 + 1, 1 + 16 + 7 + 1),          # 2 DRAM words of 8 WEIGHT words each
], ids=["default-4bit", "small-1bit-write-port-bound"])
def test_cycle_formula(config, bits, tile, expected, plain):
    """Expanding LOADs: one slot per DRAM word of packed indices, as long as the WEIGHT words it writes; the
    codebook's LUT words read before the probe."""
    load = _codebook_load(index_bits=bits, run=tile, codebook_addr=0)
    assert command_cycles(config, load) == expected
    assert command_cycles(config, _codebook_load(index_bits=IndexBits.PLAIN, run=tile)) == plain


def test_cycle_model_counts_the_packed_dram_bytes():
    load = _codebook_load(index_bits=IndexBits.TWO, run=1024, codebook_addr=0)
    timing = simulate(_program(load), Memory.create(DEFAULT, bytes(4096)))
    assert timing.dram_bytes[Unit.LOAD] == 256
